"""The binding's view of jobs: the `job_states` topic materialised into a local RocksDB.

The processor decides every transition and writes each job's current state to
`job_states` (compacted, keyed by job id). This view only copies it: a record
replaces the job, a tombstone removes it. Each batch of records is written
with the offsets it reaches in one RocksDB write batch, so a restarted
`gateway serve` resumes where it stopped instead of reading everything again,
and memory holds no jobs (they live on disk).

Bounded like the processor's store. A terminal job's record expires from the
processor's store `retention_ms` after it ended (`core.job_expires_at`); its
tombstone on `job_states` follows once the partition's event time has moved
past that (up to ten seconds later, and only when the partition gets records).
So the view applies the same rule itself, on wall-clock time: it does not
keep a record already past its expiry, and `sweep` drops the others as their
expiry passes. It holds the live jobs plus the retention's worth of finished
ones.

Layout (one RocksDB under the gateway home per serve process):
    j/<id>                         -> the job (JSON)
    q/<queue>\\0<rank><id>          -> b"" for every job that may become fetchable
                                      (available, scheduled, retryable), in fetch
                                      order: priority descending, then ready time
    x/<expiry ms><id>              -> b"" for every terminal job, in expiry order
    o/<partition>                  -> the next offset to read
Beside it, identity.json names the cluster and topic it was built from.
Nothing here decides: fetch candidates are only proposals the processor may
refuse (see workers.py).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient
from rocksdict import Options, Rdict, WriteBatch

from gateway.broker.launcher import gateway_home
from gateway.catalogue import Catalogue
from gateway.core import DEFAULT_RETENTION_MS, ready_at
from gateway.core.events import WAITING_STATES
from gateway.core.jobs import job_expires_at
from gateway.core.times import parse_rfc3339
from gateway.processor.state_identity import Identity

log = logging.getLogger("gateway.http.view")

_POLL_S = 0.02
_BATCH = 500
_PRIORITY_BIAS = 2**31
_SWEEP_EVERY_S = 1.0
_ADMIN_TIMEOUT_S = 10.0


def default_view_dir(namespace: str | None, instance: str = "default") -> Path:
    """Under the gateway home, per namespace and serve instance (two processes, two views)."""
    return views_root() / (namespace or "default") / instance


def views_root() -> Path:
    """Every serve process's view: views/<namespace>/<instance> under the gateway home."""
    return gateway_home() / "views"


def source_identity(admin: AdminClient, topic: str) -> Identity:
    """The cluster and `job_states` topic a view is built from, as the brokers say now.

    Recorded in the view's directory as the processor records its state's, so a
    view built from another cluster (or a re-created topic) is dropped and read
    again, and `gateway kafka down --purge` finds the views of its cluster.
    """
    cluster = admin.describe_cluster(request_timeout=_ADMIN_TIMEOUT_S).result()
    [described] = admin.describe_topics(
        TopicCollection([topic]), request_timeout=_ADMIN_TIMEOUT_S
    ).values()
    return Identity(str(cluster.cluster_id), {topic: str(described.result().topic_id)})


def _job_key(job_id: str) -> bytes:
    return b"j/" + job_id.encode()


def _queue_prefix(queue: str) -> bytes:
    return b"q/" + queue.encode() + b"\x00"


def _queue_key(job: Mapping[str, Any]) -> bytes | None:
    """Where a waiting job sorts in its queue; None if it is not waiting."""
    if job.get("state") not in WAITING_STATES:
        return None
    at = ready_at(job)
    ready_ms = (parse_rfc3339(at) if isinstance(at, str) else None) or 0
    raw_priority = job.get("priority")
    priority = raw_priority if isinstance(raw_priority, int) else 0
    # Higher priority first: store the distance below the largest priority.
    clamped = max(-_PRIORITY_BIAS, min(priority, _PRIORITY_BIAS - 1))
    rank = (_PRIORITY_BIAS - 1 - clamped).to_bytes(4, "big") + max(ready_ms, 0).to_bytes(8, "big")
    return _queue_prefix(str(job.get("queue", ""))) + rank + str(job["id"]).encode()


def _expiry_key(expires_ms: int, job_id: bytes) -> bytes:
    return b"x/" + max(expires_ms, 0).to_bytes(8, "big") + job_id


class JobView:
    """Thread-safe: the follower writes, request handlers read."""

    def __init__(self, path: Path, retention_ms: int = DEFAULT_RETENTION_MS) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self.retention_ms = retention_ms
        options = Options(raw_mode=True)
        options.create_if_missing(True)
        self._db = Rdict(str(path), options)
        self._lock = threading.Lock()
        self.applied = 0  # records applied by this process, for tests and metrics

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def get(self, job_id: str) -> dict[str, Any] | None:
        raw = self._db.get(_job_key(job_id))
        return None if raw is None else dict(orjson.loads(bytes(raw)))  # type: ignore[arg-type]

    def offsets(self) -> dict[int, int]:
        found: dict[int, int] = {}
        for key, value in self._db.items(from_key=b"o/"):
            key, value = bytes(key), bytes(value)  # type: ignore[arg-type]
            if not key.startswith(b"o/"):
                break
            found[int(key[2:])] = int(value)
        return found

    def apply(self, records: list[tuple[int, int, bytes, bytes | None]], now_ms: int) -> None:
        """(partition, offset, key, value) records of job_states, in order; atomic with offsets.
        A terminal job already past its expiry at `now_ms` is not kept."""
        with self._lock:
            batch = WriteBatch(raw_mode=True)
            staged: dict[bytes, bytes | None] = {}
            ends: dict[int, int] = {}
            for partition, offset, key, value in records:
                ends[partition] = offset + 1
                job_key = b"j/" + key
                before_raw = staged[job_key] if job_key in staged else self._db.get(job_key)
                before = None if before_raw is None else orjson.loads(before_raw)
                old_rank = None if before is None else _queue_key(before)
                if old_rank is not None:
                    batch.delete(old_rank)
                old_expiry = None if before is None else self._expires(before)
                if old_expiry is not None:
                    batch.delete(_expiry_key(old_expiry, key))
                job = None if value is None else orjson.loads(value)
                expiry = None if job is None else self._expires(job)
                if job is None or (expiry is not None and expiry <= now_ms):
                    batch.delete(job_key)
                    staged[job_key] = None
                    continue
                batch.put(job_key, value)
                staged[job_key] = value
                new_rank = _queue_key(job)
                if new_rank is not None:
                    batch.put(new_rank, b"")
                if expiry is not None:
                    batch.put(_expiry_key(expiry, key), b"")
            for partition, end in ends.items():
                batch.put(f"o/{partition}".encode(), str(end).encode())
            self._db.write(batch)
            self.applied += len(records)

    def _expires(self, job: Mapping[str, Any]) -> int | None:
        return job_expires_at(job, self.retention_ms)

    def sweep(self, now_ms: int) -> int:
        """Drop the terminal jobs whose expiry has passed; how many."""
        with self._lock:
            batch = WriteBatch(raw_mode=True)
            dropped = 0
            for raw in self._db.keys(from_key=b"x/"):
                key = bytes(raw)  # type: ignore[arg-type]
                if not key.startswith(b"x/") or int.from_bytes(key[2:10], "big") > now_ms:
                    break
                batch.delete(key)
                batch.delete(b"j/" + key[10:])
                dropped += 1
            if dropped:
                self._db.write(batch)
            return dropped

    def waiting(self, queue: str) -> Iterator[str]:
        """Ids of the queue's waiting jobs in fetch order (whether due or not)."""
        prefix = _queue_prefix(queue)
        for raw in self._db.keys(from_key=prefix):
            key = bytes(raw)  # type: ignore[arg-type]
            if not key.startswith(prefix):
                return
            yield key[len(prefix) + 12 :].decode()


class Follower:
    """A background thread copying committed `job_states` records into the view."""

    def __init__(self, view: JobView, cat: Catalogue, settings: Mapping[str, Any]) -> None:
        self._view = view
        self._topic = cat.name("job_states")
        self._consumer = Consumer(
            {
                **settings,
                # Never joins a group (partitions are assigned), never commits:
                # the offsets live in the view, with the data.
                "group.id": f"gateway-http-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
            }
        )
        self._stopping = threading.Event()
        self._swept_at = 0.0
        self.caught_up = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gateway-http-view", daemon=True)

    def start(self) -> None:
        stored = self._view.offsets()
        metadata = self._consumer.list_topics(self._topic, timeout=10)
        partitions = sorted(metadata.topics[self._topic].partitions)
        self._consumer.assign(
            [TopicPartition(self._topic, p, stored.get(p, OFFSET_BEGINNING)) for p in partitions]
        )
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join()
        self._consumer.close()

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                messages = self._consumer.consume(_BATCH, _POLL_S)
                records = [r for r in map(self._record, messages) if r is not None]
                if records:
                    self._view.apply(records, time.time_ns() // 1_000_000)
                elif not messages:
                    self.caught_up.set()  # nothing more to read for now
                if time.monotonic() - self._swept_at >= _SWEEP_EVERY_S:
                    self._swept_at = time.monotonic()
                    self._view.sweep(time.time_ns() // 1_000_000)
            except Exception:  # the thread must outlive any one bad batch
                log.exception("the job view failed on a batch; continuing")

    def _record(self, msg: Message) -> tuple[int, int, bytes, bytes | None] | None:
        if msg.error() is not None:
            log.warning("reading job_states failed", extra={"error": msg.error().str()})
            return None
        return (msg.partition(), msg.offset(), msg.key() or b"", msg.value())
