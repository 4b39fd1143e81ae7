"""The changelog topics of the processor's stores: named, created and checked here.

One compacted topic per stateful input (`requests`), with its
partition count, so partition p's store logs to changelog partition p:
`changelog__<group>--<input topic>--state`. A gateway before the processor
had its own loop kept state in `changelog__<group>--<input topic>--default`,
in a format this version does not read; a group whose state is only there is
refused at start with what to do (see `check_upgrade`).
"""

from __future__ import annotations

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from gateway.catalogue import Catalogue, CatalogueError

STATEFUL = ("requests",)
TIMEOUT_S = 30.0
_CONFIG = {"cleanup.policy": "compact", "max.message.bytes": "1048588"}


def changelog_name(group: str, topic: str) -> str:
    return f"changelog__{group}--{topic}--state"


def previous_name(group: str, topic: str) -> str:
    """Where a gateway before 0.2 kept the same state."""
    return f"changelog__{group}--{topic}--default"


def changelogs(catalogue: Catalogue, group: str) -> dict[str, str]:
    """Stateful role -> its changelog topic."""
    return {role: changelog_name(group, catalogue.name(role)) for role in STATEFUL}


def ensure(catalogue: Catalogue, group: str, admin: AdminClient) -> None:
    """Create the missing changelogs; refuse ones whose partition count is not their input's,
    and a group whose state a previous version kept."""
    metadata = admin.list_topics(timeout=TIMEOUT_S)
    existing = {name: len(t.partitions) for name, t in metadata.topics.items()}
    brokers = len(metadata.brokers)
    missing = []
    for role, name in changelogs(catalogue, group).items():
        spec = catalogue.by_role(role)
        if name not in existing:
            check_upgrade(group, spec.name, existing)
            rf = spec.for_cluster(brokers).replication_factor
            missing.append(NewTopic(name, spec.partitions, rf, config=_CONFIG))
        elif existing[name] != spec.partitions:
            raise CatalogueError(
                f"{name} has {existing[name]} partitions and {spec.name} {spec.partitions}: "
                "a changelog must have its input's; delete it (its state is then lost) or "
                "give the input its old count"
            )
    if not missing:
        return
    for name, future in admin.create_topics(missing, operation_timeout=TIMEOUT_S).items():
        try:
            future.result()
        except KafkaException as exc:
            if exc.args[0].name() != "TOPIC_ALREADY_EXISTS":  # another runtime raced us
                raise CatalogueError(f"creating {name} failed: {exc.args[0].str()}") from exc


def check_upgrade(group: str, topic: str, existing: dict[str, int]) -> None:
    """Refuse to start a group afresh when a previous version's state for it exists."""
    previous = previous_name(group, topic)
    if previous in existing:
        raise CatalogueError(
            f"the state of consumer group {group} is in {previous}, written by a gateway before "
            "0.2, which this version does not read: start this version under a new "
            "--namespace and move producers to it once the old processors have drained their "
            f"input, or delete {previous} to start {group} with empty state"
        )
