"""Rate limits on job starts (OJS rate limiting): how many jobs of a rate key may start in a
sliding window, and how many may run at once. The one authority for a key's permits (the
shapes it reads: core/rate_policy.py).

A key's permits live at its home (wire.rate_home), decided there only, in log order, at the
claim record's broker time (`decide`): a claim is granted while fewer than `concurrency`
permits are held and fewer than `rate.limit` starts lie in the sliding window
(now - period, now]; a start exactly one period old no longer counts. The limits are the
claiming job's own, with an operator's override of the key (`overridden`) in place of
what it names while it lasts, by the same broker time. A granted permit names the claim's
job; the job's route applies the claim only with it, and gives it back (`release`) when
the job leaves active, or at once, unused, if the claim did not apply (the unused permit's
start is taken back). So in the home's log no window of one period holds more than `limit`
applied starts, and no more than `concurrency` jobs of the key ever hold a permit,
whichever server fetches. The state is bounded: the newest `limit` starts within the
longest period in force, `concurrency` holders, one override; a key with none is deleted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.core.errors import GatewayError, Invalid
from gateway.core.periods import format_period
from gateway.core.rate_policy import (
    Override,
    RateLimit,
    parse_override,
    policy_of,
    short_period,
)
from gateway.core.times import format_rfc3339

RATE_LIMITED = "rate_limited"
PERMIT_FIELD = "rate_permit"  # the permit an active job holds (set by its route)
MORE_FIELD = "rate_permits_more"  # its other permits: its queue's key's (queue_rates.py)
Starts = tuple[tuple[int, str], ...]  # (at, permit id), oldest first


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
    """A key's permits at its home: starts that may still count, oldest first, the permits
    held (permit id, job id, granted at), the last claim's `policy` (None before the first)
    and the operator's `override`."""

    key: str
    policy: RateLimit | None = None
    starts: Starts = ()
    holders: tuple[tuple[str, str, int], ...] = ()
    override: Override | None = None

    def dump(self) -> bytes:
        return orjson.dumps({
            "key": self.key, "policy": None if self.policy is None else self.policy.to_dict(),
            "starts": self.starts, "holders": self.holders,
            "override": None if self.override is None else self.override.to_dict(),
        })  # fmt: skip

    @staticmethod
    def load(raw: bytes | Mapping[str, Any] | None) -> RateState | None:
        """A stored or published state; None if absent or not one."""
        try:
            data = orjson.loads(raw) if isinstance(raw, bytes) else raw
            if not isinstance(data, Mapping) or not isinstance(data.get("key"), str):
                return None
            policy = policy_of(data.get("policy"))
            starts = tuple((int(at), str(p)) for at, p in data.get("starts") or ())
            holders = tuple((str(p), str(j), int(at)) for p, j, at in data.get("holders") or ())
            given = data.get("override")
            override = None if given is None else parse_override(given)
        except (orjson.JSONDecodeError, TypeError, ValueError, Invalid):
            return None
        return RateState(data["key"], policy, starts, holders, override)


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


# -- the rule, at the key's home -------------------------------------------------


def overridden(state: RateState | None, policy: RateLimit | None, now_ms: int) -> RateLimit | None:
    """The limits in force at `now_ms`: the job's `policy` with the key's override, while it
    lasts, in place of what it names; None when neither limits the key."""
    override = None if state is None else state.override
    if override is None or not override.active(now_ms):
        return policy
    assert state is not None
    return override.over(state.key, policy)


def window(starts: Starts, rule: RateLimit | None, now_ms: int) -> Starts:
    """The starts that count at `now_ms` under `rule`: those less than one period old."""
    if rule is None or rule.period_ms is None:
        return ()
    since = now_ms - rule.period_ms
    return tuple(s for s in starts if s[0] > since)


def _kept(state: RateState, now_ms: int) -> RateState:
    """The state as of `now_ms`: an ended override gone, and of the starts those that may
    still count under the job's limits or the override's: within the longer period, the
    newest `limit` (a window holds its limit once its limit-th newest start lies in it)."""
    override = state.override
    if override is not None and not override.active(now_ms):
        override = None
    now = RateState(state.key, state.policy, state.starts, state.holders, override)
    rules = [r for r in (state.policy, overridden(now, state.policy, now_ms)) if r is not None]
    periods = [r.period_ms for r in rules if r.period_ms is not None]
    limits = [r.limit for r in rules if r.limit is not None]
    starts: Starts = ()
    if periods and limits:
        since = now_ms - max(periods)
        starts = tuple(s for s in state.starts if s[0] > since)[-max(limits) :]
    return RateState(state.key, state.policy, starts, state.holders, override)


def decide(
    state: RateState | None, policy: RateLimit, job_id: str, permit_id: str, now_ms: int
) -> tuple[RateState, Refusal | None]:
    """A claim of `job_id` under its `policy` at `now_ms`: granted (the state holds its
    permit and start) or refused, and the key's state after it (pruned either way)."""
    before = RateState(policy.key) if state is None else state
    pruned = _kept(
        RateState(policy.key, policy, before.starts, before.holders, before.override), now_ms
    )
    rule = overridden(pruned, policy, now_ms)
    assert rule is not None
    held, starts = pruned.holders, window(pruned.starts, rule, now_ms)
    if rule.concurrency is not None and len(held) >= rule.concurrency:
        return pruned, Refusal("concurrency", rule.concurrency, len(held), None)
    if rule.limit is not None and rule.period_ms is not None and len(starts) >= rule.limit:
        freed = starts[len(starts) - rule.limit][0] + rule.period_ms
        return pruned, Refusal("rate", rule.limit, len(starts), freed)
    started = (*pruned.starts, (now_ms, permit_id)) if rule.limit is not None else pruned.starts
    holders = (*held, (permit_id, job_id, now_ms))
    return RateState(policy.key, policy, started, holders, pruned.override), None


def release(state: RateState, permit_id: str, unused: bool, now_ms: int) -> RateState:
    """The permit given back: its holder goes; an unused one's start goes too (it never
    started). A permit not held changes nothing but the window."""
    kept = _kept(state, now_ms)
    starts = tuple(s for s in kept.starts if s[1] != permit_id) if unused else kept.starts
    holders = tuple(h for h in kept.holders if h[0] != permit_id)
    return RateState(kept.key, kept.policy, starts, holders, kept.override)


def set_override(
    state: RateState | None, key: str, given: Override | None, now_ms: int
) -> RateState:
    """The key's state with the operator's override set at `now_ms` (None: cleared)."""
    before = RateState(key) if state is None else state
    return _kept(RateState(key, before.policy, before.starts, before.holders, given), now_ms)


def idle_at(state: RateState) -> int | None:
    """When the key holds nothing, if time alone empties it: when its newest start stops
    counting or its override ends, whichever is later; None while a permit is held or an
    override without an end is set."""
    override = state.override
    if state.holders or (override is not None and override.expires_at_ms is None):
        return None
    ends = [0]
    if override is not None and override.expires_at_ms is not None:
        ends.append(override.expires_at_ms)
    periods = [r.period_ms for r in (state.policy, override) if r and r.period_ms]
    if state.starts and periods:
        ends.append(state.starts[-1][0] + max(periods))
    return max(ends)


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
    rule = overridden(state, policy, now_ms)
    assert rule is not None
    free = 1 << 30
    if rule.concurrency is not None:
        free = min(free, rule.concurrency - (0 if state is None else len(state.holders)))
    if rule.limit is not None:
        free = min(
            free, rule.limit - (0 if state is None else len(window(state.starts, rule, now_ms)))
        )
    return max(free, 0)


# -- the rule, at the job's route ------------------------------------------------


_WAITING = frozenset({"available", "scheduled", "retryable"})


def waits(job: Mapping[str, Any] | None, claim: bool) -> bool:
    """Whether a claim of `job` takes permits: a claim of a job waiting for its start (one
    active, finished or pending is answered by the lifecycle rule as it stands)."""
    return claim and job is not None and job.get("state") in _WAITING


def permit_refusal(
    job: Mapping[str, Any], permits: tuple[Permit, ...], needed: tuple[RateLimit, ...]
) -> GatewayError | None:
    """None if the claim's permits fit the job: a job starts only with a permit of each key
    it `needed` (its own, its queue's: queue_rates.py), any other job without one."""
    if not permits:
        if not needed:
            return None
        return GatewayError(RATE_LIMITED, f"job {job.get('id')} starts only with a permit of "
                            f"rate key {needed[0].key}, granted at the key's home")  # fmt: skip
    if sorted(p.key for p in permits) != sorted(p.key for p in needed):
        named = ", ".join(p.key for p in permits)
        return GatewayError(
            "invalid_request",
            f"job {job.get('id')}'s claim carries a permit of rate key {named}, which is not "
            "the job's",
        )
    return None


def held_permits(job: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(key, permit id) of each permit a job that is not active still carries, to give back."""
    if job.get("state") == "active":
        return []
    more = job.get(MORE_FIELD)
    found = []
    for held in [job.get(PERMIT_FIELD), *(more if isinstance(more, list) else ())]:
        if isinstance(held, Mapping):
            key, permit = held.get("key"), held.get("id")
            if isinstance(key, str) and isinstance(permit, str):
                found.append((key, permit))
    return found


def inspect(key: str, state: RateState | None, now_ms: int, waiting: int) -> dict[str, Any]:
    """A key as GET /ojs/v1/rate-limits/{key} shows it at `now_ms`, `waiting` of its jobs
    available: the spec's fields (the limits in force) and the flat ones the OJS Admin UI
    reads (`limit`, `period` in its short form such as "10s", `active`, `waiting`,
    `override`)."""
    policy = None if state is None else state.policy
    rule = overridden(state, policy, now_ms)
    active = 0 if state is None else len(state.holders)
    shown: dict[str, Any] = {"key": key, "policy": None if policy is None else policy.to_dict()}
    shown["concurrency"] = None
    if rule is not None and rule.concurrency is not None:
        shown["concurrency"] = {"limit": rule.concurrency, "active": active,
                                "available": max(rule.concurrency - active, 0)}  # fmt: skip
    shown["rate"] = None
    if rule is not None and rule.limit is not None and rule.period_ms is not None:
        starts = () if state is None else window(state.starts, rule, now_ms)
        resets = starts[0][0] + rule.period_ms if starts else None
        shown["rate"] = {
            "limit": rule.limit, "period": format_period(rule.period_ms),
            "current_count": len(starts),
            "window_resets_at": None if resets is None else format_rfc3339(resets),
        }  # fmt: skip
    rate, conc = shown["rate"], shown["concurrency"]
    shown["limit"] = rate["limit"] if rate else (conc["limit"] if conc else None)
    shown["period"] = short_period(rule.period_ms) if rate and rule and rule.period_ms else None
    shown["active"] = active
    shown["waiting"] = shown["waiting_count"] = waiting
    override = None if state is None else state.override
    shown["override"] = None
    if override is not None and override.active(now_ms):
        # The Admin UI's flat fields: the override's rate, else its concurrency, no period.
        timed = override.limit is not None and override.period_ms is not None
        shown["override"] = {
            **override.to_dict(),
            "limit": override.limit if timed else override.concurrency,
            "period": short_period(override.period_ms) if override.period_ms else None,
        }
    return shown
