"""`gateway topics apply` against a real broker."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from gateway import catalogue
from tests.integration.cli import gateway

pytestmark = pytest.mark.kafka


def _describe(admin: AdminClient, name: str) -> dict[str, str]:
    resource = ConfigResource(ConfigResource.Type.TOPIC, name)
    return {k: v.value for k, v in admin.describe_configs([resource])[resource].result().items()}


def test_apply_creates_the_whole_catalogue_then_is_idempotent(kafka_bootstrap, namespace):
    first = gateway("topics", "apply", "--bootstrap", kafka_bootstrap, "--namespace", namespace)
    assert first.returncode == 0, first.stderr
    count = len(catalogue.load().topics)
    assert f"{count} created, 0 already matching" in first.stdout

    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    metadata = admin.list_topics(timeout=10)
    for spec in catalogue.load(namespace=namespace).topics:
        assert len(metadata.topics[spec.name].partitions) == spec.partitions
        actual = _describe(admin, spec.name)
        for key, value in spec.for_cluster(len(metadata.brokers)).config.items():
            assert actual[key] == value, (spec.name, key)

    second = gateway("topics", "apply", "--bootstrap", kafka_bootstrap, "--namespace", namespace)
    assert second.returncode == 0 and f"0 created, {count} already matching" in second.stdout


def test_apply_refuses_a_topic_with_other_partitions(kafka_bootstrap, namespace):
    name = catalogue.load(namespace=namespace).name("job_events")
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(name, 3, 1)])[name].result()
    result = gateway("topics", "apply", "--bootstrap", kafka_bootstrap, "--namespace", namespace)
    assert result.returncode == 1
    assert f"{name} has 3 partitions, the catalogue says 8" in result.stderr
    assert "created" not in result.stdout  # nothing half-applied


def test_apply_refuses_a_conflicting_config(kafka_bootstrap, namespace):
    name = catalogue.load(namespace=namespace).name("requests")
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(name, 8, 1, config={"message.timestamp.type": "CreateTime"})])[
        name
    ].result()
    result = gateway("topics", "apply", "--bootstrap", kafka_bootstrap, "--namespace", namespace)
    assert result.returncode == 1
    assert "message.timestamp.type is 'CreateTime', want 'LogAppendTime'" in result.stderr


def test_apply_reports_an_unreachable_broker_in_one_line():
    result = gateway("topics", "apply", "--bootstrap", "127.0.0.1:1", timeout=120)
    assert result.returncode == 3
    assert result.stderr.startswith("gateway: no Kafka broker answered at 127.0.0.1:1")
