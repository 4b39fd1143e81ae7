"""A generic cell rate (GCRA): `limit` per `period_ms`, a burst of `limit` at once, then one
every period / limit. Its one number, `tat` (the theoretical arrival time), is kept in
1/limit milliseconds so that it stays a whole number; 0 is a rate never used. Any window
of one period admits at most 2 * limit - 1, any window of k periods at most
(k + 1) * limit - 1, and the long-run rate is `limit` per period.
"""

from __future__ import annotations


def admit(
    tat: int, limit: int, period_ms: int, now_ms: int, count: int = 1
) -> tuple[int, int | None]:
    """`count` more at `now_ms`: (the tat after, None) if they fit now, else (`tat`
    unchanged, when they would fit, in ms; -1 if never: more than the burst)."""
    now_u, tolerance = now_ms * limit, (limit - 1) * period_ms
    after = max(tat, now_u) + count * period_ms
    if after - now_u <= tolerance + period_ms:
        return after, None
    if count > limit:
        return tat, -1
    return tat, -(-(tat + (count - 1) * period_ms - tolerance) // limit)


def held(tat: int, limit: int, period_ms: int, now_ms: int) -> int:
    """How much of the burst is used at `now_ms` (limit - held fit now)."""
    return min(-(-max(tat - now_ms * limit, 0) // period_ms), limit)


def full_at(tat: int, limit: int) -> int:
    """When the whole burst is free again, in ms."""
    return -(-tat // limit)
