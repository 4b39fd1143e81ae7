"""Tombstones on `job_states` for the finished jobs the store forgets.

A finished job's record leaves its route's state by the store's event-time
TTL, `retention_ms` after the job ended (`core.job_expires_at`). The store
deletes it without a word, so the processor keeps its own schedule of those
expiries, per partition, and writes a tombstone for each job to `job_states`
once the partition's event time has passed it: in the transaction of the
record that moved the time on, the one whose commit also lets the store evict
the record. Compaction then drops the job from the topic, and every view
reading it drops the job too.

The schedule lives in the partition's state under a key of its own, in
buckets of BUCKET_MS by expiry time, with point reads only (the store offers
no ordered scan inside a transaction):
    next        -> the first bucket not yet swept (absent: nothing scheduled yet)
    <bucket>    -> how many jobs the bucket holds
    <bucket>/<i> -> [route, job id] of its i-th job
"""

from __future__ import annotations

from typing import Any

import orjson

# The key whose state holds the partition's schedule. No route starts with
# NUL (routes are fingerprints and job ids), so it never meets a job's key.
SCHEDULE_KEY = b"\x00job-expiry"
BUCKET_MS = 10_000
# A partition idle for long sweeps its backlog over several records.
MAX_BUCKETS_PER_RECORD = 8_640
_NEXT = "next"

KeyState = Any  # get_bytes, set_bytes, delete, as in dedup.py


def schedule(schedule_state: KeyState, route: str, job_id: str, due_ms: int) -> None:
    """Remember to tombstone `job_id` (stored under `route`) once time passes `due_ms`."""
    next_bucket = _int(schedule_state.get_bytes(_NEXT))
    bucket = due_ms // BUCKET_MS
    if next_bucket is None:
        schedule_state.set_bytes(_NEXT, _bytes(bucket))
    elif bucket < next_bucket:
        bucket = next_bucket  # a clock that stepped back: never into a swept bucket
    count = _int(schedule_state.get_bytes(str(bucket))) or 0
    schedule_state.set_bytes(f"{bucket}/{count}", orjson.dumps([route, job_id]))
    schedule_state.set_bytes(str(bucket), _bytes(count + 1))


def take_due(schedule_state: KeyState, now_ms: int) -> list[tuple[str, str]]:
    """(route, job id) of every scheduled job whose bucket ended by `now_ms`, taken off
    the schedule. A bucket is swept only once it has ended, so a job is tombstoned
    up to BUCKET_MS after its expiry."""
    next_bucket = _int(schedule_state.get_bytes(_NEXT))
    if next_bucket is None:
        return []
    stop = min(now_ms // BUCKET_MS, next_bucket + MAX_BUCKETS_PER_RECORD)
    if stop <= next_bucket:
        return []
    taken = []
    for bucket in range(next_bucket, stop):
        count = _int(schedule_state.get_bytes(str(bucket)))
        if count is None:
            continue  # an empty bucket: nothing to read, nothing to delete
        for i in range(count):
            item = schedule_state.get_bytes(f"{bucket}/{i}")
            schedule_state.delete(f"{bucket}/{i}")
            if item is not None:
                route, job_id = orjson.loads(item)
                taken.append((str(route), str(job_id)))
        schedule_state.delete(str(bucket))
    schedule_state.set_bytes(_NEXT, _bytes(stop))
    return taken


def _int(raw: bytes | None) -> int | None:
    return None if raw is None else int(raw)


def _bytes(value: int) -> bytes:
    return str(value).encode()
