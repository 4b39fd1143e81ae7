"""Durations as policies give them: an ISO 8601 duration of fixed length, or whole
seconds, read into milliseconds and written back in one canonical form."""

from __future__ import annotations

import isodate

from gateway.core.errors import invalid_request, shown
from gateway.core.limits import duration_problem

_MS_PER_DAY = 86_400_000


def period_or_raise(raw: object, field: str) -> int | None:
    """An ISO 8601 duration of fixed length, or whole seconds, as milliseconds."""
    if raw is None:
        return None
    fix = 'use an ISO 8601 duration such as "PT1H" or "P7D", or whole seconds'
    if isinstance(raw, bool) or not isinstance(raw, int | str):
        raise invalid_request(f"{field} must be a string or an integer ({fix}), not {shown(raw)}")
    if isinstance(raw, int):
        if raw <= 0:
            raise invalid_request(f"{field} must be positive, not {raw}")
        return _bounded(raw * 1000, field)
    try:
        parsed = isodate.parse_duration(raw)
    except (isodate.ISO8601Error, ValueError, OverflowError, ArithmeticError):
        raise invalid_request(f"{field} {shown(raw)} is not an ISO 8601 duration; {fix}") from None
    if isinstance(parsed, isodate.Duration):
        # A year or a month has no fixed length; a window must mean the same everywhere.
        raise invalid_request(
            f"{field} {shown(raw)} uses years or months, which have no fixed length; "
            'use days instead, e.g. "P30D" or "P365D"'
        )
    micros = (parsed.days * 86_400 + parsed.seconds) * 1_000_000 + parsed.microseconds
    if micros <= 0:
        raise invalid_request(f"{field} {shown(raw)} must be a positive duration")
    if micros % 1000:
        raise invalid_request(f"{field} {shown(raw)} must be a whole number of milliseconds")
    return _bounded(micros // 1000, field)


def _bounded(ms: int, field: str) -> int:
    problem = duration_problem(ms, field)
    if problem is not None:
        raise invalid_request(problem)
    return ms


def format_period(ms: int) -> str:
    """The canonical ISO 8601 form of a period: days, then hours, minutes, seconds."""
    days, rest = divmod(ms, _MS_PER_DAY)
    hours, rest = divmod(rest, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    seconds, millis = divmod(rest, 1000)
    text = f"P{days}D" if days else "P"
    time = ""
    if hours:
        time += f"{hours}H"
    if minutes:
        time += f"{minutes}M"
    if seconds or millis:
        time += f"{seconds}.{millis:03d}".rstrip("0").rstrip(".") + "S"
    return text + ("T" + time if time else "")
