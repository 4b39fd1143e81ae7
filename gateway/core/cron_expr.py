"""Cron expressions as OJS defines them, and when one fires next in a timezone.

Five fields (minute hour day-of-month month day-of-week), or six with seconds
first; `*`, lists, ranges and steps in every field; month and weekday names
(JAN, MON; any case); 0 and 7 both Sunday; the aliases @yearly, @annually,
@monthly, @weekly, @daily, @midnight, @hourly; and `@every <duration>` (Go's
form: 1h30m, 1.5h, 45s, 500ms, us, ns; at least a second), anchored at the
cron's registration. When both day fields are restricted (neither starts with
`*`) a day matching either fires (POSIX cron).
`L`, `W` and `#` (which OJS says SHOULD be supported) are refused with a
message saying so.

Times are wall-clock times in the cron's IANA timezone: a time that a
spring-forward skips does not fire, and a time a fall-back repeats fires once,
at its first occurrence (OJS cron, section 5.2). Pure: `next_after` is a
function of the expression, the zone and an instant.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from functools import lru_cache
from importlib import resources
from zoneinfo import ZoneInfo

from gateway.core.errors import INVALID_REQUEST, GatewayError
from gateway.core.limits import MAX_DURATION_DAYS, duration_problem

ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_DAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
# (name, lowest, highest, names from `lowest` on)
_FIELDS = (
    ("second", 0, 59, ()),
    ("minute", 0, 59, ()),
    ("hour", 0, 23, ()),
    ("day of month", 1, 31, ()),
    ("month", 1, 12, _MONTHS),
    ("day of week", 0, 7, _DAYS),
)
_UNITS = r"ns|us|µs|μs|ms|h|m|s"
_EVERY = re.compile(rf"@every[ \t]+((?:[0-9]+(?:\.[0-9]+)?(?:{_UNITS}))+)")
# Fields are separated by ASCII blanks only (str.split would also take U+3000 and the like).
_BLANKS = " \t\r\n"
_SEPARATOR = re.compile(f"[{_BLANKS}]+")
_EVERY_PART = re.compile(rf"([0-9]+(?:\.[0-9]+)?)({_UNITS})")
_UNIT_MS = {
    "ns": Fraction(1, 1_000_000), "us": Fraction(1, 1000), "µs": Fraction(1, 1000),
    "μs": Fraction(1, 1000), "ms": Fraction(1), "s": Fraction(1000), "m": Fraction(60_000),
    "h": Fraction(3_600_000),
}  # fmt: skip
_DIGITS = re.compile(r"[0-9]+")
# A schedule with no time within this many years is taken to have none (31 February);
# 28 years hold every date's every weekday (29 February on a Sunday comes every 28).
_SEARCH_YEARS = 28
_LAST_YEAR = 9998  # datetime ends with 9999: a search stops a year before it
MAX_EXPRESSION_CHARS = 256
# Area/Location[/More]: each part a name the database could hold (no "", ".", ".." or blanks).
_ZONE_NAME = re.compile(r"[A-Za-z0-9_+\-]+(?:/[A-Za-z0-9_+\-]+)+")
UTC_ZONE = ZoneInfo("UTC")  # no rules to differ between databases


@dataclass(frozen=True, slots=True)
class CronExpr:
    seconds: frozenset[int]
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 is Sunday
    any_day: bool  # the day-of-month field is `*`
    any_weekday: bool
    every_ms: int | None = None  # `@every`: fires every this many ms from an anchor


def parse_cron(text: object) -> CronExpr | GatewayError:
    """The expression, or an invalid_request saying what is wrong with it."""
    if not isinstance(text, str) or not text.strip(_BLANKS):
        return _bad("the cron expression must be a non-empty string")
    if len(text) > MAX_EXPRESSION_CHARS:
        return _bad(f"the cron expression is longer than {MAX_EXPRESSION_CHARS} characters")
    stripped = text.strip(_BLANKS)
    if stripped.startswith("@"):
        return _special(stripped)
    tokens = _SEPARATOR.split(stripped)
    if len(tokens) not in (5, 6):
        return _bad(
            f"cron expression {text!r} has {len(tokens)} fields; it needs 5 (minute hour "
            "day-of-month month day-of-week) or 6 (seconds first)"
        )
    if len(tokens) == 5:
        tokens = ["0", *tokens]
    sets = []
    for token, (name, low, high, names) in zip(tokens, _FIELDS, strict=True):
        values = _field(token, name, low, high, names)
        if isinstance(values, GatewayError):
            return values
        sets.append(values)
    weekdays = frozenset(0 if d == 7 else d for d in sets[5])
    return CronExpr(
        sets[0], sets[1], sets[2], sets[3], sets[4], weekdays,
        any_day=tokens[3].startswith("*"), any_weekday=tokens[5].startswith("*"),
    )  # fmt: skip


def _special(text: str) -> CronExpr | GatewayError:
    alias = ALIASES.get(text.lower())
    if alias is not None:
        return parse_cron(alias)
    every = _EVERY.fullmatch(text.lower())
    if every is None:
        known = ", ".join(ALIASES)
        return _bad(f"{text!r} is not a cron expression: the @ forms are {known} and @every")
    exact = sum(Fraction(n) * _UNIT_MS[u] for n, u in _EVERY_PART.findall(every.group(1)))
    ms = int(exact)
    if ms < 1000:
        return _bad(f"{text!r} is shorter than a second, the finest a cron fires at")
    if duration_problem(ms, "@every") is not None:  # its slots would pass the calendar's end
        return _bad(f"{text!r} is longer than {MAX_DURATION_DAYS} days, the longest interval")
    everything = frozenset(range(60))
    return CronExpr(everything, everything, frozenset(), frozenset(), frozenset(), frozenset(),
                    any_day=True, any_weekday=True, every_ms=ms)  # fmt: skip


def _field(
    token: str, name: str, low: int, high: int, names: tuple[str, ...]
) -> frozenset[int] | GatewayError:
    values: set[int] = set()
    for part in token.split(","):
        if any(c in part.upper() for c in "LW#") and not _is_name(part, names):
            return _bad(
                f"the {name} field {token!r} uses L, W or #, which this gateway does not "
                "support; use lists, ranges and steps"
            )
        base, slash, step_text = part.partition("/")
        step = 1
        if slash:
            if not _DIGITS.fullmatch(step_text) or int(step_text) == 0:
                return _bad(f"the {name} field {token!r} has a step that is not a positive number")
            step = int(step_text)
        if base == "*":
            first, last = low, high
        else:
            start, dash, end = base.partition("-")
            first_value = _value(start, name, low, high, names)
            if isinstance(first_value, GatewayError):
                return first_value
            first = last = first_value
            if dash:
                last_value = _value(end, name, low, high, names)
                if isinstance(last_value, GatewayError):
                    return last_value
                last = last_value
                if last < first:
                    return _bad(f"the {name} field {token!r} has a range that runs backwards")
            elif slash:
                last = high  # `5/15`: from 5 on, every 15
        values.update(range(first, last + 1, step))
    return frozenset(values)


def _is_name(part: str, names: tuple[str, ...]) -> bool:
    pieces = [piece for piece in re.split(r"[-/]", part) if piece]
    return bool(names) and all(
        (p.isascii() and p.upper() in names) or _DIGITS.fullmatch(p) for p in pieces
    )


def _value(text: str, name: str, low: int, high: int, names: tuple[str, ...]) -> int | GatewayError:
    if text.isascii() and text.upper() in names:  # "ſun".upper() is "SUN"
        return names.index(text.upper()) + (1 if name == "month" else 0)
    if not _DIGITS.fullmatch(text):
        return _bad(f"the {name} field has {text!r}, which is not a number from {low} to {high}")
    value = int(text)
    if not low <= value <= high:
        return _bad(f"the {name} field has {value}, outside {low}-{high}")
    return value


def parse_zone(name: object) -> ZoneInfo | GatewayError:
    """An IANA zone by its Area/Location name, or UTC. Offsets (+05:00) and abbreviations
    (EST) are refused, as OJS asks: they do not follow daylight saving time."""
    if name == "UTC":
        return UTC_ZONE
    if not isinstance(name, str) or not _ZONE_NAME.fullmatch(name):
        return _bad(
            f"timezone {_shown(name)} is not an IANA name such as Europe/Paris (or UTC); "
            "offsets and abbreviations are refused"
        )
    zone = _zone(name)
    return zone if zone is not None else _bad(
        f"timezone {_shown(name)} is not in the IANA timezone database"
    )  # fmt: skip


def _shown(value: object) -> str:
    """A caller's value in a message, cut to a readable length."""
    text = repr(value)
    return text if len(text) <= 80 else text[:80] + "…"


@lru_cache(maxsize=1024)
def _zone(name: str) -> ZoneInfo | None:
    """The zone from the `tzdata` package alone, never the host's files, so every machine
    (and every replay) computes the same times with the same database version."""
    path = resources.files("tzdata").joinpath("zoneinfo", *name.split("/"))
    try:
        with path.open("rb") as data:
            return ZoneInfo.from_file(data, key=name)
    except (OSError, ValueError):
        return None


def next_after(expr: CronExpr, zone: ZoneInfo, after_ms: int, anchor_ms: int) -> int | None:
    """The first time strictly after `after_ms` the cron fires, in ms; None if never.
    `anchor_ms`: where an @every schedule counts from."""
    if expr.every_ms is not None:
        if after_ms < anchor_ms:
            return anchor_ms + expr.every_ms
        return anchor_ms + ((after_ms - anchor_ms) // expr.every_ms + 1) * expr.every_ms
    local = datetime.fromtimestamp(after_ms // 1000, zone).replace(tzinfo=None)
    if local.year >= _LAST_YEAR:
        return None  # no search steps past the calendar's end
    at = local + timedelta(seconds=1)
    stop = min(local.year + _SEARCH_YEARS, _LAST_YEAR)
    while at.year <= stop:
        if at.month not in expr.months:
            at = datetime(at.year + at.month // 12, at.month % 12 + 1, 1)
        elif not _day_matches(expr, at):
            at = datetime(at.year, at.month, at.day) + timedelta(days=1)
        elif at.hour not in expr.hours:
            at = at.replace(minute=0, second=0) + timedelta(hours=1)
        elif at.minute not in expr.minutes:
            at = at.replace(second=0) + timedelta(minutes=1)
        elif at.second not in expr.seconds:
            at += timedelta(seconds=1)
        else:
            instant = _instant(at, zone)
            if instant is not None and instant > after_ms:
                return instant
            at += timedelta(seconds=1)
    return None


def _day_matches(expr: CronExpr, at: datetime) -> bool:
    by_day = at.day in expr.days
    by_weekday = (at.isoweekday() % 7) in expr.weekdays
    if expr.any_day or expr.any_weekday:
        return by_day and by_weekday
    return by_day or by_weekday


def _instant(local: datetime, zone: ZoneInfo) -> int | None:
    """The ms of a wall-clock time in the zone (its first occurrence); None if the zone
    skips it (spring forward)."""
    aware = local.replace(tzinfo=zone, fold=0)
    back = aware.astimezone(UTC).astimezone(zone).replace(tzinfo=None)
    if back != local:
        return None
    return int(aware.timestamp()) * 1000


def _bad(message: str) -> GatewayError:
    return GatewayError(INVALID_REQUEST, message)
