"""Cron expressions (gateway.core.cron_expr): what parses, what is refused, and when an
expression fires next, in UTC and across daylight-saving transitions."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core.cron_expr import (
    ALIASES,
    MAX_EXPRESSION_CHARS,
    CronExpr,
    next_after,
    parse_cron,
    parse_zone,
)
from gateway.core.errors import INVALID_REQUEST, GatewayError
from gateway.core.times import format_rfc3339, parse_rfc3339

UTC_ZONE = ZoneInfo("UTC")
NEW_YORK = ZoneInfo("America/New_York")
BERLIN = ZoneInfo("Europe/Berlin")
MINUTE_MS = 60_000
DAY_MS = 86_400_000
EVERYTHING = frozenset(range(60))
MONTH_NAMES = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
DAY_NAMES = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]


def expr(text: str) -> CronExpr:
    parsed = parse_cron(text)
    assert isinstance(parsed, CronExpr), parsed
    return parsed


def refused(text: object) -> GatewayError:
    parsed = parse_cron(text)
    assert isinstance(parsed, GatewayError), f"{text!r} parsed as {parsed}"
    assert parsed.code == INVALID_REQUEST
    assert parsed.message
    return parsed


def ms(stamp: str) -> int:
    value = parse_rfc3339(stamp)
    assert value is not None, stamp
    return value


def upcoming(text: str, zone: ZoneInfo, after: str, count: int) -> list[str]:
    """The next `count` firings after `after`, each found from the previous one."""
    parsed, at, out = expr(text), ms(after), []
    for _ in range(count):
        found = next_after(parsed, zone, at, 0)
        assert found is not None
        out.append(format_rfc3339(found))
        at = found
    return out


# -- parsing --------------------------------------------------------------------


def test_five_fields_are_minute_hour_day_month_weekday_at_second_zero() -> None:
    parsed = expr("*/15 9-17 1,15 JAN-MAR MON-FRI")
    assert parsed.seconds == {0}
    assert parsed.minutes == {0, 15, 30, 45}
    assert parsed.hours == set(range(9, 18))
    assert parsed.days == {1, 15}
    assert parsed.months == {1, 2, 3}
    assert parsed.weekdays == {1, 2, 3, 4, 5}
    assert not parsed.any_day and not parsed.any_weekday
    assert parsed.every_ms is None


def test_six_fields_put_the_seconds_first() -> None:
    parsed = expr("5,35 */20 3 * * *")
    assert parsed.seconds == {5, 35}
    assert parsed.minutes == {0, 20, 40}
    assert parsed.hours == {3}
    assert parsed.days == set(range(1, 32)) and parsed.any_day
    assert parsed.months == set(range(1, 13))
    assert parsed.weekdays == set(range(7)) and parsed.any_weekday


@pytest.mark.parametrize(
    ("token", "values"),
    [
        ("*", set(range(60))),
        ("7", {7}),
        ("1,2,59", {1, 2, 59}),
        ("10-12", {10, 11, 12}),
        ("*/20", {0, 20, 40}),
        ("1-10/3", {1, 4, 7, 10}),
        ("5/15", {5, 20, 35, 50}),
        ("0-4,50-59/5,30", {0, 1, 2, 3, 4, 30, 50, 55}),
        ("59/1", {59}),
        ("0-59/60", {0}),
    ],
)
def test_lists_ranges_and_steps(token: str, values: set[int]) -> None:
    assert expr(f"{token} * * * *").minutes == values


@given(
    field=st.sampled_from([(0, 0, 59), (1, 0, 23), (2, 1, 31), (3, 1, 12)]),
    data=st.data(),
)
def test_a_stepped_range_is_every_step_from_its_start_to_its_end(
    field: tuple[int, int, int], data: st.DataObject
) -> None:
    index, low, high = field
    first = data.draw(st.integers(low, high))
    last = data.draw(st.integers(first, high))
    step = data.draw(st.integers(1, 70))
    fields = ["*"] * 5
    fields[index] = f"{first}-{last}/{step}"
    parsed = expr(" ".join(fields))
    got = (parsed.minutes, parsed.hours, parsed.days, parsed.months)[index]
    assert got == set(range(first, last + 1, step))


@pytest.mark.parametrize(
    ("name", "number"),
    [(n, i + 1) for i, n in enumerate(MONTH_NAMES)],
)
def test_month_names_in_any_case(name: str, number: int) -> None:
    for spelled in (name, name.lower(), name.capitalize()):
        assert expr(f"0 0 1 {spelled} *").months == {number}


@pytest.mark.parametrize(("name", "number"), [(n, i) for i, n in enumerate(DAY_NAMES)])
def test_weekday_names_in_any_case(name: str, number: int) -> None:
    for spelled in (name, name.lower(), name.capitalize()):
        assert expr(f"0 0 * * {spelled}").weekdays == {number}


def test_names_in_ranges_and_steps() -> None:
    assert expr("0 0 * JUL-SEP *").months == {7, 8, 9}
    assert expr("0 0 * JAN-DEC/3 *").months == {1, 4, 7, 10}
    assert expr("0 0 * * mon-fri").weekdays == {1, 2, 3, 4, 5}
    assert expr("0 0 * * SUN,wed,Sat").weekdays == {0, 3, 6}


def test_zero_and_seven_are_both_sunday() -> None:
    assert expr("0 0 * * 0").weekdays == expr("0 0 * * 7").weekdays == {0}
    assert expr("0 0 * * 5-7").weekdays == {5, 6, 0}
    assert expr("0 0 * * 0,7").weekdays == {0}
    assert expr("0 0 * * *").weekdays == set(range(7))


@pytest.mark.parametrize("alias", sorted(ALIASES))
def test_aliases_are_their_expressions(alias: str) -> None:
    assert expr(alias) == expr(ALIASES[alias]) == expr(alias.upper())


def test_the_aliases_are_the_usual_ones() -> None:
    assert expr("@yearly") == expr("@annually") == expr("0 0 1 1 *")
    assert expr("@monthly") == expr("0 0 1 * *")
    assert expr("@weekly") == expr("0 0 * * 0")
    assert expr("@daily") == expr("@midnight") == expr("0 0 * * *")
    assert expr("@hourly") == expr("0 * * * *")


@pytest.mark.parametrize(
    ("text", "every_ms"),
    [
        ("@every 1s", 1_000),
        ("@every 45s", 45_000),
        ("@every 1000ms", 1_000),
        ("@every 1500ms", 1_500),
        ("@every 5m", 300_000),
        ("@every 2h", 7_200_000),
        ("@every 1h30m", 5_400_000),
        ("@every 1h0m1s", 3_601_000),
        ("@every 0h1s", 1_000),
        ("@EVERY 2M", 120_000),
        ("  @every   10s  ", 10_000),
    ],
)
def test_every_takes_a_go_duration(text: str, every_ms: int) -> None:
    assert expr(text).every_ms == every_ms


@pytest.mark.parametrize(
    "text",
    [
        "@every",
        "@every ",
        "@every 0s",
        "@every 999ms",
        "@every 0h0m0s",
        "@every 1d",
        "@every 1h 30m",
        "@every -1s",
        "@every 1",
        "@every s",
        "@every1s",
    ],
)
def test_every_refuses_what_is_not_a_duration_of_a_second_or_more(text: str) -> None:
    refused(text)


@pytest.mark.parametrize(
    ("text", "every_ms"),
    [("@every 1.5h", 5_400_000), ("@every 2.5s", 2_500), ("@every 2000000us", 2_000)],
)
def test_every_takes_go_fractions_and_units(text: str, every_ms: int) -> None:
    parsed = parse_cron(text)
    assert isinstance(parsed, CronExpr) and parsed.every_ms == every_ms


@pytest.mark.parametrize(
    "text",
    [
        "0 0 L * *",
        "0 0 l * *",
        "0 0 15W * *",
        "0 0 LW * *",
        "0 0 * * 5L",
        "0 0 * * FRI#2",
        "0 0 * * 1#3",
        "0 0 1,L * *",
        "0 0 * * MON-L",
    ],
)
def test_l_w_and_hash_are_refused_saying_so(text: str) -> None:
    assert "L, W or #" in refused(text).message


@pytest.mark.parametrize(
    "text",
    ["*/0 * * * *", "0 */0 * * *", "0 0 1-31/0 * *", "0 0 * 1/0 *", "0/0 0 0 * * *"],
)
def test_a_step_of_zero_is_refused(text: str) -> None:
    assert "step" in refused(text).message


@pytest.mark.parametrize(
    "text",
    [
        "60 * * * *",
        "* 24 * * *",
        "* * 0 * *",
        "* * 32 * *",
        "* * * 0 *",
        "* * * 13 *",
        "* * * * 8",
        "60 * * * * *",
        "* 60 * * * *",
        "1-60 * * * *",
        "* * 0-5 * *",
        "* * * * 1-8",
    ],
)
def test_values_out_of_range_are_refused(text: str) -> None:
    assert "outside" in refused(text).message


@pytest.mark.parametrize(
    "text", ["10-5 * * * *", "* 20-3 * * *", "* * 31-1 * *", "* * * DEC-JAN *", "* * * * 7-1"]
)
def test_backwards_ranges_are_refused(text: str) -> None:
    assert "backwards" in refused(text).message


@pytest.mark.parametrize(
    "text", ["*", "* *", "* * *", "* * * *", "* * * * * * *", "0 0 0 1 1 * 2026"]
)
def test_wrong_field_counts_are_refused(text: str) -> None:
    assert "fields" in refused(text).message


@pytest.mark.parametrize("text", ["", " ", "\t\n", None, 5, 1.5, [], ["* * * * *"], {}])
def test_empty_and_non_strings_are_refused(text: object) -> None:
    refused(text)


@pytest.mark.parametrize(
    "text",
    [
        "a b c d e",
        "? * * * *",
        "0 0 ? * *",
        "-1 * * * *",
        "+5 * * * *",
        "1- * * * *",
        "1--5 * * * *",
        "1,,2 * * * *",
        "1.5 * * * *",
        "*/x * * * *",
        "*/-1 * * * *",
        "JAN * * * *",
        "0 0 * * JAN",
        "0 0 * MON *",
        "@reboot",
        "@every_day",
        "@",
    ],
)
def test_malformed_fields_are_refused(text: str) -> None:
    refused(text)


def test_an_overlong_expression_is_refused() -> None:
    text = "0 0 * * " + ",".join(["1"] * MAX_EXPRESSION_CHARS)
    assert "longer" in refused(text).message


@pytest.mark.parametrize("text", ["5/ * * * *", "*/ * * * *", "1-5/ * * * *"])
def test_an_empty_step_is_refused(text: str) -> None:
    assert isinstance(parse_cron(text), GatewayError)


@pytest.mark.parametrize("text", ["² * * * *", "*/² * * * *", "0 0 * * ¹"])
def test_non_ascii_digits_that_int_refuses_are_an_error_not_a_crash(text: str) -> None:
    assert isinstance(parse_cron(text), GatewayError)


def test_non_ascii_decimal_digits_are_refused() -> None:
    assert isinstance(parse_cron("٣ * * * *"), GatewayError)


@given(st.text(max_size=40))
@settings(max_examples=300)
def test_parse_cron_never_raises_on_ascii_text(text: str) -> None:
    text = text.encode("ascii", "ignore").decode()
    assert isinstance(parse_cron(text), CronExpr | GatewayError)


_TOKEN_PIECES = st.sampled_from(
    ["*", "*/", "/", "-", ",", "0", "1", "7", "12", "31", "59", "60", "L", "W", "#", "MON", "jan"]
)


@given(st.lists(st.lists(_TOKEN_PIECES, min_size=1, max_size=4).map("".join), max_size=7))
@settings(max_examples=300)
def test_parse_cron_never_raises_on_cron_like_text(tokens: list[str]) -> None:
    assert isinstance(parse_cron(" ".join(tokens)), CronExpr | GatewayError)


# -- timezones --------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["UTC", "Etc/UTC", "America/New_York", "Europe/Berlin", "Asia/Kolkata", "Australia/Lord_Howe"],
)
def test_iana_names_and_utc_are_zones(name: str) -> None:
    zone = parse_zone(name)
    assert isinstance(zone, ZoneInfo) and zone.key == name


@pytest.mark.parametrize(
    "name",
    [
        "+05:00",
        "-08:00",
        "+0530",
        "UTC+5",
        "UTC-05:00",
        "GMT+1",
        "EST",
        "PST",
        "CET",
        "EDT",
        "Z",
        "utc",
        "",
        " UTC",
        "Europe/Berlin ",
        "europe/berlin",
        "Mars/Olympus_Mons",
        "America/",
        "/etc/localtime",
        "../../etc/passwd",
        "Europe/../Europe/Berlin",
        "./Europe/Berlin",
        "Europe/Berlin\x00",
        "A/" + "x" * 300,
        None,
        5,
        ["Europe/Berlin"],
    ],
)
def test_offsets_abbreviations_and_unknown_names_are_refused(name: object) -> None:
    zone = parse_zone(name)
    assert isinstance(zone, GatewayError), zone
    assert zone.code == INVALID_REQUEST


# -- when it fires: UTC examples ------------------------------------------------------


def test_next_after_is_strictly_after_and_on_whole_seconds() -> None:
    daily = expr("0 3 * * *")
    at_three = ms("2026-03-01T03:00:00Z")
    assert next_after(daily, UTC_ZONE, at_three - 1, 0) == at_three
    assert next_after(daily, UTC_ZONE, at_three - 1000, 0) == at_three
    assert next_after(daily, UTC_ZONE, at_three, 0) == at_three + DAY_MS
    assert next_after(daily, UTC_ZONE, at_three + 500, 0) == at_three + DAY_MS
    every_second = expr("* * * * * *")
    assert next_after(every_second, UTC_ZONE, at_three + 1, 0) == at_three + 1000
    assert next_after(every_second, UTC_ZONE, at_three + 999, 0) == at_three + 1000
    assert next_after(every_second, UTC_ZONE, at_three + 1000, 0) == at_three + 2000


def test_next_after_rolls_over_hours_days_months_and_years() -> None:
    assert upcoming("59 23 31 12 *", UTC_ZONE, "2026-06-01T00:00:00Z", 2) == [
        "2026-12-31T23:59:00.000Z",
        "2027-12-31T23:59:00.000Z",
    ]
    assert upcoming("0 0 1 1 *", UTC_ZONE, "2026-12-31T23:59:59Z", 1) == [
        "2027-01-01T00:00:00.000Z"
    ]
    assert upcoming("*/20 * * * *", UTC_ZONE, "2026-02-28T23:30:00Z", 3) == [
        "2026-02-28T23:40:00.000Z",
        "2026-03-01T00:00:00.000Z",
        "2026-03-01T00:20:00.000Z",
    ]
    assert upcoming("30 */5 * * * *", UTC_ZONE, "2026-01-01T00:00:00Z", 2) == [
        "2026-01-01T00:00:30.000Z",
        "2026-01-01T00:05:30.000Z",
    ]


def test_february_29th_waits_for_a_leap_year() -> None:
    assert upcoming("0 0 29 2 *", UTC_ZONE, "2026-03-01T00:00:00Z", 2) == [
        "2028-02-29T00:00:00.000Z",
        "2032-02-29T00:00:00.000Z",
    ]
    # 2100 is not a leap year: eight years between 2096 and 2104.
    assert upcoming("0 0 29 2 *", UTC_ZONE, "2096-03-01T00:00:00Z", 1) == [
        "2104-02-29T00:00:00.000Z"
    ]


@pytest.mark.parametrize("text", ["0 0 31 2 *", "0 0 30 2 *", "0 0 31 4,6,9,11 *", "0 0 30,31 2 *"])
def test_a_date_that_never_exists_never_fires(text: str) -> None:
    assert next_after(expr(text), UTC_ZONE, ms("2026-01-01T00:00:00Z"), 0) is None
    assert next_after(expr(text), NEW_YORK, 0, 0) is None


def test_a_restricted_day_and_weekday_fire_on_either_posix() -> None:
    # 2026-02-01 is a Sunday: the 1st of the month or a Monday.
    assert upcoming("0 0 1 * 1", UTC_ZONE, "2026-01-31T12:00:00Z", 6) == [
        "2026-02-01T00:00:00.000Z",
        "2026-02-02T00:00:00.000Z",
        "2026-02-09T00:00:00.000Z",
        "2026-02-16T00:00:00.000Z",
        "2026-02-23T00:00:00.000Z",
        "2026-03-01T00:00:00.000Z",
    ]
    # Either way a date that does not exist is no obstacle when the weekday matches.
    assert upcoming("0 0 31 2 MON", UTC_ZONE, "2026-01-31T12:00:00Z", 1) == [
        "2026-02-02T00:00:00.000Z"
    ]


def test_a_star_in_either_day_field_means_the_other_alone_decides() -> None:
    assert upcoming("0 0 1 * *", UTC_ZONE, "2026-01-31T12:00:00Z", 2) == [
        "2026-02-01T00:00:00.000Z",
        "2026-03-01T00:00:00.000Z",
    ]
    assert upcoming("0 0 * * 1", UTC_ZONE, "2026-01-31T12:00:00Z", 2) == [
        "2026-02-02T00:00:00.000Z",
        "2026-02-09T00:00:00.000Z",
    ]
    # A month restriction applies to both: Mondays of March only.
    assert upcoming("0 0 * 3 MON", UTC_ZONE, "2026-01-31T12:00:00Z", 2) == [
        "2026-03-02T00:00:00.000Z",
        "2026-03-09T00:00:00.000Z",
    ]


def test_sunday_as_seven_fires_on_sundays() -> None:
    # 2026-02-01 and 2026-02-08 are Sundays.
    assert upcoming("0 12 * * 7", UTC_ZONE, "2026-01-31T00:00:00Z", 2) == [
        "2026-02-01T12:00:00.000Z",
        "2026-02-08T12:00:00.000Z",
    ]


def test_every_counts_from_its_anchor() -> None:
    every = expr("@every 90s")
    anchor = ms("2026-03-01T10:00:00.250Z")
    assert next_after(every, UTC_ZONE, anchor - 10 * DAY_MS, anchor) == anchor + 90_000
    assert next_after(every, UTC_ZONE, anchor, anchor) == anchor + 90_000
    assert next_after(every, UTC_ZONE, anchor + 89_999, anchor) == anchor + 90_000
    assert next_after(every, UTC_ZONE, anchor + 90_000, anchor) == anchor + 180_000
    assert next_after(every, NEW_YORK, anchor + 1_000_000, anchor) == anchor + 12 * 90_000


@given(
    every=st.integers(1_000, 3 * DAY_MS),
    anchor=st.integers(0, 4_000_000_000_000),
    offset=st.integers(-5 * DAY_MS, 400 * DAY_MS),
)
def test_every_is_the_first_anchor_multiple_after(every: int, anchor: int, offset: int) -> None:
    after = anchor + offset
    found = next_after(expr(f"@every {every}ms"), UTC_ZONE, after, anchor)
    assert found is not None and found > after
    assert (found - anchor) % every == 0 and found - anchor >= every
    assert found - every <= max(after, anchor)


# -- when it fires: properties against an independent oracle (UTC) ----------------------

_RANGES = ((0, 59), (0, 59), (0, 23), (1, 31), (1, 12), (0, 6))


def _field_text(values: frozenset[int], low: int, high: int, sunday_as_seven: bool) -> str:
    if values == frozenset(range(low, high + 1)):
        return "*"
    shown = sorted(7 if v == 0 and sunday_as_seven and high == 6 else v for v in values)
    return ",".join(map(str, shown))


@st.composite
def cron_sets(draw: Any, seconds: bool = False) -> tuple[str, tuple[frozenset[int], ...], bool]:
    """An expression built from a random set per field: its text, the sets and whether
    day-of-month and day-of-week are both restricted (either then fires)."""
    sets = []
    for index, (low, high) in enumerate(_RANGES):
        if index == 0 and not seconds:
            sets.append(frozenset({0}))
            continue
        full = draw(st.booleans()) if index >= 3 else draw(st.integers(0, 4)) == 0
        if full:
            sets.append(frozenset(range(low, high + 1)))
        else:
            size = draw(st.integers(1, 4 if index < 3 else 6))
            sets.append(frozenset(draw(st.sets(st.integers(low, high), min_size=1, max_size=size))))
    sevens = draw(st.booleans())
    texts = [
        _field_text(s, low, high, sevens) for s, (low, high) in zip(sets, _RANGES, strict=True)
    ]
    if not seconds:
        texts = texts[1:]
    either = texts[-3] != "*" and texts[-1] != "*"
    return " ".join(texts), tuple(sets), either


def _matches(sets: Sequence[frozenset[int]], either: bool, wall: datetime) -> bool:
    seconds, minutes, hours, days, months, weekdays = sets
    by_day, by_weekday = wall.day in days, (wall.weekday() + 1) % 7 in weekdays
    day_ok = (by_day or by_weekday) if either else (by_day and by_weekday)
    return (
        wall.second in seconds
        and wall.minute in minutes
        and wall.hour in hours
        and wall.month in months
        and day_ok
    )


def _oracle_utc(sets: Sequence[frozenset[int]], either: bool, after_ms: int) -> int | None:
    """The first UTC instant after `after_ms` the sets name, day by day for ten years."""
    seconds, minutes, hours, days, months, weekdays = sets
    day = datetime.fromtimestamp(after_ms // 1000, UTC).replace(hour=0, minute=0, second=0)
    for _ in range(3700):
        if _matches((EVERYTHING, EVERYTHING, EVERYTHING, days, months, weekdays), either, day):
            for hour in sorted(hours):
                for minute in sorted(minutes):
                    for second in sorted(seconds):
                        at = day.replace(hour=hour, minute=minute, second=second)
                        at_ms = int(at.timestamp()) * 1000
                        if at_ms > after_ms:
                            return at_ms
        day += timedelta(days=1)
    return None


_INSTANTS = st.integers(ms("2020-01-01T00:00:00Z"), ms("2035-12-31T23:59:59Z"))


@given(cron=cron_sets(), after=_INSTANTS)
@settings(max_examples=150, deadline=None)
def test_next_after_in_utc_is_the_first_matching_minute_after(
    cron: tuple[str, tuple[frozenset[int], ...], bool], after: int
) -> None:
    text, sets, either = cron
    found = next_after(expr(text), UTC_ZONE, after, 0)
    assert found == _oracle_utc(sets, either, after), text
    if found is None:
        return
    assert found > after and found % MINUTE_MS == 0
    assert _matches(sets, either, datetime.fromtimestamp(found // 1000, UTC))
    # Brute force: no minute between `after` and the result matches (within a day of after).
    minute = after - after % MINUTE_MS + MINUTE_MS
    while minute < min(found, after + DAY_MS):
        assert not _matches(sets, either, datetime.fromtimestamp(minute // 1000, UTC)), text
        minute += MINUTE_MS


@given(cron=cron_sets(seconds=True), after=_INSTANTS)
@settings(max_examples=80, deadline=None)
def test_next_after_with_seconds_is_the_first_matching_second_after(
    cron: tuple[str, tuple[frozenset[int], ...], bool], after: int
) -> None:
    text, sets, either = cron
    found = next_after(expr(text), UTC_ZONE, after, 0)
    assert found == _oracle_utc(sets, either, after), text
    if found is None:
        return
    assert found > after and found % 1000 == 0
    second = after - after % 1000 + 1000
    while second < min(found, after + 3_600_000):
        assert not _matches(sets, either, datetime.fromtimestamp(second // 1000, UTC)), text
        second += 1000


# -- daylight saving time: the 2026 transitions, explicitly ------------------------------

# New York: 2026-03-08 02:00 EST -> 03:00 EDT (07:00Z); 2026-11-01 02:00 EDT -> 01:00 EST
# (06:00Z), so 01:00-01:59 happens twice. Berlin: 2026-03-29 02:00 CET -> 03:00 CEST
# (01:00Z); 2026-10-25 03:00 CEST -> 02:00 CET (01:00Z), so 02:00-02:59 happens twice.
DST_CASES = [
    # a skipped wall time does not fire that day
    ("30 2 * * *", NEW_YORK, "2026-03-07T00:00:00Z",
     ["2026-03-07T07:30:00.000Z", "2026-03-09T06:30:00.000Z", "2026-03-10T06:30:00.000Z"]),
    ("30 1 * * *", NEW_YORK, "2026-03-07T00:00:00Z",
     ["2026-03-07T06:30:00.000Z", "2026-03-08T06:30:00.000Z", "2026-03-09T05:30:00.000Z"]),
    ("* * * * *", NEW_YORK, "2026-03-08T06:58:00Z",
     ["2026-03-08T06:59:00.000Z", "2026-03-08T07:00:00.000Z", "2026-03-08T07:01:00.000Z"]),
    # a repeated wall time fires once, at its first occurrence
    ("30 1 * * *", NEW_YORK, "2026-10-31T00:00:00Z",
     ["2026-10-31T05:30:00.000Z", "2026-11-01T05:30:00.000Z", "2026-11-02T06:30:00.000Z"]),
    ("30 2 * * *", NEW_YORK, "2026-10-31T00:00:00Z",
     ["2026-10-31T06:30:00.000Z", "2026-11-01T07:30:00.000Z", "2026-11-02T07:30:00.000Z"]),
    ("* * * * *", NEW_YORK, "2026-11-01T05:58:00Z",
     ["2026-11-01T05:59:00.000Z", "2026-11-01T07:00:00.000Z", "2026-11-01T07:01:00.000Z"]),
    # from inside the repeated hour (its second pass) nothing of it fires again
    ("* * * * *", NEW_YORK, "2026-11-01T06:15:00Z",
     ["2026-11-01T07:00:00.000Z", "2026-11-01T07:01:00.000Z"]),
    ("30 1 * * *", NEW_YORK, "2026-11-01T06:15:00Z",
     ["2026-11-02T06:30:00.000Z"]),
    ("30 2 * * *", BERLIN, "2026-03-28T00:00:00Z",
     ["2026-03-28T01:30:00.000Z", "2026-03-30T00:30:00.000Z", "2026-03-31T00:30:00.000Z"]),
    ("30 1 * * *", BERLIN, "2026-03-28T00:00:00Z",
     ["2026-03-28T00:30:00.000Z", "2026-03-29T00:30:00.000Z", "2026-03-29T23:30:00.000Z"]),
    ("* * * * *", BERLIN, "2026-03-29T00:58:00Z",
     ["2026-03-29T00:59:00.000Z", "2026-03-29T01:00:00.000Z", "2026-03-29T01:01:00.000Z"]),
    ("30 2 * * *", BERLIN, "2026-10-24T00:00:00Z",
     ["2026-10-24T00:30:00.000Z", "2026-10-25T00:30:00.000Z", "2026-10-26T01:30:00.000Z"]),
    ("30 1 * * *", BERLIN, "2026-10-23T12:00:00Z",
     ["2026-10-23T23:30:00.000Z", "2026-10-24T23:30:00.000Z", "2026-10-26T00:30:00.000Z"]),
    ("* * * * *", BERLIN, "2026-10-25T00:58:00Z",
     ["2026-10-25T00:59:00.000Z", "2026-10-25T02:00:00.000Z", "2026-10-25T02:01:00.000Z"]),
    ("30 2 * * *", BERLIN, "2026-10-25T01:15:00Z",
     ["2026-10-26T01:30:00.000Z"]),
]  # fmt: skip


@pytest.mark.parametrize(("text", "zone", "after", "expected"), DST_CASES)
def test_dst_2026(text: str, zone: ZoneInfo, after: str, expected: list[str]) -> None:
    assert upcoming(text, zone, after, len(expected)) == expected


@pytest.mark.parametrize(
    ("zone", "day", "minutes"),
    [
        (NEW_YORK, "2026-03-08", 23 * 60),
        (NEW_YORK, "2026-11-01", 24 * 60),
        (BERLIN, "2026-03-29", 23 * 60),
        (BERLIN, "2026-10-25", 24 * 60),
    ],
)
def test_every_minute_fires_once_per_existing_wall_minute_on_a_dst_day(
    zone: ZoneInfo, day: str, minutes: int
) -> None:
    start = datetime.fromisoformat(day).replace(tzinfo=zone)
    end = start + timedelta(days=1)
    begin_ms = int(start.timestamp()) * 1000
    end_ms = int(end.timestamp()) * 1000
    every_minute, at, walls = expr("* * * * *"), begin_ms - 1, []
    while True:
        found = next_after(every_minute, zone, at, 0)
        assert found is not None and found > at
        if found >= end_ms:
            break
        walls.append(datetime.fromtimestamp(found // 1000, zone).replace(tzinfo=None))
        at = found
    assert len(walls) == len(set(walls)) == minutes
    assert walls == sorted(walls)


# -- daylight saving time: properties against an instant-by-instant oracle ---------------

DST_ZONES = (
    "America/New_York",
    "Europe/Berlin",
    "Australia/Lord_Howe",  # a half-hour shift
    "America/Santiago",  # shifts at midnight
    "America/Havana",  # shifts at midnight
    "Pacific/Chatham",  # +12:45 / +13:45
    "Asia/Kolkata",  # none
)


@cache
def _transitions(name: str) -> tuple[int, ...]:
    """The instants (ms) at which the zone's offset changes in 2024-2028."""
    zone, out = ZoneInfo(name), []
    day = ms("2024-01-01T00:00:00Z")
    end = ms("2029-01-01T00:00:00Z")

    def offset(at: int) -> Any:
        return datetime.fromtimestamp(at // 1000, zone).utcoffset()

    while day < end:
        if offset(day) != offset(day + DAY_MS):
            low, high = day, day + DAY_MS
            while high - low > MINUTE_MS:
                mid = (low + high) // 2 // MINUTE_MS * MINUTE_MS
                low, high = (mid, high) if offset(mid) == offset(low) else (low, mid)
            out.append(high)
        day += DAY_MS
    return tuple(out) or (ms("2026-06-01T00:00:00Z"),)


@st.composite
def near_a_transition(draw: Any) -> tuple[str, int, str, tuple[frozenset[int], ...]]:
    """A zone, an instant within two days of one of its offset changes, and an expression
    that fires every day at random hours and minutes, often the hours the change skips
    or repeats."""
    name = draw(st.sampled_from(DST_ZONES))
    zone = ZoneInfo(name)
    transition = draw(st.sampled_from(_transitions(name)))
    hour_ms = 3_600_000
    after = transition + draw(
        st.one_of(st.integers(-3 * hour_ms, hour_ms), st.integers(-2 * DAY_MS, 2 * DAY_MS))
    )
    before = datetime.fromtimestamp((transition - MINUTE_MS) // 1000, zone).hour
    at = datetime.fromtimestamp(transition // 1000, zone).hour
    near = sorted({before, (before + 1) % 24, at})
    hours = frozenset(draw(st.lists(st.sampled_from(near), max_size=3))) | draw(
        st.frozensets(st.integers(0, 23), max_size=3)
    )
    if not hours or draw(st.integers(0, 5)) == 0:
        hours = frozenset(range(24))
    minutes = draw(
        st.one_of(st.just(EVERYTHING), st.frozensets(st.integers(0, 59), min_size=1, max_size=4))
    )
    text = f"{_field_text(minutes, 0, 59, False)} {_field_text(hours, 0, 23, False)} * * *"
    sets = (frozenset({0}), minutes, hours, frozenset(range(1, 32)), frozenset(range(1, 13)),
            frozenset(range(7)))  # fmt: skip
    return name, after, text, sets


@given(case=near_a_transition())
@settings(max_examples=150, deadline=None)
def test_next_after_in_a_zone_is_the_first_existing_first_occurrence(
    case: tuple[str, int, str, tuple[frozenset[int], ...]],
) -> None:
    """Oracle: walk real instants minute by minute; an instant fires when its wall time
    matches and is that wall time's first occurrence (fold 0). A wall time the zone
    skips is the wall time of no instant, so it never fires."""
    name, after, text, sets = case
    zone = ZoneInfo(name)
    found = next_after(expr(text), zone, after, 0)
    assert found is not None and found > after and found % 1000 == 0
    wall = datetime.fromtimestamp(found // 1000, zone)
    assert wall.fold == 0 and _matches(sets, False, wall.replace(tzinfo=None)), (text, name)
    minute = after - after % MINUTE_MS + MINUTE_MS
    while minute < found:
        local = datetime.fromtimestamp(minute // 1000, zone)
        fires = local.fold == 0 and _matches(sets, False, local.replace(tzinfo=None))
        assert not fires, (text, name, format_rfc3339(after), format_rfc3339(minute))
        minute += MINUTE_MS


def test_a_half_hour_fall_back_fires_the_repeated_half_hour_once() -> None:
    # Lord Howe, 2026-04-05: 02:00 (+11) -> 01:30 (+10:30), 01:30-01:59 happens twice.
    zone = ZoneInfo("Australia/Lord_Howe")
    assert upcoming("45 1 * * *", zone, "2026-04-03T00:00:00Z", 3) == [
        "2026-04-03T14:45:00.000Z",
        "2026-04-04T14:45:00.000Z",
        "2026-04-05T15:15:00.000Z",
    ]


@pytest.mark.parametrize(
    ("text", "after"),
    [
        ("0 0 1 1 *", "9999-06-01T00:00:00Z"),
        ("* * * * *", "9999-12-31T23:59:30Z"),
        ("0 0 31 2 *", "9995-01-01T00:00:00Z"),
    ],
)
def test_next_after_near_the_end_of_time_is_none_not_an_exception(text: str, after: str) -> None:
    assert next_after(expr(text), UTC_ZONE, ms(after), 0) is None
