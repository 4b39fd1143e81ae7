"""RFC 3339 printing: the fast path prints what the datetime path prints, for every instant."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core.times import _EPOCH, _FIRST_MS, _LAST_MS, format_rfc3339


def _by_datetime(ms: int) -> str:
    instant = _EPOCH + timedelta(milliseconds=min(max(ms, _FIRST_MS), _LAST_MS))
    return instant.isoformat(timespec="milliseconds").removesuffix("+00:00") + "Z"


@settings(max_examples=2_000)
@given(st.integers(_FIRST_MS - 10**9, _LAST_MS + 10**9))
def test_every_instant_prints_as_datetime_prints_it(ms: int) -> None:
    assert format_rfc3339(ms) == _by_datetime(ms)


def test_the_edges() -> None:
    for ms in (0, 1, 999, 1_000, 951_782_400_000, 1_770_000_000_123, _LAST_MS, _LAST_MS + 1, -1):
        assert format_rfc3339(ms) == _by_datetime(ms)
    assert format_rfc3339(0) == "1970-01-01T00:00:00.000Z"
