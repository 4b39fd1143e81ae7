"""The binding's view of jobs: the `job_states` topic materialised into a local RocksDB.

The processor decides every transition and writes each job's current state to
`job_states` (compacted, keyed by job id). This view only copies it: a record
replaces the job, a tombstone removes it (apply.py). Each batch of records is
written with the offsets it reaches in one RocksDB write batch, so a restarted
`gateway serve` resumes where it stopped instead of reading everything again,
and memory holds no jobs (they live on disk; the layout is keys.py's).

Bounded like the processor's store. A terminal job's record expires from the
processor's store `retention_ms` after it ended (`core.job_expires_at`); its
tombstone on `job_states` follows once the partition's event time has moved
past that (up to ten seconds later, and only when the partition gets records).
So the view applies the same rule itself, on wall-clock time: it does not
keep a record already past its expiry, and `sweep` drops the others as their
expiry passes. It holds the live jobs plus the retention's worth of finished
ones. Beside it, identity.json names the cluster and topic it was built from.

Nothing here decides: fetch candidates are only proposals the processor may
refuse (see http/workers.py). Jobs this process has just answered for are
shown as answered until their committed records arrive (provisional.py):
`get` reads them first and `waiting` offers them to fetch; the other indexes
and listings hold committed records only.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient
from rocksdict import Options, Rdict, WriteBatch

from gateway import store_memory, wire
from gateway.core import DEFAULT_RETENTION_MS
from gateway.core.lifecycle import shown_state
from gateway.core.tenants import tenant_of
from gateway.home import gateway_home
from gateway.processor.state_identity import Identity
from gateway.view import apply, keys, queue_stats
from gateway.view.apply import Change, Record
from gateway.view.keys import CONTROL
from gateway.view.provisional import Provisional
from gateway.view.versions import ReadVersions

log = logging.getLogger("gateway.view")

_ADMIN_TIMEOUT_S = 10.0
# Given a batch's changes and the offsets it reaches per partition, more keys to put
# (or, with None, delete) in the same RocksDB batch: the events feed's (event_feed.py).
AlsoWrite = Callable[[list[Change], dict[int, int]], Iterable[tuple[bytes, bytes | None]]]


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
    # A topic created a moment ago may be unknown to the broker asked for a while.
    deadline = time.monotonic() + _ADMIN_TIMEOUT_S
    while True:
        [described] = admin.describe_topics(
            TopicCollection([topic]), request_timeout=_ADMIN_TIMEOUT_S
        ).values()
        try:
            return Identity(str(cluster.cluster_id), {topic: str(described.result().topic_id)})
        except KafkaException as exc:
            unknown = exc.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
            if not unknown or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


class JobView:
    """Thread-safe: the follower writes, request handlers read."""

    def __init__(
        self,
        path: Path,
        retention_ms: int = DEFAULT_RETENTION_MS,
        also_write: AlsoWrite | None = None,
    ) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self.retention_ms = retention_ms
        self._also_write = also_write
        options = Options(raw_mode=True)
        options.create_if_missing(True)
        store_memory.shared().apply(options)
        self._db = Rdict(str(path), options)
        if self._db.get(keys.LAYOUT_KEY) != keys.LAYOUT and any(
            True for _ in self._db.keys(from_key=b"")
        ):
            # Written by a version without today's indexes: read job_states anew.
            log.info("the job view has an older layout; reading job_states again")
            self._db.close()
            Rdict.destroy(str(path), options)
            self._db = Rdict(str(path), options)
        self._db[keys.LAYOUT_KEY] = keys.LAYOUT
        self._lock = threading.Lock()
        self.applied = 0  # records applied by this process, for tests and metrics
        self.versions = ReadVersions()  # what answered updates wait for (http/caught_up.py)
        self._answered = Provisional()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def get(self, job_id: str) -> dict[str, Any] | None:
        answered, job = self._answered.job(job_id)
        if answered:
            return job
        raw = self._db.get(keys.job_key(job_id))
        return None if raw is None else dict(orjson.loads(bytes(raw)))  # type: ignore[arg-type]

    def provisional(self, job_id: str, job: dict[str, Any] | None) -> None:
        """The job as the processor's answer left it (None: deleted), before its record
        is committed: `get` gives it until the view reads that record."""
        with self._lock:
            self._answered.answered(job_id, job)

    def offsets(self) -> dict[int, int]:
        found: dict[int, int] = {}
        for key, value in self._db.items(from_key=keys.OFFSET):
            key, value = bytes(key), bytes(value)  # type: ignore[arg-type]
            if not key.startswith(keys.OFFSET):
                break
            found[int(key[2:])] = int(value)
        return found

    def apply(self, records: list[Record], now_ms: int) -> None:
        """(partition, offset, key, value) records of job_states, in order; atomic with offsets.
        A terminal job already past its expiry at `now_ms` is not kept. Each kept change
        (the job before and after) goes to `also_write`, whose keys join the batch."""
        with self._lock:
            staged = apply.stage(self._db, records, now_ms, self.retention_ms)
            if self._also_write is not None:
                self._put(staged.batch, self._also_write(staged.changes, staged.ends))
            self._db.write(staged.batch)
            for job_id, job, _ in staged.read:  # once written: `get` never shows an older copy
                self._answered.confirm(job_id, job)
            self.versions.read(
                (job_id, value) for job_id, _, value in staged.read if value is not None
            )
            for key, value in staged.controls:
                self._answered.control_read(key, value)
            self.applied += len(records)

    def write(self, writes: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Put (or, for None, delete) keys outside the view's own prefixes."""
        with self._lock:
            batch = WriteBatch(raw_mode=True)
            self._put(batch, writes)
            self._db.write(batch)

    @staticmethod
    def _put(batch: WriteBatch, writes: Iterable[tuple[bytes, bytes | None]]) -> None:
        for key, value in writes:
            if value is None:
                batch.delete(key)
            else:
                batch.put(key, value)

    def scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """The entries under `prefix`, in key order."""
        for raw_key, raw_value in self._db.items(from_key=prefix):
            key = bytes(raw_key)  # type: ignore[arg-type]
            if not key.startswith(prefix):
                return
            yield key, bytes(raw_value)  # type: ignore[arg-type]

    def sweep(self, now_ms: int) -> int:
        """Drop the terminal jobs whose expiry has passed, and activity older than
        queue_stats.KEEP_MINUTES; how many entries."""
        with self._lock:
            batch, dropped = apply.sweep(self._db, now_ms)
            if dropped:
                self._db.write(batch)
            return dropped

    def control_answered(self, key: bytes, state: Mapping[str, Any] | None) -> None:
        """A cron's state as the processor's answer left it (None: deleted), shown until
        the view reads the committed record, as for jobs (`provisional`); nothing if that
        record was read already."""
        value = None if state is None else orjson.dumps(state)
        with self._lock:
            self._answered.control_answered(key, value)

    def queue_answered(self, state: Mapping[str, Any]) -> None:
        """A queue's state as the processor answered it: kept at once if it is the newest
        this view has (the committed records bring the same version, or a newer one)."""
        key = wire.queue_key(str(state.get("queue")))
        with self._lock:
            batch = WriteBatch(raw_mode=True)
            apply.keep_control(self._db, batch, {}, key, orjson.dumps(state))
            self._db.write(batch)

    def controls(self, prefix: bytes) -> dict[str, dict[str, Any]]:
        """The states published under keys starting with `prefix` (wire.QUEUE_KEY_PREFIX,
        wire.CRON_KEY_PREFIX), by name."""
        found: dict[str, dict[str, Any]] = {}
        start = CONTROL + prefix
        for key, value in self._db.items(from_key=start):
            key = bytes(key)  # type: ignore[arg-type]
            if not key.startswith(start):
                break
            found[key[len(start) :].decode(errors="replace")] = orjson.loads(bytes(value))  # type: ignore[arg-type]
        now = time.monotonic()
        for key, (answered, until) in list(self._answered.controls.items()):
            if until <= now or not key.startswith(prefix):
                continue
            name = key[len(prefix) :].decode()
            if answered is None:
                found.pop(name, None)
            else:
                found[name] = orjson.loads(answered)
        return found

    def waiting(self, queue: str, tenants: Collection[str] | None = None) -> Iterator[str]:
        """Ids of the queue's waiting jobs in fetch order (whether due or not), provisional
        ones among them: a fetch right after a POST finds the job; only of `tenants`, if
        given, from their own part of the queue. An id may come from an older version too;
        the caller judges the job by `get`."""
        answered = [job for job, _, _ in list(self._answered.jobs.values()) if job is not None]
        if tenants is None:
            parts = [(keys.queue_prefix(queue), keys.queue_key)]
        else:
            parts = [(keys.tenant_queue_prefix(t, queue), keys.tenant_queue_key)
                     for t in sorted(tenants)]  # fmt: skip
        runs = []
        for prefix, key_of in parts:
            ranks = sorted(r for r in map(key_of, answered) if r and r.startswith(prefix))
            # Each run by rank and id alone, so that tenants' parts merge in fetch order.
            runs.append(_after(len(prefix), heapq.merge(self._ranks(prefix), ranks)))
        seen = set()
        for ranked in heapq.merge(*runs):
            job_id = ranked[keys.RANK_BYTES :].decode()
            if job_id not in seen:
                seen.add(job_id)
                yield job_id

    def active_under(self, unique_key: str) -> int:
        """How many jobs of the unique key are active, as the committed records and this
        process's answers since (a claim it just made, an ack it just had) say."""
        prefix = keys.active_prefix(unique_key)
        running = {key[len(prefix) :] for key in self._ranks(prefix)}
        for job_id, job in self._answered.live().items():
            if job is not None and keys.active_key(job) == prefix + job_id.encode():
                running.add(job_id.encode())
            else:
                running.discard(job_id.encode())
        return len(running)

    def waiting_under(self, rate_key: str, most: int) -> int:
        """How many jobs of the rate key are available, as the committed records say,
        counted up to `most` (the cost of an answer stays bounded)."""
        counted = 0
        for _ in self._ranks(keys.rate_waiting_prefix(rate_key)):
            counted += 1
            if counted == most:
                break
        return counted

    def _ranks(self, prefix: bytes) -> Iterator[bytes]:
        for raw in self._db.keys(from_key=prefix):
            key = bytes(raw)  # type: ignore[arg-type]
            if not key.startswith(prefix):
                return
            yield key

    def in_state(
        self, state: str, queue: str | None = None, sees: Callable[[str], bool] | None = None,
        tenants: Collection[str] | None = None,
    ) -> Iterator[str]:  # fmt: skip
        """Ids of the jobs in `state` (of one queue, or all; only of the queues `sees` is
        true of, if given, read from the index's keys; only of `tenants`, if given), by
        (tenant,) queue then id; then those an answer just put there (provisional), so a
        listing right after agrees with it."""
        if queue is not None and sees is not None and not sees(queue):
            return
        answered = self._answered.live()
        prefixes = (
            [keys.state_prefix(state, queue)] if tenants is None
            else [keys.tenant_state_prefix(t, state, queue) for t in sorted(tenants)]
        )  # fmt: skip
        for prefix in prefixes:
            shown: tuple[bytes, bool] = (b"", True)  # the last queue asked of `sees`, its answer
            for key in self._ranks(prefix):
                named, _, raw_id = key[len(prefix) :].rpartition(b"\x00")
                if sees is not None and queue is None and named != shown[0]:
                    shown = (named, sees(named.decode()))
                job_id = raw_id.decode()
                if shown[1] and job_id not in answered:
                    yield job_id
        now = time.time_ns() // 1_000_000
        for job_id, job in sorted(answered.items()):
            if job is None or shown_state(job, now) != state:
                continue
            of = job.get("queue")
            if (
                queue in (None, of) and (sees is None or sees(str(of)))
                and (tenants is None or tenant_of(job) in tenants)
            ):  # fmt: skip
                yield job_id

    def queue_activity(self, queue: str) -> list[tuple[bytes, bytes]]:
        """The queue's per-minute buckets, oldest first (queue_stats.py)."""
        prefix = queue_stats.bucket_key(queue, 0)[:-8]
        buckets = []
        for raw_key, raw_value in self._db.items(from_key=prefix):
            key = bytes(raw_key)  # type: ignore[arg-type]
            if not key.startswith(prefix):
                break
            buckets.append((key, bytes(raw_value)))  # type: ignore[arg-type]
        return buckets

    def answered_pending(self, queue: str | None = None) -> bool:
        """Whether a job (of `queue`, or of any) this process answered for is not in the
        view yet (its committed record on its way): listings that count wait for it."""
        return any(
            job is not None and queue in (None, job.get("queue"))
            for job in self._answered.live().values()
        )

    def queues(self, tenants: Iterable[str] | None = None) -> dict[str, dict[str, Any]]:
        """Every queue the view has seen a job of (of `tenants`, if given): when its first
        job was created, and how many of its jobs (of `tenants`) are in each state now."""
        first = {key[2:].decode(): v.decode() or None for key, v in self.scan(keys.FIRST_SEEN)}
        found: dict[str, dict[str, Any]] = {}
        if tenants is None:
            found = {queue: {"created_at": at, "counts": {}} for queue, at in first.items()}
            counted = ((key[2:], value) for key, value in self.scan(keys.COUNT))
        else:
            counted = (  # each counter key after its tenant: <queue>\0<state>
                (key.partition(b"\x00")[2], value)
                for tenant in sorted(tenants)
                for key, value in self.scan(keys.TENANT_COUNT + tenant.encode() + b"\x00")
            )  # fmt: skip
        for key, value in counted:
            queue, _, state = key.decode().partition("\x00")
            entry = found.setdefault(queue, {"created_at": first.get(queue), "counts": {}})
            entry["counts"][state] = entry["counts"].get(state, 0) + int(value)
        return found

    def tenants(self) -> dict[str, dict[str, Any]]:
        """Every tenant the view has seen a job of: when its first job was created, and how
        many of its jobs of each queue are in each state now."""
        found: dict[str, dict[str, Any]] = {}
        for key, value in self.scan(keys.TENANT_FIRST_SEEN):
            found[key[2:].decode()] = {"created_at": value.decode() or None, "queues": {}}
        for key, value in self.scan(keys.TENANT_COUNT):
            tenant, queue, state = key[2:].decode().split("\x00")
            entry = found.setdefault(tenant, {"created_at": None, "queues": {}})
            entry["queues"].setdefault(queue, {})[state] = int(value)
        return found


def _after(skip: int, found: Iterator[bytes]) -> Iterator[bytes]:
    """Each key of `found` past its first `skip` bytes."""
    for key in found:
        yield key[skip:]
