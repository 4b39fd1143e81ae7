"""Rate limits on job starts (OJS rate limiting): how many jobs of a rate key may start in a
sliding window, and how many may run at once. The one authority for a key's permits.

A job may carry `rate_limit` (or, in the HTTP form, `options.rate_limit`), read in any of
these shapes and kept on the accepted job in the first (`parse_rate_limit`):

    {"key": "k", "concurrency": 2, "rate": {"limit": 5, "period": "PT1S"}, "on_limit": "wait"}
    {"key": "k", "rate": 5, "period": "second"}     (minute, hour, day, or ISO 8601)
    {"max_per_second": 5}                            (the same as rate 5, period PT1S)

Without `key` the key is `queue:<queue>`: the queue's jobs share it. `on_limit` is `wait`
(the job stays available until a permit frees); `reschedule`, `drop` and `throttle` are
refused as not supported yet.

A key's permits live at its home (wire.rate_home), decided there only, in log order, at the
claim record's broker time (`decide`): a claim is granted while fewer than `concurrency`
permits are held and fewer than `rate.limit` starts lie in the sliding window
(now - period, now]; a start exactly one period old no longer counts. A granted permit
names the claim's job; the job's route applies the claim only with it, and gives it back
(`release`) when the job leaves active, or at once, unused, if the claim did not apply (the
unused permit's start is taken back). So in the home's log no window of one period holds
more than `limit` applied starts, and no more than `concurrency` jobs of the key ever hold
a permit, whichever server fetches. The state is bounded: at most `limit` starts and
`concurrency` holders; a key with neither is deleted.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.core.errors import GatewayError, Invalid, invalid_request, shown, unsupported
from gateway.core.periods import format_period, period_or_raise
from gateway.core.times import format_rfc3339

RATE_LIMITED = "rate_limited"
JOB_FIELD = "rate_limit"  # the job's policy, normalised (set by the gateway)
PERMIT_FIELD = "rate_permit"  # the permit an active job holds (set by its route)
MAX_CONCURRENCY = 1000
MAX_RATE = 10_000
MAX_PERIOD_MS = 86_400_000
KEY_RULE = 'letters, digits, ".", "_", ":" and "-", starting with a letter or digit, 255 at most'
_KEY = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9._:-]{0,254}")
_WORDS = {"second": 1000, "minute": 60_000, "hour": 3_600_000, "day": 86_400_000}
_FIELDS = frozenset({"key", "concurrency", "rate", "period", "max_per_second", "on_limit"})


@dataclass(frozen=True, slots=True)
class RateLimit:
    key: str
    concurrency: int | None = None
    limit: int | None = None  # starts per period
    period_ms: int | None = None

    def to_dict(self) -> dict[str, Any]:
        shown: dict[str, Any] = {"key": self.key}
        if self.concurrency is not None:
            shown["concurrency"] = self.concurrency
        if self.limit is not None and self.period_ms is not None:
            shown["rate"] = {"limit": self.limit, "period": format_period(self.period_ms)}
        shown["on_limit"] = "wait"
        return shown


@dataclass(frozen=True, slots=True)
class Permit:
    """A start the key's home granted: its id (from the home's record), key and time."""

    key: str
    id: str
    at_ms: int

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "id": self.id, "at": format_rfc3339(self.at_ms)}


@dataclass(frozen=True, slots=True)
class RateState:
    """A key's permits at its home: starts in the window (at, permit id), oldest first, and
    the permits held (permit id, job id, granted at); `policy`: the last claim's."""

    policy: RateLimit
    starts: tuple[tuple[int, str], ...] = ()
    holders: tuple[tuple[str, str, int], ...] = ()

    def dump(self) -> bytes:
        return orjson.dumps({
            "key": self.policy.key, "policy": self.policy.to_dict(),
            "starts": self.starts, "holders": self.holders,
        })  # fmt: skip

    @staticmethod
    def load(raw: bytes | Mapping[str, Any] | None) -> RateState | None:
        """A stored or published state; None if absent or not one."""
        try:
            data = orjson.loads(raw) if isinstance(raw, bytes) else raw
            if not isinstance(data, Mapping):
                return None
            policy = policy_of(data.get("policy"))
            if policy is None:
                return None
            starts = tuple((int(at), str(p)) for at, p in data.get("starts") or ())
            holders = tuple((str(p), str(j), int(at)) for p, j, at in data.get("holders") or ())
        except (orjson.JSONDecodeError, TypeError, ValueError):
            return None
        return RateState(policy, starts, holders)


@dataclass(frozen=True, slots=True)
class Refusal:
    strategy: str  # "concurrency" or "rate"
    limit: int
    current: int
    retry_at_ms: int | None  # when a permit frees, if time alone frees one

    def details(self, key: str) -> dict[str, Any]:
        return {
            "key": key, "strategy": self.strategy, "limit": self.limit, "current": self.current,
            "retry_at": None if self.retry_at_ms is None else format_rfc3339(self.retry_at_ms),
        }  # fmt: skip


# -- the policy ----------------------------------------------------------------


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
    on_limit = raw.get("on_limit", "wait")
    if on_limit in ("reschedule", "drop"):
        raise unsupported(f"{field}.on_limit {on_limit!r}", 'only "wait" is built')
    if on_limit != "wait":
        raise invalid_request(f'{field}.on_limit must be "wait", "reschedule" or "drop"')
    key = raw.get("key", f"queue:{queue}")
    if not isinstance(key, str) or not _KEY.fullmatch(key):
        raise invalid_request(f"{field}.key must be {KEY_RULE}, not {shown(key)}")
    concurrency = raw.get("concurrency")
    if concurrency is not None and not _whole(concurrency, 0, MAX_CONCURRENCY):
        raise invalid_request(
            f"{field}.concurrency must be a whole number from 0 to {MAX_CONCURRENCY}: how "
            "many jobs of the key may run at once"
        )
    limit, period_ms = _rate(raw, field)
    if concurrency is None and limit is None:
        raise invalid_request(f"{field} needs concurrency, rate or max_per_second")
    return RateLimit(key, concurrency, limit, period_ms)


def _rate(raw: Mapping[str, Any], field: str) -> tuple[int | None, int | None]:
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
        raise invalid_request(f'{field} is required: "second", "minute", "hour", "day" or '
                              'an ISO 8601 duration such as "PT1S"')  # fmt: skip
    ms = _WORDS.get(raw) if isinstance(raw, str) else None
    if ms is None:
        ms = period_or_raise(raw, field)
    assert ms is not None
    if ms > MAX_PERIOD_MS:
        raise invalid_request(f"{field} must be at most a day (P1D)")
    return ms


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


# -- the rule, at the key's home -------------------------------------------------


def window(state: RateState, policy: RateLimit, now_ms: int) -> tuple[tuple[int, str], ...]:
    """The starts that still count at `now_ms`: those less than one period old."""
    if policy.period_ms is None:
        return ()
    since = now_ms - policy.period_ms
    return tuple(s for s in state.starts if s[0] > since)


def decide(
    state: RateState | None, policy: RateLimit, job_id: str, permit_id: str, now_ms: int
) -> tuple[RateState, Refusal | None]:
    """A claim of `job_id` under `policy` at `now_ms`: granted (the state holds its permit
    and start) or refused, and the key's state after it (pruned either way)."""
    held = () if state is None else state.holders
    starts = () if state is None else window(state, policy, now_ms)
    pruned = RateState(policy, starts, held)
    if policy.concurrency is not None and len(held) >= policy.concurrency:
        return pruned, Refusal("concurrency", policy.concurrency, len(held), None)
    if policy.limit is not None and policy.period_ms is not None and len(starts) >= policy.limit:
        freed = starts[len(starts) - policy.limit][0] + policy.period_ms
        return pruned, Refusal("rate", policy.limit, len(starts), freed)
    started = (*starts, (now_ms, permit_id)) if policy.limit is not None else starts
    return RateState(policy, started, (*held, (permit_id, job_id, now_ms))), None


def release(state: RateState, permit_id: str, unused: bool, now_ms: int) -> RateState:
    """The permit given back: its holder goes; an unused one's start goes too (it never
    started). A permit not held changes nothing but the window."""
    starts = window(state, state.policy, now_ms)
    if unused:
        starts = tuple(s for s in starts if s[1] != permit_id)
    holders = tuple(h for h in state.holders if h[0] != permit_id)
    return RateState(state.policy, starts, holders)


def idle_at(state: RateState) -> int | None:
    """When the key holds nothing, if time alone empties it: its newest start's end; None
    while a permit is held."""
    if state.holders:
        return None
    if not state.starts or state.policy.period_ms is None:
        return 0
    return state.starts[-1][0] + state.policy.period_ms


def refusal_error(job_id: str, key: str, refusal: Refusal) -> GatewayError:
    if refusal.strategy == "concurrency":
        why = f"{refusal.current} of its jobs hold a permit, limit {refusal.limit}"
    else:
        why = f"{refusal.current} starts in the sliding window, limit {refusal.limit}"
    when = "" if refusal.retry_at_ms is None else (
        f"; next permit at {format_rfc3339(refusal.retry_at_ms)}"
    )  # fmt: skip
    return GatewayError(
        RATE_LIMITED, f"job {job_id} waits: rate key {key} is at its limit ({why}){when}"
    )


def permits(state: RateState | None, policy: RateLimit, now_ms: int) -> int:
    """How many claims of the key the state would grant now (fetch asks this of its view)."""
    free = MAX_RATE + MAX_CONCURRENCY
    held = () if state is None else state.holders
    if policy.concurrency is not None:
        free = min(free, policy.concurrency - len(held))
    if policy.limit is not None:
        counted = 0 if state is None else len(window(state, policy, now_ms))
        free = min(free, policy.limit - counted)
    return max(free, 0)


# -- the rule, at the job's route ------------------------------------------------


_WAITING = frozenset({"available", "scheduled", "retryable"})


def needs_permit(job: Mapping[str, Any] | None, claim: bool) -> RateLimit | None:
    """The policy whose home a claim of `job` must pass first: a claim of a rate-limited job
    that waits (a claim of one active, finished or pending is answered by the lifecycle
    rule as it stands, taking no permit); None when it needs none."""
    if not claim or job is None or job.get("state") not in _WAITING:
        return None
    return job_policy(job)


def permit_refusal(job: Mapping[str, Any], permit: Permit | None) -> GatewayError | None:
    """None if the claim's permit (or none) fits the job: a rate-limited job starts only with
    a permit of its own key, any other job without one."""
    policy = job_policy(job)
    if permit is None:
        if policy is None:
            return None
        return GatewayError(RATE_LIMITED, f"job {job.get('id')} starts only with a permit of "
                            f"rate key {policy.key}, granted at the key's home")  # fmt: skip
    if policy is None or policy.key != permit.key:
        return GatewayError(
            "invalid_request",
            f"job {job.get('id')}'s claim carries a permit of rate key {permit.key}, "
            "which is not the job's",
        )
    return None


def held_permit(job: Mapping[str, Any]) -> tuple[str, str] | None:
    """(key, permit id) of the permit a job that is not active still carries, to give back."""
    held = job.get(PERMIT_FIELD)
    if job.get("state") == "active" or not isinstance(held, Mapping):
        return None
    key, permit = held.get("key"), held.get("id")
    return (key, permit) if isinstance(key, str) and isinstance(permit, str) else None


def inspect(key: str, state: RateState | None, now_ms: int) -> dict[str, Any]:
    """A key as GET /ojs/v1/rate-limits/{key} shows it: the spec's fields and the flat ones
    the OJS Admin UI reads (`limit`, `period`, `active`)."""
    policy = None if state is None else state.policy
    active = 0 if state is None else len(state.holders)
    shown: dict[str, Any] = {"key": key, "policy": None if policy is None else policy.to_dict()}
    shown["concurrency"] = None
    if policy is not None and policy.concurrency is not None:
        shown["concurrency"] = {"limit": policy.concurrency, "active": active,
                                "available": max(policy.concurrency - active, 0)}  # fmt: skip
    shown["rate"] = None
    if policy is not None and policy.limit is not None and policy.period_ms is not None:
        assert state is not None
        starts = window(state, policy, now_ms)
        resets = starts[0][0] + policy.period_ms if starts else None
        shown["rate"] = {
            "limit": policy.limit, "period": format_period(policy.period_ms),
            "current_count": len(starts),
            "window_resets_at": None if resets is None else format_rfc3339(resets),
        }  # fmt: skip
    rate, conc = shown["rate"], shown["concurrency"]
    shown["limit"] = rate["limit"] if rate else (conc["limit"] if conc else None)
    shown["period"] = rate["period"] if rate else None
    shown["active"] = active
    return shown
