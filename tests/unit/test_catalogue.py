from pathlib import Path

import pytest

from gateway import catalogue
from gateway.catalogue import ROLES, CatalogueError


def test_every_role_has_one_topic_with_a_schema():
    cat = catalogue.load()
    assert sorted(t.role for t in cat.topics) == sorted(ROLES)
    for topic in cat.topics:
        assert topic.schema is not None and topic.schema.exists()


def test_inputs_use_broker_time_and_requests_events_decisions_are_copartitioned():
    cat = catalogue.load()
    for role in ("intake", "requests", "job_events"):
        assert cat.by_role(role).config["message.timestamp.type"] == "LogAppendTime"
    group = cat.copartition_groups()["dedup"]
    assert {t.role for t in group} == {"requests", "job_events", "decisions"}
    assert len({t.partitions for t in group}) == 1


def test_namespace_prefixes_every_name():
    cat = catalogue.load(namespace="ns1")
    assert all(t.name.startswith("ns1.") for t in cat.topics)
    assert cat.name("requests") == "ns1." + catalogue.load(namespace="").name("requests")


def test_replication_and_min_isr_are_capped_by_the_cluster_size():
    spec = catalogue.load().by_role("requests")
    one = spec.for_cluster(1)
    assert (one.replication_factor, one.config["min.insync.replicas"]) == (1, "1")
    three = spec.for_cluster(3)
    assert (three.replication_factor, three.config["min.insync.replicas"]) == (3, "2")


def _write(tmp_path: Path, text: str) -> Path:
    schemas = tmp_path / "schemas"
    schemas.mkdir()
    (schemas / "x.json").write_text("{}")
    path = tmp_path / "topics.toml"
    path.write_text(text)
    return path


def _catalogue_text(job_events_partitions: int = 4, extra: str = "") -> str:
    topics = []
    for role in ROLES:
        parts = job_events_partitions if role == "job_events" else 4
        group = 'copartition = "dedup"\n' if role in ("requests", "job_events") else ""
        topics.append(
            f'[[topic]]\nrole = "{role}"\nname = "{role}"\npartitions = {parts}\n'
            f'schema = "schemas/x.json"\n{group}{extra}'
        )
    return "\n".join(topics)


def test_copartitioned_topics_with_different_partition_counts_are_refused(tmp_path):
    path = _write(tmp_path, _catalogue_text(job_events_partitions=6))
    with pytest.raises(CatalogueError, match="co-partition group 'dedup'.*same partition count"):
        catalogue.load(path)


def test_unknown_field_and_missing_role_are_refused(tmp_path):
    with pytest.raises(CatalogueError, match="unknown field"):
        catalogue.load(_write(tmp_path, _catalogue_text(extra='colour = "red"\n')))
    path = tmp_path / "only.toml"
    path.write_text('[[topic]]\nrole = "jobs"\nname = "j"\npartitions = 1\n')
    with pytest.raises(CatalogueError, match="no topic for role"):
        catalogue.load(path)


def test_missing_file_names_the_variable(tmp_path):
    with pytest.raises(CatalogueError, match="GATEWAY_CATALOGUE"):
        catalogue.load(tmp_path / "nope.toml")


def test_replies_carry_decision_records_and_are_not_copartitioned():
    replies = catalogue.load().by_role("replies")
    assert replies.name == "gateway.replies" and replies.partitions == 8
    assert replies.schema is not None and replies.schema.name == "decision.json"
    assert replies.copartition is None
    assert replies.config["cleanup.policy"] == "delete"
    assert replies.config["retention.ms"] == "3600000"
