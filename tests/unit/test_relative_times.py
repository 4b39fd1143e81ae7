"""Relative times ("+PT5S" from the decision) for scheduled_at and expires_at: zero,
negative, huge, fractional, past the calendar's end, non-ASCII digits, and anything else
after the "+": taken exactly, or refused as invalid_request naming the field."""

from __future__ import annotations

import re
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.core.envelope import envelope_or_raise, resolved
from gateway.core.errors import Invalid
from gateway.core.limits import MAX_DURATION_MS, MAX_INSTANT_MS
from gateway.core.times import format_rfc3339, parse_rfc3339

NOW = 1_767_225_600_000  # 2026-01-01T00:00:00Z
FIELDS = ["scheduled_at", "expires_at"]


def offset(field: str, value: object) -> int | None:
    envelope = envelope_or_raise({"type": "t", "args": [], field: value})
    return envelope.scheduled_in if field == "scheduled_at" else envelope.expires_in


def refused(field: str, value: object) -> str:
    with pytest.raises(Invalid) as caught:
        offset(field, value)
    assert caught.value.error.code == "invalid_request"
    assert field in caught.value.error.message
    return caught.value.error.message


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize(
    ("value", "ms"),
    [("+PT5S", 5000), ("+PT0.5S", 500), ("+PT0,25S", 250), ("+PT1.001S", 1001),
     ("+P1D", 86_400_000), ("+P1W", 604_800_000), ("+P1DT2H3M4S", 93_784_000),
     ("+PT90M", 5_400_000), ("+P36500D", MAX_DURATION_MS)],
)  # fmt: skip
def test_a_relative_time_is_taken_exactly(field: str, value: str, ms: int):
    assert offset(field, value) == ms


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize(
    "value",
    ["+PT0S", "+P0D", "+PT0.000S",  # zero
     "+-PT5S", "+PT-5S", "+P-1DT25H",  # negative
     "+P36501D", "+PT99999999999999999999S", "+P1000000W",  # past the longest duration
     "+PT0.0005S", "+PT1.0000000001S",  # finer than a millisecond
     "+PT\uff15S", "+PT\u0665S", "+P\u0661D",  # non-ASCII digits
     "++PT5S", "+ PT5S", "+PT5S ", "+PT5S\n", "+pt5s", "+P1DT", "+PT", "+P", "+",
     "+P1Y", "+P1M", "+PT1M1H", "+P1WT1H", "+PT1e3S", "+5"],
)  # fmt: skip
def test_a_relative_time_that_is_not_exactly_one_is_refused(field: str, value: str):
    refused(field, value)


_PARTS = re.compile(r"\+P(?:(\d+)W)?(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:[.,]\d+)?)S)?)?")


def _exact_ms(text: str) -> int | None:
    """The duration, by a second reading of ISO 8601's fixed-length units."""
    match = _PARTS.fullmatch(text)
    if match is None:
        return None
    weeks, days, hours, minutes, seconds = (g or "0" for g in match.groups())
    total = (int(weeks) * 7 + int(days)) * 86_400_000 + int(hours) * 3_600_000
    return int(total + int(minutes) * 60_000 + Fraction(seconds.replace(",", ".")) * 1000)


@given(st.text(alphabet="+PTWDHMS0123456789.,-\n \u0665", max_size=14).map(lambda t: "+" + t))
def test_any_text_after_a_plus_is_taken_as_iso_reads_it_or_refused(value: str):
    try:
        ms = offset("scheduled_at", value)
    except Invalid as exc:
        assert exc.error.code == "invalid_request" and "scheduled_at" in exc.error.message
        return
    assert ms is not None and 0 < ms <= MAX_DURATION_MS and ms == _exact_ms(value)


@given(
    now=st.integers(min_value=0, max_value=MAX_INSTANT_MS - 1),
    seconds=st.integers(min_value=1, max_value=MAX_DURATION_MS // 1000),
)
def test_a_resolved_time_is_the_decision_plus_the_offset_and_prints_inside_the_calendar(
    now: int, seconds: int
):
    envelope = envelope_or_raise({"type": "t", "args": [], "scheduled_at": f"+PT{seconds}S"})
    at = resolved(envelope, now)
    assert at.scheduled_at == now + seconds * 1000
    shown = at.raw["scheduled_at"]
    assert parse_rfc3339(shown) == now + seconds * 1000 and shown == format_rfc3339(
        now + seconds * 1000
    )
