"""The topic catalogue (topics/topics.toml): the one place topics are named.

Loading is pure: it validates the file and resolves names under an optional
namespace (tests and side-by-side deployments use their own topics).
"""

from __future__ import annotations

import os
import tomllib
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROLES = (
    "intake", "requests", "job_events", "jobs", "cancellations", "rejections", "decisions",
    "job_states", "replies", "dead_letters",
)  # fmt: skip
_FIELDS = {
    "role", "name", "partitions", "replication_factor", "config", "schema",
    "copartition", "description",
}  # fmt: skip


class CatalogueError(Exception):
    """The catalogue file is missing, malformed or inconsistent."""


@dataclass(frozen=True)
class TopicSpec:
    role: str
    name: str
    partitions: int
    replication_factor: int
    config: dict[str, str] = field(default_factory=dict)
    schema: Path | None = None
    copartition: str | None = None
    description: str = ""

    def for_cluster(self, brokers: int) -> TopicSpec:
        """This topic as created on a cluster of `brokers` nodes.

        The replication factor, and min.insync.replicas with it, cannot exceed
        the broker count, else no write with acks=all could ever succeed.
        """
        rf = min(self.replication_factor, brokers)
        config = dict(self.config)
        if "min.insync.replicas" in config:
            config["min.insync.replicas"] = str(min(int(config["min.insync.replicas"]), rf))
        return TopicSpec(
            self.role, self.name, self.partitions, rf, config, self.schema,
            self.copartition, self.description,
        )  # fmt: skip


@dataclass(frozen=True)
class Catalogue:
    topics: tuple[TopicSpec, ...]

    def by_role(self, role: str) -> TopicSpec:
        for topic in self.topics:
            if topic.role == role:
                return topic
        raise KeyError(role)

    def name(self, role: str) -> str:
        return self.by_role(role).name

    def copartition_groups(self) -> dict[str, list[TopicSpec]]:
        groups: dict[str, list[TopicSpec]] = defaultdict(list)
        for topic in self.topics:
            if topic.copartition:
                groups[topic.copartition].append(topic)
        return dict(groups)


def default_path() -> Path:
    """$GATEWAY_CATALOGUE, else topics/topics.toml of this checkout."""
    env = os.environ.get("GATEWAY_CATALOGUE")
    if env:
        return Path(env)
    return Path(__file__).resolve().parent.parent / "topics" / "topics.toml"


def load(path: Path | None = None, namespace: str | None = None) -> Catalogue:
    """Read and check the catalogue; prefix every name with `namespace.` if given."""
    path = path or default_path()
    try:
        raw = tomllib.loads(path.read_text())
    except FileNotFoundError as exc:
        raise CatalogueError(
            f"topic catalogue not found at {path} (set GATEWAY_CATALOGUE)"
        ) from exc
    except tomllib.TOMLDecodeError as exc:
        raise CatalogueError(f"{path}: {exc}") from exc
    namespace = namespace if namespace is not None else os.environ.get("GATEWAY_NAMESPACE")
    topics = tuple(_topic(entry, path, namespace) for entry in raw.get("topic", []))
    catalogue = Catalogue(topics)
    _check(catalogue, path)
    return catalogue


def _topic(entry: dict[str, Any], path: Path, namespace: str | None) -> TopicSpec:
    where = f"{path}: topic {entry.get('name', '?')!r}"
    unknown = set(entry) - _FIELDS
    if unknown:
        raise CatalogueError(f"{where}: unknown field(s) {sorted(unknown)}")
    for key, kind in (("role", str), ("name", str), ("partitions", int)):
        if not isinstance(entry.get(key), kind):
            raise CatalogueError(f"{where}: `{key}` must be a {kind.__name__}")
    if entry["role"] not in ROLES:
        raise CatalogueError(f"{where}: unknown role {entry['role']!r}; roles are {ROLES}")
    if entry["partitions"] < 1:
        raise CatalogueError(f"{where}: `partitions` must be at least 1")
    config = entry.get("config", {})
    if not all(isinstance(v, str) for v in config.values()):
        raise CatalogueError(f"{where}: config values must be strings")
    schema = entry.get("schema")
    name = f"{namespace}.{entry['name']}" if namespace else entry["name"]
    return TopicSpec(
        role=entry["role"],
        name=name,
        partitions=entry["partitions"],
        replication_factor=int(entry.get("replication_factor", 1)),
        config=dict(config),
        schema=(path.parent / schema) if schema else None,
        copartition=entry.get("copartition"),
        description=entry.get("description", ""),
    )


def _check(catalogue: Catalogue, path: Path) -> None:
    roles = [t.role for t in catalogue.topics]
    missing = [r for r in ROLES if r not in roles]
    if missing:
        raise CatalogueError(f"{path}: no topic for role(s) {missing}")
    repeated = {r for r in roles if roles.count(r) > 1}
    if repeated:
        raise CatalogueError(f"{path}: role(s) {sorted(repeated)} appear more than once")
    for topic in catalogue.topics:
        if topic.schema is not None and not topic.schema.exists():
            raise CatalogueError(f"{path}: schema {topic.schema} of {topic.name} does not exist")
    check_copartitioned({t.name: t.partitions for t in catalogue.topics}, catalogue)


def check_copartitioned(partitions: dict[str, int], catalogue: Catalogue) -> None:
    """Raise if topics of one co-partition group differ in partition count."""
    for group, members in catalogue.copartition_groups().items():
        counts = {t.name: partitions[t.name] for t in members if t.name in partitions}
        if len(set(counts.values())) > 1:
            listed = ", ".join(f"{n} has {c}" for n, c in counts.items())
            raise CatalogueError(
                f"topics of co-partition group {group!r} must have the same partition count "
                f"({listed}): a fingerprint's requests and job events must meet on one partition"
            )
