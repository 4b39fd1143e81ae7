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
    s/<state>\0<queue>\0<id>        -> b"" for every job, by state then queue (dead letters:
                                      the discarded ones)
    c/<queue>\0<state>              -> how many jobs of the queue are in the state
    a/<unique key>\0<id>            -> b"" for every active job with a unique key: fetch counts
                                      a key's running jobs by it (core/concurrency.py)
    r/<queue>\0<minute>             -> what the queue's jobs did in the minute (queue_stats.py)
    n/<queue>                      -> when the queue's first job was created (RFC 3339)
    k/<key>                        -> a queue's or a cron's state, as the processor published
                                      it under its NUL-prefixed key (wire.queue_key, cron_key)
    o/<partition>                  -> the next offset to read
    e/..., ew/...                  -> the events feed's window, written in the same batch
                                      (event_feed.py)
    meta/layout                    -> this layout's version; a view of another is read anew
Beside it, identity.json names the cluster and topic it was built from.
Nothing here decides: fetch candidates are only proposals the processor may
refuse (see workers.py).

Provisional entries. The processor answers before it commits (early answers),
so a job this process has just answered for may not be on `job_states` yet.
The binding puts the job as the answer carries it here at once, and `get`
reads it before the stored one until the committed record arrives. A
decision is a pure function of the log, so that record is this very job,
even when the processor crashed first and its successor decided again; the
entry goes when the view reads it (or its tombstone), or after PROVISIONAL_S
at the latest. `waiting` offers provisional jobs to fetch; the other indexes
and listings hold committed records only.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
import uuid
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

import orjson
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from rocksdict import Options, Rdict, WriteBatch

from gateway import store_memory, wire
from gateway.catalogue import Catalogue
from gateway.config import gateway_home
from gateway.core import DEFAULT_RETENTION_MS, ready_at
from gateway.core.jobs import job_expires_at
from gateway.core.moves import WAITING_STATES
from gateway.core.queues import newer_state
from gateway.core.states import State
from gateway.core.times import parse_rfc3339
from gateway.http import queue_stats
from gateway.http.caught_up import ReadVersions
from gateway.processor.state_identity import Identity

log = logging.getLogger("gateway.http.view")

_POLL_S = 0.02
_BATCH = 500
_PRIORITY_BIAS = 2**31
_SWEEP_EVERY_S = 1.0
_ADMIN_TIMEOUT_S = 10.0
_METADATA_RETRY_S = 0.5
_METADATA_TIMEOUT_S = 5.0
LAYOUT = b"6"
_LAYOUT_KEY = b"meta/layout"
# How long a provisional entry waits for its committed record at most: a crashed
# processor's successor takes over and commits well within it.
PROVISIONAL_S = 60.0
_CONTROLS_READ = 16  # committed states remembered per cron key
# Versions of jobs the view read last, so an answer that arrives after its own
# record (answers with the commit) leaves no provisional entry behind.
_REMEMBERED = 100_000
# (partition, offset, the job before, the job after): what a record changed.
Change = tuple[int, int, dict[str, Any] | None, dict[str, Any] | None]
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


def _version(job_id: str, job: Mapping[str, Any] | None) -> tuple[str, int]:
    """A job's version by content (None: its tombstone), whatever its fields' order."""
    return job_id, hash(orjson.dumps(job, option=orjson.OPT_SORT_KEYS))


_CONTROL = b"k/"


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


def _state_prefix(state: str, queue: str | None = None) -> bytes:
    prefix = b"s/" + state.encode() + b"\x00"
    return prefix if queue is None else prefix + queue.encode() + b"\x00"


def _state_key(job: Mapping[str, Any]) -> bytes:
    return (
        _state_prefix(str(job.get("state", "")), str(job.get("queue", "")))
        + str(job["id"]).encode()
    )


def _active_prefix(unique_key: str) -> bytes:
    return b"a/" + unique_key.encode() + b"\x00"


def _active_key(job: Mapping[str, Any]) -> bytes | None:
    """Where an active job of a unique key is counted; None for any other job."""
    key = job.get("unique_key")
    if job.get("state") != State.ACTIVE or not isinstance(key, str):
        return None
    return _active_prefix(key) + str(job["id"]).encode()


def _count_key(queue: str, state: str) -> bytes:
    return b"c/" + queue.encode() + b"\x00" + state.encode()


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
        if self._db.get(_LAYOUT_KEY) != LAYOUT and any(True for _ in self._db.keys(from_key=b"")):
            # Written by a version without today's indexes: read job_states anew.
            log.info("the job view has an older layout; reading job_states again")
            self._db.close()
            Rdict.destroy(str(path), options)
            self._db = Rdict(str(path), options)
        self._db[_LAYOUT_KEY] = LAYOUT
        self._lock = threading.Lock()
        self.applied = 0  # records applied by this process, for tests and metrics
        self.versions = ReadVersions()  # what answered updates wait for (caught_up.py)
        # job id -> (the job as answered, None if deleted; until when; its version)
        self._provisional: dict[str, tuple[dict[str, Any] | None, float, tuple[str, int]]] = {}
        self._read: OrderedDict[tuple[str, int], None] = OrderedDict()
        # key -> (a cron's state as an answer gave it, None if deleted; until when)
        self._controls_provisional: dict[bytes, tuple[bytes | None, float]] = {}
        # key -> the last committed states read (a cron's answer may come after its own
        # record and a later one were read: it is then no news, and must not hide the later)
        self._controls_read: dict[bytes, deque[bytes | None]] = {}

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def get(self, job_id: str) -> dict[str, Any] | None:
        provisional = self._provisional.get(job_id)
        if provisional is not None:
            job, until, _ = provisional
            if until > time.monotonic():
                return None if job is None else dict(job)
            self._provisional.pop(job_id, None)
        raw = self._db.get(_job_key(job_id))
        return None if raw is None else dict(orjson.loads(bytes(raw)))  # type: ignore[arg-type]

    def provisional(self, job_id: str, job: dict[str, Any] | None) -> None:
        """The job as the processor's answer left it (None: deleted), before its record
        is committed: `get` gives it until the view reads that record."""
        version = _version(job_id, job)
        with self._lock:
            if version not in self._read:
                self._provisional[job_id] = (job, time.monotonic() + PROVISIONAL_S, version)

    def _confirm(self, job_id: str, job: Mapping[str, Any] | None) -> None:
        """A committed record read: it ends the job's provisional entry if it is that one."""
        version = _version(job_id, job)
        self._read[version] = None
        self._read.move_to_end(version)
        if len(self._read) > _REMEMBERED:
            self._read.popitem(last=False)
        provisional = self._provisional.get(job_id)
        if provisional is not None and provisional[2] == version:
            del self._provisional[job_id]

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
        A terminal job already past its expiry at `now_ms` is not kept. Each kept change
        (the job before and after) goes to `also_write`, whose keys join the batch."""
        with self._lock:
            batch = WriteBatch(raw_mode=True)
            staged: dict[bytes, bytes | None] = {}
            ends: dict[int, int] = {}
            counts: dict[bytes, int] = {}
            activity: dict[bytes, list[int]] = {}
            first_seen: dict[bytes, str] = {}
            changes: list[Change] = []
            read: list[tuple[str, Any, bytes | None]] = []
            controls: list[tuple[bytes, bytes | None]] = []
            for partition, offset, key, value in records:
                ends[partition] = offset + 1
                if key.startswith(b"\x00"):  # a queue's or a cron's state, not a job
                    if self._keep_control(batch, staged, key, value):
                        controls.append((key, value))
                    continue
                try:
                    job = None if value is None else orjson.loads(value)
                    valid = job is None or (isinstance(job, dict) and "id" in job)
                except orjson.JSONDecodeError:
                    valid = False
                if not valid:
                    # Not the processor's: read past it, or the view would stall on it.
                    log.warning(
                        "a job_states record is not a job; skipped",
                        extra={"partition": partition, "offset": offset},
                    )
                    continue
                job_key = b"j/" + key
                before_raw = staged[job_key] if job_key in staged else self._db.get(job_key)
                before = None if before_raw is None else orjson.loads(before_raw)
                if before is not None:
                    self._unindex(batch, key, before, counts)
                read.append((key.decode(errors="replace"), job, value))
                expiry = None if job is None else self._expires(job)
                if job is None or (expiry is not None and expiry <= now_ms):
                    batch.delete(job_key)
                    staged[job_key] = None
                    if job is None and before is not None:
                        changes.append((partition, offset, before, None))
                    continue
                batch.put(job_key, value)
                staged[job_key] = value
                changes.append((partition, offset, before, job))
                for bucket, did in queue_stats.activity(before, job).items():
                    sums = activity.setdefault(bucket, [0] * queue_stats.COUNTERS)
                    sums[:] = [a + b for a, b in zip(sums, did, strict=True)]
                new_rank = _queue_key(job)
                if new_rank is not None:
                    batch.put(new_rank, b"")
                if expiry is not None:
                    batch.put(_expiry_key(expiry, key), b"")
                batch.put(_state_key(job), b"")
                active = _active_key(job)
                if active is not None:
                    batch.put(active, b"")
                count = _count_key(str(job.get("queue", "")), str(job.get("state", "")))
                counts[count] = counts.get(count, 0) + 1
                queue_key = b"n/" + str(job.get("queue", "")).encode()
                created = str(job.get("created_at") or "")
                if queue_key not in first_seen and self._db.get(queue_key) is None:
                    first_seen[queue_key] = created
            for count, delta in counts.items():
                if delta:
                    raw = self._db.get(count)
                    now = (0 if raw is None else int(bytes(raw))) + delta  # type: ignore[arg-type]
                    batch.put(count, str(max(now, 0)).encode())
            for queue_key, created in first_seen.items():
                batch.put(queue_key, created.encode())
            for bucket, sums in activity.items():
                stored = self._db.get(bucket)
                batch.put(
                    bucket, queue_stats.merged(None if stored is None else bytes(stored), sums)
                )
            for partition, end in ends.items():
                batch.put(f"o/{partition}".encode(), str(end).encode())
            if self._also_write is not None:
                self._put(batch, self._also_write(changes, ends))
            self._db.write(batch)
            for job_id, job, _ in read:  # once written: `get` never falls back to an older copy
                self._confirm(job_id, job)
            self.versions.read((job_id, value) for job_id, _, value in read if value is not None)
            for key, value in controls:
                self._controls_read.setdefault(key, deque(maxlen=_CONTROLS_READ)).append(value)
                answered = self._controls_provisional.get(key)
                if answered is not None and answered[0] == value:
                    del self._controls_provisional[key]
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
        """The entries under `prefix` (one the view does not use itself), in key order."""
        for raw_key, raw_value in self._db.items(from_key=prefix):
            key = bytes(raw_key)  # type: ignore[arg-type]
            if not key.startswith(prefix):
                return
            yield key, bytes(raw_value)  # type: ignore[arg-type]

    def _unindex(
        self, batch: WriteBatch, key: bytes, job: Mapping[str, Any], counts: dict[bytes, int]
    ) -> None:
        """Take a job's old version out of every index (the data key is the caller's)."""
        old_rank = _queue_key(job)
        if old_rank is not None:
            batch.delete(old_rank)
        old_expiry = self._expires(job)
        if old_expiry is not None:
            batch.delete(_expiry_key(old_expiry, key))
        batch.delete(_state_key(job))
        active = _active_key(job)
        if active is not None:
            batch.delete(active)
        count = _count_key(str(job.get("queue", "")), str(job.get("state", "")))
        counts[count] = counts.get(count, 0) - 1

    def _expires(self, job: Mapping[str, Any]) -> int | None:
        return job_expires_at(job, self.retention_ms)

    def sweep(self, now_ms: int) -> int:
        """Drop the terminal jobs whose expiry has passed, and activity older than
        queue_stats.KEEP_MINUTES; how many entries."""
        with self._lock:
            batch = WriteBatch(raw_mode=True)
            dropped = 0
            counts: dict[bytes, int] = {}
            for raw in self._db.keys(from_key=b"x/"):
                key = bytes(raw)  # type: ignore[arg-type]
                if not key.startswith(b"x/") or int.from_bytes(key[2:10], "big") > now_ms:
                    break
                batch.delete(key)
                job_raw = self._db.get(b"j/" + key[10:])
                if job_raw is not None:
                    job = orjson.loads(bytes(job_raw))  # type: ignore[arg-type]
                    batch.delete(_state_key(job))
                    count = _count_key(str(job.get("queue", "")), str(job.get("state", "")))
                    counts[count] = counts.get(count, 0) - 1
                batch.delete(b"j/" + key[10:])
                dropped += 1
            for count, delta in counts.items():
                raw_count = self._db.get(count)
                now = (0 if raw_count is None else int(bytes(raw_count))) + delta  # type: ignore[arg-type]
                batch.put(count, str(max(now, 0)).encode())
            oldest = now_ms // queue_stats.MINUTE_MS - queue_stats.KEEP_MINUTES
            for raw in self._db.keys(from_key=queue_stats.PREFIX):
                key = bytes(raw)  # type: ignore[arg-type]
                if not key.startswith(queue_stats.PREFIX):
                    break
                if queue_stats.minute_of(key) < oldest:
                    batch.delete(key)
                    dropped += 1
            if dropped:
                self._db.write(batch)
            return dropped

    def control_answered(self, key: bytes, state: Mapping[str, Any] | None) -> None:
        """A cron's state as the processor's answer left it (None: deleted), shown until
        the view reads the committed record, as for jobs (`provisional`); nothing if that
        record was read already."""
        value = None if state is None else orjson.dumps(state)
        with self._lock:
            if value in self._controls_read.get(key, ()):
                return
            self._controls_provisional[key] = (value, time.monotonic() + PROVISIONAL_S)

    def queue_answered(self, state: Mapping[str, Any]) -> None:
        """A queue's state as the processor answered it: kept at once if it is the newest
        this view has (the committed records bring the same version, or a newer one)."""
        key = wire.queue_key(str(state.get("queue")))
        with self._lock:
            batch = WriteBatch(raw_mode=True)
            self._keep_control(batch, {}, key, orjson.dumps(state))
            self._db.write(batch)

    def _keep_control(
        self, batch: WriteBatch, staged: dict[bytes, bytes | None], key: bytes, value: bytes | None
    ) -> bool:
        """Write a queue's or a cron's published state; False if it is not kept. A queue's
        is kept only if newer than the one held (partitions publish theirs in any order:
        core/queues.py); a record that is not one of the processor's is skipped."""
        stored_key = _CONTROL + key
        if value is None:
            batch.delete(stored_key)
            staged[stored_key] = None
            return True
        try:
            state = orjson.loads(value)
        except orjson.JSONDecodeError:
            state = None
        if not isinstance(state, dict):
            log.warning("a job_states record under a NUL key is not a state; skipped")
            return False
        if key.startswith(wire.QUEUE_KEY_PREFIX):
            held_raw = staged[stored_key] if stored_key in staged else self._db.get(stored_key)
            held = None if held_raw is None else orjson.loads(bytes(held_raw))
            if not newer_state(state, held):
                return False
        batch.put(stored_key, value)
        staged[stored_key] = value
        return True

    def controls(self, prefix: bytes) -> dict[str, dict[str, Any]]:
        """The states published under keys starting with `prefix` (wire.QUEUE_KEY_PREFIX,
        wire.CRON_KEY_PREFIX), by name."""
        found: dict[str, dict[str, Any]] = {}
        start = _CONTROL + prefix
        for key, value in self._db.items(from_key=start):
            key = bytes(key)  # type: ignore[arg-type]
            if not key.startswith(start):
                break
            found[key[len(start) :].decode(errors="replace")] = orjson.loads(bytes(value))  # type: ignore[arg-type]
        now = time.monotonic()
        for key, (answered, until) in list(self._controls_provisional.items()):
            if until <= now or not key.startswith(prefix):
                continue
            name = key[len(prefix) :].decode()
            if answered is None:
                found.pop(name, None)
            else:
                found[name] = orjson.loads(answered)
        return found

    def waiting(self, queue: str) -> Iterator[str]:
        """Ids of the queue's waiting jobs in fetch order (whether due or not), provisional
        ones among them: a fetch right after a POST finds the job. An id may come from an
        older version too; the caller judges the job by `get`."""
        prefix = _queue_prefix(queue)
        answered = [job for job, _, _ in list(self._provisional.values()) if job is not None]
        ranks = sorted(
            rank for rank in map(_queue_key, answered) if rank and rank.startswith(prefix)
        )
        seen = set()
        for key in heapq.merge(self._ranks(prefix), ranks):
            job_id = key[len(prefix) + 12 :].decode()
            if job_id not in seen:
                seen.add(job_id)
                yield job_id

    def active_under(self, unique_key: str) -> int:
        """How many jobs of the unique key are active, as the committed records and this
        process's answers since (a claim it just made, an ack it just had) say."""
        prefix = _active_prefix(unique_key)
        running = {key[len(prefix) :] for key in self._ranks(prefix)}
        now = time.monotonic()
        for job_id, (job, until, _) in list(self._provisional.items()):
            if until <= now:
                continue
            if job is not None and _active_key(job) == prefix + job_id.encode():
                running.add(job_id.encode())
            else:
                running.discard(job_id.encode())
        return len(running)

    def _ranks(self, prefix: bytes) -> Iterator[bytes]:
        for raw in self._db.keys(from_key=prefix):
            key = bytes(raw)  # type: ignore[arg-type]
            if not key.startswith(prefix):
                return
            yield key

    def in_state(self, state: str, queue: str | None = None) -> Iterator[str]:
        """Ids of the jobs in `state` (of one queue, or all), by queue then id; then those
        an answer just put there (provisional), so a listing right after agrees with it."""
        now = time.monotonic()
        answered = {
            job_id: job
            for job_id, (job, until, _) in list(self._provisional.items())
            if until > now
        }
        prefix = _state_prefix(state, queue)
        for raw in self._db.keys(from_key=prefix):
            key = bytes(raw)  # type: ignore[arg-type]
            if not key.startswith(prefix):
                break
            job_id = key.rsplit(b"\x00", 1)[1].decode()
            if job_id not in answered:
                yield job_id
        for job_id, job in sorted(answered.items()):
            if job is not None and job.get("state") == state and queue in (None, job.get("queue")):
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
        now = time.monotonic()
        return any(
            job is not None and queue in (None, job.get("queue")) and until > now
            for job, until, _ in list(self._provisional.values())
        )

    def queues(self) -> dict[str, dict[str, Any]]:
        """Every queue the view has seen a job of: when its first job was created, and
        how many of its jobs are in each state now."""
        found: dict[str, dict[str, Any]] = {}
        for raw_key, raw_value in self._db.items(from_key=b"n/"):
            key = bytes(raw_key)  # type: ignore[arg-type]
            if not key.startswith(b"n/"):
                break
            created = bytes(raw_value).decode()  # type: ignore[arg-type]
            found[key[2:].decode()] = {"created_at": created or None, "counts": {}}
        for raw_key, raw_value in self._db.items(from_key=b"c/"):
            key = bytes(raw_key)  # type: ignore[arg-type]
            if not key.startswith(b"c/"):
                break
            queue, _, state = key[2:].decode().partition("\x00")
            entry = found.setdefault(queue, {"created_at": None, "counts": {}})
            entry["counts"][state] = int(bytes(raw_value))  # type: ignore[arg-type]
        return found


class _Reader(Protocol):
    """What the follower needs of a Kafka consumer (a fake one in unit tests)."""

    def list_topics(self, topic: str, timeout: float) -> Any: ...
    def get_watermark_offsets(
        self, partition: TopicPartition, timeout: float, cached: bool
    ) -> tuple[int, int]: ...
    def assign(self, partitions: list[TopicPartition]) -> None: ...
    def consume(self, num_messages: int, timeout: float) -> list[Message]: ...
    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]: ...
    def close(self) -> None: ...


class Follower:
    """A background thread copying committed `job_states` records into the view.

    It follows every partition of `job_states` from where the view stopped (the
    start, for a new view). Right after the topics are created, the brokers' metadata
    may list none or only some of them, so it asks again until it lists as many as
    the catalogue says the topic has. It is `live` once it reads all of them and has
    reached the end offsets they had when it started; until then `reason` says what
    it waits for, and health answers 503 with it.
    """

    def __init__(
        self,
        view: JobView,
        cat: Catalogue,
        settings: Mapping[str, Any],
        consumer: _Reader | None = None,
        on_live: Callable[[], None] | None = None,
    ) -> None:
        self._view = view
        self._on_live = on_live
        self._topic = cat.name("job_states")
        self._expected = cat.by_role("job_states").partitions
        self._consumer: _Reader = consumer or Consumer(
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
        self._behind: dict[int, int] = {}  # partition -> the end offset it must reach
        self.live = threading.Event()
        self.reason = "the job view has not started reading job_states"
        self._thread = threading.Thread(target=self._run, name="gateway-http-view", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join()
        self._consumer.close()

    def _run(self) -> None:
        if not self._assign():
            return
        while not self._stopping.is_set():
            try:
                messages = self._consumer.consume(_BATCH, _POLL_S)
                records = [r for r in map(self._record, messages) if r is not None]
                if records:
                    self._view.apply(records, time.time_ns() // 1_000_000)
                if not self.live.is_set():
                    self._check_caught_up()
                if time.monotonic() - self._swept_at >= _SWEEP_EVERY_S:
                    self._swept_at = time.monotonic()
                    self._view.sweep(time.time_ns() // 1_000_000)
            except Exception:  # the thread must outlive any one bad batch
                log.exception("the job view failed on a batch; continuing")

    def _assign(self) -> bool:
        """Assign every partition once metadata lists them all; False if stopped first."""
        partitions = self._await_partitions()
        if partitions is None:
            return False
        stored = self._view.offsets()
        ends = self._await_ends(partitions)
        if ends is None:
            return False
        self._behind = {p: end for p, end in ends.items() if end > stored.get(p, 0)}
        self._consumer.assign(
            [TopicPartition(self._topic, p, stored.get(p, OFFSET_BEGINNING)) for p in partitions]
        )
        self.reason = (
            f"the job view is reading {self._topic} up to the end offsets it saw at start "
            f"({len(self._behind)} of {len(partitions)} partitions to go)"
        )
        self._check_caught_up()
        return True

    def _await_partitions(self) -> list[int] | None:
        while not self._stopping.is_set():
            try:
                metadata = self._consumer.list_topics(self._topic, timeout=_METADATA_TIMEOUT_S)
                topic = metadata.topics.get(self._topic)
                listed = [] if topic is None or topic.error is not None else topic.partitions
                found = sorted(listed)
                problem = f"its metadata lists {len(found)} of its {self._expected} partitions"
            except KafkaException as exc:
                found, problem = [], f"Kafka did not answer: {exc.args[0].str()}"
            if found and len(found) >= self._expected:
                return found
            self.reason = f"the job view waits for topic {self._topic}: {problem}"
            log.info("the job view waits for %s: %s", self._topic, problem)
            self._stopping.wait(_METADATA_RETRY_S)
        return None

    def _await_ends(self, partitions: list[int]) -> dict[int, int] | None:
        ends: dict[int, int] = {}
        while not self._stopping.is_set():
            try:
                for p in partitions:
                    if p not in ends:
                        _, ends[p] = self._consumer.get_watermark_offsets(
                            TopicPartition(self._topic, p), timeout=_METADATA_TIMEOUT_S,
                            cached=False,
                        )  # fmt: skip
                return ends
            except KafkaException as exc:
                self.reason = (
                    f"the job view could not read the end offsets of {self._topic}: "
                    f"{exc.args[0].str()}"
                )
                self._stopping.wait(_METADATA_RETRY_S)
        return None

    def _check_caught_up(self) -> None:
        """Live once every partition has reached the end offset it had at start
        (a read_committed position moves past transaction markers too)."""
        if self._behind:
            asked = [TopicPartition(self._topic, p) for p in self._behind]
            for tp in self._consumer.position(asked):
                if tp.offset >= 0 and tp.offset >= self._behind[tp.partition]:
                    del self._behind[tp.partition]
        if self._behind:
            self.reason = (
                f"the job view is reading {self._topic} up to the end offsets it saw at start "
                f"({len(self._behind)} partitions to go)"
            )
            return
        self.reason = ""
        self.live.set()
        if self._on_live is not None:
            self._on_live()

    def _record(self, msg: Message) -> tuple[int, int, bytes, bytes | None] | None:
        error, partition, offset = msg.error(), msg.partition(), msg.offset()
        if error is not None or partition is None or offset is None:
            log.warning("reading job_states failed", extra={"error": error and error.str()})
            return None
        return (partition, offset, msg.key() or b"", msg.value())
