"""Rate limits' shapes: a job's rate limit and an operator's override of a key, as clients
send them and as the gateway keeps them (the rule that uses them: core/rates.py).

A job may carry `rate_limit` (or, in the HTTP form, `options.rate_limit`), read in any of
these shapes and kept on the accepted job in the first (`parse_rate_limit`):

    {"key": "k", "concurrency": 2, "rate": {"limit": 5, "period": "PT1S"}, "on_limit": "wait"}
    {"key": "k", "rate": 5, "period": "second"}     (minute, hour, day, or ISO 8601)
    {"max_per_second": 5}                            (the same as rate 5, period PT1S)

Without `key` the key is `queue:<queue>`: the queue's jobs share it. `on_limit` says what a
claim the key refuses does to its job (core/rate_moves.py): `wait` (the default: the job
stays available until a permit frees), `reschedule` (the job is scheduled for when a permit
is expected) or `drop` (the job is discarded). `throttle` is refused as not supported yet.

An override (`parse_override`) replaces, while it lasts, the limits it names of every job
of its key, in the spec's shape `{"concurrency", "rate": {"limit", "period"},
"expires_at"}` or the OJS Admin UI's `{"limit", "period": "1s"|"10s"|"1m"|"5m"|"1h",
"expires_at"}`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import orjson

from gateway.core.errors import (
    INVALID_REQUEST,
    GatewayError,
    Invalid,
    invalid_request,
    shown,
    unsupported,
)
from gateway.core.periods import format_period, period_or_raise
from gateway.core.times import format_rfc3339, parse_rfc3339

JOB_FIELD = "rate_limit"  # the job's policy, normalised (set by the gateway)
WAIT, RESCHEDULE, DROP = "wait", "reschedule", "drop"
ON_LIMIT = (WAIT, RESCHEDULE, DROP)
MAX_CONCURRENCY = 1000
MAX_RATE = 10_000
MAX_PERIOD_MS = 86_400_000
KEY_RULE = 'letters, digits, ".", "_", ":" and "-", starting with a letter or digit, 255 at most'
_KEY = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9._:-]{0,254}")
_WORDS = {"second": 1000, "minute": 60_000, "hour": 3_600_000, "day": 86_400_000}
_SHORT = re.compile(r"([1-9][0-9]{0,5})(ms|s|m|h|d)")  # the Admin UI's "1s", "10s", "5m"
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_FIELDS = frozenset({"key", "concurrency", "rate", "period", "max_per_second", "on_limit"})
_OVERRIDE_FIELDS = frozenset({"concurrency", "rate", "limit", "period", "expires_at"})


@dataclass(frozen=True, slots=True)
class RateLimit:
    key: str
    concurrency: int | None = None
    limit: int | None = None  # starts per period
    period_ms: int | None = None
    on_limit: str = WAIT

    def to_dict(self) -> dict[str, Any]:
        shown: dict[str, Any] = {"key": self.key}
        if self.concurrency is not None:
            shown["concurrency"] = self.concurrency
        if self.limit is not None and self.period_ms is not None:
            shown["rate"] = {"limit": self.limit, "period": format_period(self.period_ms)}
        shown["on_limit"] = self.on_limit
        return shown


@dataclass(frozen=True, slots=True)
class Override:
    """Limits an operator set on a key, replacing those it names of the key's jobs' own
    until `expires_at_ms` (None: until cleared)."""

    concurrency: int | None = None
    limit: int | None = None
    period_ms: int | None = None
    expires_at_ms: int | None = None

    def to_dict(self) -> dict[str, Any]:
        shown: dict[str, Any] = {}
        if self.concurrency is not None:
            shown["concurrency"] = self.concurrency
        if self.limit is not None and self.period_ms is not None:
            shown["rate"] = {"limit": self.limit, "period": format_period(self.period_ms)}
        at = self.expires_at_ms
        shown["expires_at"] = None if at is None else format_rfc3339(at)
        return shown

    def active(self, now_ms: int) -> bool:
        return self.expires_at_ms is None or now_ms < self.expires_at_ms

    def over(self, key: str, policy: RateLimit | None) -> RateLimit:
        """The job's own limits with this override's in their place."""
        base = policy or RateLimit(key)
        if self.concurrency is not None:
            base = replace(base, concurrency=self.concurrency)
        if self.limit is not None:
            base = replace(base, limit=self.limit, period_ms=self.period_ms)
        return base


# -- a job's rate limit ---------------------------------------------------------


def parse_rate_limit(raw: object, queue: str, field: str) -> RateLimit | None:
    """The request's rate limit (`field` names where it was given); raises Invalid."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise invalid_request(f"{field} must be an object such as {{\"key\": ..., \"rate\": "
                              f'{{"limit": 5, "period": "PT1S"}}}}, not {shown(raw)}')  # fmt: skip
    unknown = sorted(str(k) for k in raw if k not in _FIELDS)
    if "throttle" in unknown:
        raise unsupported(f"{field}.throttle", "give rate {limit, period} instead")
    if unknown:
        raise invalid_request(
            f"{field}.{unknown[0]} is not a field of a rate limit; use key, concurrency, "
            "rate, period, max_per_second, on_limit"
        )
    on_limit = raw.get("on_limit", WAIT)
    if on_limit not in ON_LIMIT:
        raise invalid_request(f'{field}.on_limit must be "wait", "reschedule" or "drop"')
    key = raw.get("key", f"queue:{queue}")
    if not isinstance(key, str) or not _KEY.fullmatch(key):
        raise invalid_request(f"{field}.key must be {KEY_RULE}, not {shown(key)}")
    concurrency = _concurrency(raw.get("concurrency"), f"{field}.concurrency")
    limit, period_ms = rate_pair(raw, field)
    if concurrency is None and limit is None:
        raise invalid_request(f"{field} needs concurrency, rate or max_per_second")
    return RateLimit(key, concurrency, limit, period_ms, on_limit)


def _concurrency(raw: object, field: str) -> int | None:
    if raw is not None and not _whole(raw, 0, MAX_CONCURRENCY):
        raise invalid_request(
            f"{field} must be a whole number from 0 to {MAX_CONCURRENCY}: how many jobs of "
            "the key may run at once"
        )
    assert raw is None or isinstance(raw, int)
    return raw


def rate_pair(raw: Mapping[str, Any], field: str) -> tuple[int | None, int | None]:
    """`rate` and `period` (or `max_per_second`) of `raw`: (limit, period in ms), or
    (None, None) without one; raises Invalid naming the field."""
    rate, period, per_second = raw.get("rate"), raw.get("period"), raw.get("max_per_second")
    if per_second is not None:
        if rate is not None or period is not None:
            raise invalid_request(f"give {field}.max_per_second or {field}.rate, not both")
        return _limit(per_second, f"{field}.max_per_second"), 1000
    if rate is None:
        if period is not None:
            raise invalid_request(f"{field}.period needs {field}.rate (starts per period)")
        return None, None
    if isinstance(rate, Mapping):
        if period is not None:
            raise invalid_request(f"give the period once, as {field}.rate.period")
        extra = sorted(str(k) for k in rate if k not in ("limit", "period"))
        if extra:
            raise invalid_request(f"{field}.rate.{extra[0]} is not a field; use limit, period")
        limit = _limit(rate.get("limit"), f"{field}.rate.limit")
        return limit, _period(rate.get("period"), f"{field}.rate.period")
    return _limit(rate, f"{field}.rate"), _period(period, f"{field}.period")


def _limit(raw: object, field: str) -> int:
    if not _whole(raw, 1, MAX_RATE):
        raise invalid_request(f"{field} must be a whole number from 1 to {MAX_RATE}: "
                              "how many jobs may start in one period")  # fmt: skip
    assert isinstance(raw, int)
    return raw


def _period(raw: object, field: str) -> int:
    if raw is None:
        raise invalid_request(f'{field} is required: "second", "minute", "hour", "day", a '
                              'short form such as "10s" or an ISO 8601 duration such as '
                              '"PT1S"')  # fmt: skip
    ms = None
    if isinstance(raw, str):
        short = _SHORT.fullmatch(raw)
        ms = _WORDS.get(raw) or (short and int(short[1]) * _UNIT_MS[short[2]])
    if ms is None:
        ms = period_or_raise(raw, field)
    assert ms is not None
    if ms > MAX_PERIOD_MS:
        raise invalid_request(f"{field} must be at most a day (P1D)")
    return ms


def short_period(ms: int) -> str:
    """A period in the OJS Admin UI's short form ("10s", "5m", "1h"): its largest whole unit."""
    for unit in ("d", "h", "m", "s"):
        if ms % _UNIT_MS[unit] == 0:
            return f"{ms // _UNIT_MS[unit]}{unit}"
    return f"{ms}ms"


def is_key(text: str) -> bool:
    return _KEY.fullmatch(text) is not None


def _whole(raw: object, low: int, high: int) -> bool:
    return isinstance(raw, int) and not isinstance(raw, bool) and low <= raw <= high


def policy_of(raw: object) -> RateLimit | None:
    """A policy as a job or a state carries it (normalised); None if absent or not one."""
    if not isinstance(raw, Mapping) or "key" not in raw:
        return None
    try:
        return parse_rate_limit(raw, "", JOB_FIELD)
    except Invalid:
        return None


def job_policy(job: Mapping[str, Any]) -> RateLimit | None:
    return policy_of(job.get(JOB_FIELD))


# -- an operator's override -------------------------------------------------------


def parse_override(raw: object) -> Override:
    """An override as PUT /ojs/v1/rate-limits/{key} takes it (either shape); raises Invalid."""
    if not isinstance(raw, Mapping):
        raise invalid_request(f'an override is an object such as {{"concurrency": 0, '
                              f'"expires_at": "..."}}, not {shown(raw)}')  # fmt: skip
    unknown = sorted(str(k) for k in raw if k not in _OVERRIDE_FIELDS)
    if unknown:
        raise invalid_request(f"{unknown[0]} is not a field of an override; use concurrency, "
                              "rate {limit, period} (or limit and period), expires_at")  # fmt: skip
    given_concurrency = raw.get("concurrency")
    if raw.get("limit") is not None and raw.get("period") is None:
        # The Admin UI's flat form of a key limited by concurrency alone (shown so).
        if given_concurrency is not None or raw.get("rate") is not None:
            raise invalid_request("give limit without a period (a concurrency) or concurrency, "
                                  "not both")  # fmt: skip
        given_concurrency, rate = raw["limit"], dict[str, Any]()
    elif raw.get("limit") is not None:  # the Admin UI's flat form of a rate
        if raw.get("rate") is not None:
            raise invalid_request("give rate {limit, period} or limit and period, not both")
        rate = {"rate": {"limit": raw["limit"], "period": raw.get("period")}}
    else:
        rate = {"rate": raw.get("rate"), "period": raw.get("period")}
    limit, period_ms = rate_pair(rate, "override")
    concurrency = _concurrency(given_concurrency, "concurrency")
    if concurrency is None and limit is None:
        raise invalid_request("an override needs concurrency, or a rate: rate {limit, period}, "
                              "or limit and period")  # fmt: skip
    expires = raw.get("expires_at")
    at = parse_rfc3339(expires) if isinstance(expires, str) else None
    if expires is not None and at is None:
        raise invalid_request(f"expires_at must be an RFC 3339 time or null, not {shown(expires)}")
    return Override(concurrency, limit, period_ms, at)


def parse_rate_command(value: bytes) -> tuple[str, Override | None] | GatewayError:
    """A command to a key's home (`rate_command`): `{"key", "override"}`, the override to
    set or null to clear it; else why not."""
    try:
        command = orjson.loads(value)
        if (
            not isinstance(command, Mapping)
            or not isinstance(command.get("key"), str)
            or "override" not in command
        ):
            raise invalid_request('a rate command is {"key", "override"}')
        if not is_key(command["key"]):
            raise invalid_request(f"a rate key is {KEY_RULE}")
        given = command.get("override")
        return command["key"], None if given is None else parse_override(given)
    except orjson.JSONDecodeError:
        return GatewayError(INVALID_REQUEST, "a rate command is JSON")
    except Invalid as exc:
        return exc.error


def rate_command(key: str, override: Override | None) -> bytes:
    """The record `parse_rate_command` reads."""
    return orjson.dumps({"key": key, "override": None if override is None else override.to_dict()})
