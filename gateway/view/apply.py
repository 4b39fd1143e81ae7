"""What a batch of `job_states` records writes to the view: the jobs and every index.

A record replaces its job (a tombstone removes it); the job's old version
leaves every index and its new one enters them, and the counters (its queue's,
and its tenant's), first-seen times and activity buckets (queue_stats.py) move
with it. A terminal job
already past its expiry is not kept (the processor's own rule,
`core.job_expires_at`, on wall-clock time), and `sweep` drops the others as
their expiry passes. A record under a NUL-prefixed key is a queue's or a
cron's published state, not a job (`keep_control`). Nothing is written here:
the caller writes the batch, with the offsets it reaches, at once.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
from rocksdict import Rdict, WriteBatch

from gateway import wire
from gateway.core.jobs import job_expires_at
from gateway.core.lifecycle import due_ms
from gateway.core.queues import newer_state
from gateway.core.states import State
from gateway.core.tenants import tenant_of
from gateway.view import keys, queue_stats

log = logging.getLogger("gateway.view")

# (partition, offset, key, value) of a job_states record.
Record = tuple[int, int, bytes, bytes | None]
# (partition, offset, the job before, the job after): what a record changed.
Change = tuple[int, int, dict[str, Any] | None, dict[str, Any] | None]


@dataclass
class Staged:
    """A batch of records as writes, and what the view learns from them once written."""

    batch: WriteBatch = field(default_factory=lambda: WriteBatch(raw_mode=True))
    ends: dict[int, int] = field(default_factory=dict)  # partition -> the next offset
    changes: list[Change] = field(default_factory=list)  # each kept change
    read: list[tuple[str, Any, bytes | None]] = field(default_factory=list)  # (id, job, value)
    controls: list[tuple[bytes, bytes | None]] = field(default_factory=list)  # kept states


def stage(db: Rdict, records: list[Record], now_ms: int, retention_ms: int) -> Staged:
    """The writes of `records` (in order) to `db`: jobs, indexes, counters, offsets."""
    out = Staged()
    batch = out.batch
    staged: dict[bytes, bytes | None] = {}
    counts: dict[bytes, int] = {}
    activity: dict[bytes, list[int]] = {}
    first_seen: dict[bytes, str] = {}
    for partition, offset, key, value in records:
        out.ends[partition] = offset + 1
        if key.startswith(b"\x00"):  # a queue's, a cron's, a rate key's state: not a job
            held = _rate_before(db, staged, key)
            if keep_control(db, batch, staged, key, value):
                out.controls.append((key, value))
                if held is not False:  # a rate key's: its events (view/rate_events.py)
                    after = None if value is None else orjson.loads(value)
                    out.changes.append((partition, offset, held, after))
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
        job_key = keys.JOB + key
        before_raw = staged[job_key] if job_key in staged else db.get(job_key)
        before = None if before_raw is None else orjson.loads(before_raw)
        if before is not None:
            _unindex(batch, key, before, counts, retention_ms, db, staged)
        out.read.append((key.decode(errors="replace"), job, value))
        expiry = None if job is None else job_expires_at(job, retention_ms)
        if job is None or (expiry is not None and expiry <= now_ms):
            batch.delete(job_key)
            staged[job_key] = None
            if job is None and before is not None:
                out.changes.append((partition, offset, before, None))
            continue
        batch.put(job_key, value)
        staged[job_key] = value
        out.changes.append((partition, offset, before, job))
        for bucket, did in queue_stats.activity(before, job).items():
            sums = activity.setdefault(bucket, [0] * queue_stats.COUNTERS)
            sums[:] = [a + b for a, b in zip(sums, did, strict=True)]
        _index(batch, key, job, expiry, counts, now_ms, staged)
        created = str(job.get("created_at") or "")
        tenant = tenant_of(job)
        for seen_key in (
            keys.first_seen_key(str(job.get("queue", ""))),
            None if tenant is None else keys.tenant_first_seen_key(tenant),
        ):
            if seen_key is not None and seen_key not in first_seen and db.get(seen_key) is None:
                first_seen[seen_key] = created
    _count(db, batch, counts)
    for queue_key, created in first_seen.items():
        batch.put(queue_key, created.encode())
    for bucket, sums in activity.items():
        stored = db.get(bucket)
        batch.put(bucket, queue_stats.merged(None if stored is None else bytes(stored), sums))
    for partition, end in out.ends.items():
        batch.put(keys.offset_key(partition), str(end).encode())
    return out


def _index(
    batch: WriteBatch, key: bytes, job: Mapping[str, Any], expiry: int | None,
    counts: dict[bytes, int], now_ms: int, staged: dict[bytes, bytes | None],
) -> None:  # fmt: skip
    """Put a job's version in every index: listed in its state, or as available when it
    is a scheduled or retryable job already due (else it waits in the due index)."""
    rank = keys.queue_key(job)
    if rank is not None:
        batch.put(rank, b"")
        tenant_rank = keys.tenant_queue_key(job)
        if tenant_rank is not None:
            batch.put(tenant_rank, b"")
    if expiry is not None:
        batch.put(keys.expiry_key(expiry, key), b"")
    listed = None
    due = due_ms(job)
    if due is not None and due <= now_ms:
        listed = str(State.AVAILABLE)
    elif due is not None:
        waits = keys.due_key(job, due)
        batch.put(waits, b"")
        staged[waits] = b""
    batch.put(keys.state_key(job, listed), b"")
    active = keys.active_key(job)
    if active is not None:
        batch.put(active, b"")
    tenant_state = keys.tenant_state_key(job, listed)
    if tenant_state is not None:
        batch.put(tenant_state, b"")
    waiting = keys.rate_waiting_key(job)
    if waiting is not None:
        batch.put(waiting, b"")
    _move(counts, job, 1, listed)


def _unindex(
    batch: WriteBatch, key: bytes, job: Mapping[str, Any], counts: dict[bytes, int],
    retention_ms: int, db: Rdict, staged: dict[bytes, bytes | None],
) -> None:  # fmt: skip
    """Take a job's old version out of every index (the data key is the caller's): it is
    listed in its own state while its due key is held, as available once that is gone."""
    old_rank = keys.queue_key(job)
    if old_rank is not None:
        batch.delete(old_rank)
        tenant_rank = keys.tenant_queue_key(job)
        if tenant_rank is not None:
            batch.delete(tenant_rank)
    old_expiry = job_expires_at(job, retention_ms)
    if old_expiry is not None:
        batch.delete(keys.expiry_key(old_expiry, key))
    listed = None
    due = due_ms(job)
    waits = None if due is None else keys.due_key(job, due)
    if waits is not None and (staged[waits] if waits in staged else db.get(waits)) is not None:
        batch.delete(waits)
        staged[waits] = None
    elif waits is not None:
        listed = str(State.AVAILABLE)
    batch.delete(keys.state_key(job, listed))
    active = keys.active_key(job)
    if active is not None:
        batch.delete(active)
    tenant_state = keys.tenant_state_key(job, listed)
    if tenant_state is not None:
        batch.delete(tenant_state)
    waiting = keys.rate_waiting_key(job)
    if waiting is not None:
        batch.delete(waiting)
    _move(counts, job, -1, listed)


def _move(
    counts: dict[bytes, int], job: Mapping[str, Any], delta: int, state: str | None = None
) -> None:
    """Move the counters of the job's queue and listed state (`state`, else its own), and
    its tenant's, by `delta`."""
    for count in (keys.job_count_key(job, state), keys.tenant_count_key(job, state)):
        if count is not None:
            counts[count] = counts.get(count, 0) + delta


def _count(db: Rdict, batch: WriteBatch, counts: dict[bytes, int]) -> None:
    """Move the counters by `counts` (never below zero)."""
    for count, delta in counts.items():
        if delta:
            raw = db.get(count)
            now = (0 if raw is None else int(bytes(raw))) + delta  # type: ignore[arg-type]
            batch.put(count, str(max(now, 0)).encode())


def sweep(db: Rdict, now_ms: int) -> tuple[WriteBatch, int]:
    """The writes dropping the terminal jobs whose expiry has passed, and activity older
    than queue_stats.KEEP_MINUTES, and listing as available the jobs that came due; and how
    many entries they drop or move."""
    batch = WriteBatch(raw_mode=True)
    dropped = 0
    counts: dict[bytes, int] = {}
    for raw in db.keys(from_key=keys.EXPIRY):
        key = bytes(raw)  # type: ignore[arg-type]
        if not key.startswith(keys.EXPIRY) or int.from_bytes(key[2:10], "big") > now_ms:
            break
        batch.delete(key)
        job_raw = db.get(keys.JOB + key[10:])
        if job_raw is not None:
            job = orjson.loads(bytes(job_raw))  # type: ignore[arg-type]
            batch.delete(keys.state_key(job))
            tenant_state = keys.tenant_state_key(job)
            if tenant_state is not None:
                batch.delete(tenant_state)
            _move(counts, job, -1)
        batch.delete(keys.JOB + key[10:])
        dropped += 1
    dropped += _list_due(db, batch, now_ms, counts)
    for count, delta in counts.items():
        raw_count = db.get(count)
        now = (0 if raw_count is None else int(bytes(raw_count))) + delta  # type: ignore[arg-type]
        batch.put(count, str(max(now, 0)).encode())
    oldest = now_ms // queue_stats.MINUTE_MS - queue_stats.KEEP_MINUTES
    for raw in db.keys(from_key=queue_stats.PREFIX):
        key = bytes(raw)  # type: ignore[arg-type]
        if not key.startswith(queue_stats.PREFIX):
            break
        if queue_stats.minute_of(key) < oldest:
            batch.delete(key)
            dropped += 1
    return batch, dropped


def _list_due(db: Rdict, batch: WriteBatch, now_ms: int, counts: dict[bytes, int]) -> int:
    """List as available every scheduled or retryable job due by `now_ms`, as GET shows
    it; how many."""
    moved = 0
    available = str(State.AVAILABLE)
    for raw in db.keys(from_key=keys.DUE):
        key = bytes(raw)  # type: ignore[arg-type]
        if not key.startswith(keys.DUE) or int.from_bytes(key[2:10], "big") > now_ms:
            break
        batch.delete(key)
        moved += 1
        job_raw = db.get(keys.JOB + key[10:])
        if job_raw is None:
            continue
        job = orjson.loads(bytes(job_raw))  # type: ignore[arg-type]
        batch.delete(keys.state_key(job))
        batch.put(keys.state_key(job, available), b"")
        tenant_state, tenant_listed = (keys.tenant_state_key(job, s) for s in (None, available))
        if tenant_state is not None and tenant_listed is not None:
            batch.delete(tenant_state)
            batch.put(tenant_listed, b"")
        _move(counts, job, -1)
        _move(counts, job, 1, available)
    return moved


def _rate_before(db: Rdict, staged: dict[bytes, bytes | None], key: bytes) -> Any:
    """A rate key's state before this record (None: none); False for another control."""
    if not key.startswith(wire.RATE_KEY_PREFIX):
        return False
    stored_key = keys.CONTROL + key
    raw = staged[stored_key] if stored_key in staged else db.get(stored_key)
    try:
        return None if raw is None else orjson.loads(bytes(raw))
    except orjson.JSONDecodeError:
        return None


def keep_control(
    db: Rdict, batch: WriteBatch, staged: dict[bytes, bytes | None], key: bytes,
    value: bytes | None,
) -> bool:  # fmt: skip
    """Write a queue's or a cron's published state; False if it is not kept. A queue's
    is kept only if newer than the one held (partitions publish theirs in any order:
    core/queues.py); a record that is not one of the processor's is skipped."""
    stored_key = keys.CONTROL + key
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
    if key.startswith((wire.QUEUE_KEY_PREFIX, wire.QUEUE_RATE_KEY_PREFIX)):
        held_raw = staged[stored_key] if stored_key in staged else db.get(stored_key)
        held = None if held_raw is None else orjson.loads(bytes(held_raw))
        if not newer_state(state, held):
            return False
    batch.put(stored_key, value)
    staged[stored_key] = value
    return True
