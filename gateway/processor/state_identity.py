"""Local state belongs to the cluster and the changelog it was built from.

The RocksDB state in a processor's state directory is a cache of its changelog
topic. Opened against another cluster (a local one purged and made anew) or a
changelog deleted and created again, it would decide from jobs that log never
held: a first request refused as a duplicate of a job nobody can find. So the
directory records where its state came from, the cluster id and each
changelog's topic id, and when either differs the state is deleted before the
processor opens it; it then restores it from the changelog.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

import orjson
from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient

from gateway.home import gateway_home

log = logging.getLogger("gateway.processor")

IDENTITY_FILE = "identity.json"
TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Identity:
    cluster_id: str
    changelogs: dict[str, str]  # changelog topic name -> topic id
    # The version of the local layout (store.LAYOUT); 0: none recorded.
    layout: int = 0


def state_root() -> Path:
    """Where processors keep their state by default: state/<group>/<instance> under the home."""
    return gateway_home() / "state"


def current(admin: AdminClient, changelogs: Iterable[str], layout: int) -> Identity:
    """The cluster's id and the topic ids of `changelogs`, as the brokers say now, for
    state of `layout`.

    The changelogs exist (changelogs.ensure), but one created a moment ago may be unknown
    to the broker asked for a while: it is asked again until it answers. An identity
    without them would differ from the next start's, which would then delete the state.
    """
    cluster = admin.describe_cluster(request_timeout=TIMEOUT_S).result()
    names = sorted(changelogs)
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        described = admin.describe_topics(TopicCollection(names), request_timeout=TIMEOUT_S)
        try:
            ids = {name: str(described[name].result().topic_id) for name in names}
            return Identity(str(cluster.cluster_id), ids, layout)
        except KafkaException as exc:
            unknown = exc.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
            if not unknown or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def recorded(state_dir: Path) -> Identity | None:
    try:
        return Identity(**orjson.loads((state_dir / IDENTITY_FILE).read_bytes()))
    except (OSError, orjson.JSONDecodeError, TypeError):
        return None


def reconcile(state_dir: Path, identity: Identity, keep: str | None = None) -> bool:
    """Make `state_dir` belong to `identity`; True if it held state from elsewhere, now gone.

    With `keep` (the processor's stores), only it and the identity file belong there:
    anything else is a previous version's state, in a layout this one does not read."""
    before = recorded(state_dir)
    foreign = before != identity
    kept = {IDENTITY_FILE} if foreign else {IDENTITY_FILE, keep}
    stale = [p for p in state_dir.glob("*") if p.name not in kept and (foreign or keep)]
    for path in stale:
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
    if stale:
        log.warning(
            "local state was built from another cluster or changelog, or by a previous "
            "version; deleted it, the processor restores it from the changelog",
            extra={
                "state_dir": str(state_dir),
                "was": asdict(before) if before else None,
                "now": asdict(identity),
            },
        )
    if not foreign:
        return bool(stale)
    state_dir.mkdir(parents=True, exist_ok=True)
    tmp = state_dir / f".{IDENTITY_FILE}.tmp"
    tmp.write_bytes(orjson.dumps(asdict(identity)))
    tmp.replace(state_dir / IDENTITY_FILE)
    return bool(stale)


def purge(cluster_id: str, root: Path | None = None) -> list[Path]:
    """Delete the processor state under `root` built from `cluster_id` (or of unknown origin)."""
    root = root or state_root()
    deleted = []
    for state_dir in sorted(p for p in root.glob("*/*") if p.is_dir()):
        identity = recorded(state_dir)
        if identity is None or identity.cluster_id == cluster_id:
            shutil.rmtree(state_dir, ignore_errors=True)
            deleted.append(state_dir)
            if not any(state_dir.parent.iterdir()):
                state_dir.parent.rmdir()
    return deleted
