"""Create or check the catalogue's topics on a cluster, idempotently."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from gateway.catalogue import Catalogue, CatalogueError, TopicSpec, check_copartitioned

TIMEOUT_S = 30.0


@dataclass(frozen=True)
class ApplyReport:
    created: list[str]
    unchanged: list[str]
    brokers: int


def apply(catalogue: Catalogue, client_config: dict[str, str]) -> ApplyReport:
    """Create missing topics; verify existing ones match partitions and config.

    Conflicts are reported all at once, before anything is created, so a
    conflict never leaves the catalogue half applied.
    """
    # The admin client's connection noise would bury the one-line error we raise.
    admin = AdminClient({"log_level": "0", **client_config})
    metadata = admin.list_topics(timeout=TIMEOUT_S)
    brokers = len(metadata.brokers)
    wanted = [t.for_cluster(brokers) for t in catalogue.topics]
    existing = {name: len(t.partitions) for name, t in metadata.topics.items()}
    present = [t for t in wanted if t.name in existing]
    _raise_conflicts(admin, present, existing)
    check_copartitioned(existing | {t.name: t.partitions for t in wanted}, catalogue)

    missing = [t for t in wanted if t.name not in existing]
    raced = _create(admin, missing)
    if raced:
        # Someone created these between our metadata read and our create: check
        # theirs exactly as if they had existed from the start.
        _raise_conflicts(admin, raced, _partition_counts(admin, [t.name for t in raced]))
    created = [t.name for t in missing if t not in raced]
    return ApplyReport(created, [t.name for t in wanted if t.name not in created], brokers)


def check(catalogue: Catalogue, admin: AdminClient, wait_s: float = TIMEOUT_S) -> None:
    """Raise CatalogueError unless every topic of the catalogue exists with its partition
    count. The processor routes by partition number: a topic with another count would send
    records to partitions whose owner re-routes them, for ever.

    Topics created a moment ago may be missing from a broker's metadata for a while, so a
    missing topic is waited for (up to `wait_s`) before it counts as missing."""
    names = [t.name for t in catalogue.topics]
    counts = _partition_counts(admin, names, wait_s)
    missing = [n for n in names if n not in counts]
    if missing:
        raise CatalogueError(
            f"topic(s) {', '.join(missing)} do not exist: run `gateway topics apply` first"
        )
    problems = _partition_problems(catalogue.topics, counts)
    if problems:
        raise CatalogueError(
            "the topics differ from the catalogue: "
            + "; ".join(problems)
            + "; change the topics or the catalogue (topics/topics.toml) so they agree"
        )


def _partition_counts(
    admin: AdminClient, names: list[str], wait_s: float = TIMEOUT_S
) -> dict[str, int]:
    """Partition counts of topics known to exist, waiting for metadata to catch up."""
    deadline = time.monotonic() + wait_s
    while True:
        topics = admin.list_topics(timeout=TIMEOUT_S).topics
        if all(n in topics for n in names) or time.monotonic() > deadline:
            return {n: len(t.partitions) for n, t in topics.items()}
        time.sleep(0.2)


def _create(admin: AdminClient, topics: list[TopicSpec]) -> list[TopicSpec]:
    """Create `topics`; return those that turned out to exist already."""
    if not topics:
        return []
    futures = admin.create_topics(
        [NewTopic(t.name, t.partitions, t.replication_factor, config=t.config) for t in topics],
        operation_timeout=TIMEOUT_S,
    )
    raced = []
    for topic in topics:
        try:
            futures[topic.name].result()
        except KafkaException as exc:
            if exc.args[0].name() != "TOPIC_ALREADY_EXISTS":
                raise CatalogueError(f"creating {topic.name} failed: {exc.args[0].str()}") from exc
            raced.append(topic)
    return raced


def _raise_conflicts(
    admin: AdminClient, topics: list[TopicSpec], partitions: dict[str, int]
) -> None:
    problems = _partition_problems(topics, partitions) + _config_conflicts(admin, topics)
    if problems:
        raise CatalogueError(
            "existing topics conflict with the catalogue:\n  "
            + "\n  ".join(problems)
            + "\nchange the topics or the catalogue (topics/topics.toml) so they agree"
        )


def _partition_problems(topics: Iterable[TopicSpec], partitions: dict[str, int]) -> list[str]:
    return [
        f"{t.name} has {partitions.get(t.name)} partitions, the catalogue says {t.partitions}"
        for t in topics
        if partitions.get(t.name) != t.partitions
    ]


def _config_conflicts(admin: AdminClient, topics: list[TopicSpec]) -> list[str]:
    if not topics:
        return []
    resources = [ConfigResource(ConfigResource.Type.TOPIC, t.name) for t in topics]
    futures = admin.describe_configs(resources, request_timeout=TIMEOUT_S)
    by_name = {t.name: t for t in topics}
    problems = []
    for resource, future in futures.items():
        actual = {k: v.value for k, v in future.result().items()}
        for key, value in by_name[resource.name].config.items():
            if actual.get(key) != value:
                problems.append(f"{resource.name}: {key} is {actual.get(key)!r}, want {value!r}")
    return problems
