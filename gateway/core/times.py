"""Instants are integer epoch milliseconds inside the core, RFC 3339 UTC strings outside."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime, timedelta
from functools import lru_cache

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_RFC3339 = re.compile(
    r"(\d{4}-\d{2}-\d{2})[Tt ](\d{2}:\d{2}:\d{2})(?:\.(\d+))?([Zz]|[+-]\d{2}:\d{2})"
)


def parse_rfc3339(text: str) -> int | None:
    """Epoch milliseconds (fraction truncated), or None if not an RFC 3339 date-time."""
    match = _RFC3339.fullmatch(text)
    if match is None:
        return None
    date, time, fraction, offset = match.groups()
    micros = (fraction or "").ljust(6, "0")[:6]
    zone = "+00:00" if offset in ("Z", "z") else offset
    try:
        instant = datetime.fromisoformat(f"{date}T{time}.{micros}{zone}")
    except ValueError:
        return None
    return (instant - _EPOCH) // timedelta(milliseconds=1)


# The first and last milliseconds a four-digit year can print (years 1 to 9999).
_FIRST_MS = (datetime(1, 1, 1, tzinfo=UTC) - _EPOCH) // timedelta(milliseconds=1)
_LAST_MS = (datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC) - _EPOCH) // timedelta(
    milliseconds=1
)


# A decision formats its instant several times over, and the instants of a stream of
# records share their seconds: the second is formatted once, its milliseconds looked up.
_MILLIS = tuple(f".{i:03d}Z" for i in range(1000))


@lru_cache(maxsize=1024)
def _second(s: int) -> str:
    t = time.gmtime(s)
    return (
        f"{t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d}T"
        f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}"
    )


def format_rfc3339(ms: int) -> str:
    """RFC 3339 in UTC with milliseconds, e.g. 2026-02-12T10:00:00.000Z.

    Total: an instant beyond the years 1..9999 prints as the nearest one inside.
    Enqueue bounds keep derived instants far inside (limits.py), but records
    already in the log were accepted under older rules, and the processor
    must never stop on one.
    """
    if 0 <= ms <= _LAST_MS:  # the usual case, without building a datetime
        return _second(ms // 1000) + _MILLIS[ms % 1000]
    instant = _EPOCH + timedelta(milliseconds=min(max(ms, _FIRST_MS), _LAST_MS))
    return instant.isoformat(timespec="milliseconds").removesuffix("+00:00") + "Z"
