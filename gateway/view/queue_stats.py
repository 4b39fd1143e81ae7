"""A queue's activity by the minute, for queue stats and the admin stats history.

The view counts, per queue and minute, what each job_states record shows a job
did: an attempt started (and how long the job waited for it), a job completed
(and how long its attempt ran), an attempt failed, a job was enqueued (its
first record). Each is counted in the minute of the job's own stamp for it
(started_at, completed_at, the error's occurred_at, created_at), so a view
reading the topic anew counts them where they happened. Layout, in the view's
RocksDB:
    r/<queue>\\0<minute, 8 bytes>  -> six counters (started, waited ms, completed,
                                      ran ms, failed, enqueued), 8 bytes each
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from typing import Any

from gateway.core.states import State
from gateway.core.times import format_rfc3339, parse_rfc3339

PREFIX = b"r/"
MINUTE_MS = 60_000
HOUR_MINUTES = 60
# Buckets older than this are swept; an hour is read.
KEEP_MINUTES = 2 * HOUR_MINUTES
_COUNTERS = struct.Struct(">6q")
_STARTED, _WAITED, _COMPLETED, _RAN, _FAILED, _ENQUEUED = range(6)  # the counters, in order
COUNTERS = _COUNTERS.size // 8
# The widths of a history's points, by the name the admin API takes.
PERIODS = {"1m": 1, "5m": 5, "15m": 15, "1h": 60}


def bucket_key(queue: str, minute: int) -> bytes:
    return PREFIX + queue.encode() + b"\x00" + minute.to_bytes(8, "big")


def minute_of(key: bytes) -> int:
    return int.from_bytes(key[-8:], "big")


def activity(before: Mapping[str, Any] | None, after: Mapping[str, Any]) -> dict[bytes, list[int]]:
    """What one record shows the job did, as counter deltas by bucket key."""
    deltas: dict[bytes, list[int]] = {}
    queue = str(after.get("queue", ""))
    was = None if before is None else before.get("state")
    now = after.get("state")

    def add(stamp: object, index: int, amount: int, waited: int | None = None) -> None:
        at = parse_rfc3339(stamp) if isinstance(stamp, str) else None
        if at is None:
            return
        counters = deltas.setdefault(bucket_key(queue, at // MINUTE_MS), [0] * COUNTERS)
        counters[index] += amount
        if waited is not None:
            counters[index + 1] += max(waited, 0)

    if before is None:
        add(after.get("created_at"), _ENQUEUED, 1)
    started = after.get("started_at")
    if now == State.ACTIVE and (before is None or before.get("started_at") != started):
        add(started, _STARTED, 1, _between(after.get("enqueued_at"), started))
    if now == State.COMPLETED and was != State.COMPLETED:
        add(after.get("completed_at"), _COMPLETED, 1,
            _between(after.get("started_at"), after.get("completed_at")))  # fmt: skip
    if was == State.ACTIVE and now in (State.RETRYABLE, State.DISCARDED):
        error = after.get("error")
        add(error.get("occurred_at") if isinstance(error, dict) else None, _FAILED, 1)
    return deltas


def merged(raw: bytes | None, delta: list[int]) -> bytes:
    counters = [0] * COUNTERS if raw is None else list(_COUNTERS.unpack(raw))
    return _COUNTERS.pack(*(a + b for a, b in zip(counters, delta, strict=True)))


def last_hour(buckets: Iterable[tuple[bytes, bytes]], now_ms: int) -> dict[str, Any]:
    """OJS's queue stats over the hour to `now_ms` from a queue's buckets."""
    started, waited, completed, ran, failed, _ = _totals(buckets, now_ms, HOUR_MINUTES)
    return {
        "completed_last_hour": completed,
        "failed_last_hour": failed,
        "avg_duration_ms": round(ran / completed) if completed else None,
        "avg_wait_ms": round(waited / started) if started else None,
        "throughput_per_second": round(completed / 3600, 4),
    }


def per_minute(
    buckets: Iterable[tuple[bytes, bytes]], now_ms: int, minutes: int = 5
) -> dict[str, float]:
    """Completions and failed attempts per minute over the last `minutes` to `now_ms`."""
    _, _, completed, _, failed, _ = _totals(buckets, now_ms, minutes)
    return {
        "processed_per_minute": round(completed / minutes, 2),
        "failed_per_minute": round(failed / minutes, 2),
    }


def history(
    buckets: Iterable[tuple[bytes, bytes]], now_ms: int, width: int, since_ms: int | None = None
) -> list[dict[str, Any]]:
    """The kept minutes to `now_ms` in points of `width` minutes, oldest first, from the one
    holding `since_ms` if given: each point's start, and the jobs completed (`processed`),
    attempts failed and jobs enqueued in it."""
    last = now_ms // MINUTE_MS // width
    first = last - KEEP_MINUTES // width + 1
    if since_ms is not None:
        first = max(first, since_ms // MINUTE_MS // width)
    points = {n: [0] * COUNTERS for n in range(first, last + 1)}
    for key, raw in buckets:
        point = points.get(minute_of(key) // width)
        if point is not None:
            point[:] = [a + b for a, b in zip(point, _COUNTERS.unpack(raw), strict=True)]
    return [
        {
            "timestamp": format_rfc3339(n * width * MINUTE_MS),
            "processed": c[_COMPLETED],
            "failed": c[_FAILED],
            "enqueued": c[_ENQUEUED],
        }  # fmt: skip
        for n, c in sorted(points.items())
    ]


def _totals(buckets: Iterable[tuple[bytes, bytes]], now_ms: int, minutes: int) -> list[int]:
    since = now_ms // MINUTE_MS - minutes
    totals = [0] * COUNTERS
    for key, raw in buckets:
        if minute_of(key) > since:
            totals = [a + b for a, b in zip(totals, _COUNTERS.unpack(raw), strict=True)]
    return totals


def _between(start: object, end: object) -> int | None:
    a = parse_rfc3339(start) if isinstance(start, str) else None
    b = parse_rfc3339(end) if isinstance(end, str) else None
    return None if a is None or b is None else b - a
