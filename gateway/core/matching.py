"""The one match predicate: does a stored job hold its key against a request, and why.

`decide` asks it of every stored entry under the key (`holds_key`: the answer
alone), and `gateway explain` asks it to tell why a decision followed (`holds`:
the answer and its reason, written only then); nothing else restates it.

An entry holds the key against a request whose canonical policy is `policy`:
- if the entry has a holder rule (Zizq, Faktory, BullMQ, sidekiq-unique-jobs,
  River), only while that rule holds (River's: for a request of its period
  bucket, `policy.bucket_start`);
  when the request's dialect lets the holder decide (`judge: holder`), that
  is all;
- otherwise the newcomer decides: the entry's effective state (a scheduled
  job whose time has passed counts as available) must be in the policy's
  states, and the policy's period, counted from the entry's creation or its
  scheduled time (`period_from`), must not have elapsed.
An OJS or Oban request therefore meets a Faktory job only while both the
job's lock and the request's states and period say so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import assert_never

from gateway.core.entries import Entry, effective_state
from gateway.core.holder import holds_by_rule
from gateway.core.periods import format_period
from gateway.core.policy import Judge, PeriodFrom, UniquePolicy
from gateway.core.states import ALL_STATES, State
from gateway.core.times import format_rfc3339


@dataclass(frozen=True, slots=True)
class Holding:
    holds: bool
    why: str


def holds(entry: Entry, policy: UniquePolicy, now_ms: int) -> Holding:
    """Whether `entry` holds its key against a request with `policy` at `now_ms`, and why."""
    return Holding(*_judge(entry, policy, now_ms, explain=True))


def holds_key(entry: Entry, policy: UniquePolicy, now_ms: int) -> bool:
    """`holds(...).holds` without the words: what deciding needs, once per stored entry."""
    return _judge(entry, policy, now_ms, explain=False)[0]


def _judge(entry: Entry, policy: UniquePolicy, now_ms: int, explain: bool) -> tuple[bool, str]:
    """The predicate, with its reason written out only when `explain` asks for it."""
    state = effective_state(entry, now_ms)
    if entry.holder is not None:
        held, why = holds_by_rule(entry.holder, state, now_ms, explain, policy.bucket_start)
        if not held:
            return False, f"job {entry.job_id}: {why}" if explain else ""
        match policy.judge:
            case Judge.HOLDER:
                return True, f"job {entry.job_id}: {why}" if explain else ""
            case Judge.NEWCOMER:
                pass  # the newcomer's states and period must agree too
            case _:
                assert_never(policy.judge)
    if state not in policy.states:
        return False, _why(entry, policy, state, "out") if explain else ""
    if policy.period_ms is None:
        return True, _why(entry, policy, state, "no period") if explain else ""
    start, _ = period_start(entry, policy)
    if now_ms >= start + policy.period_ms:
        return False, _why(entry, policy, state, "elapsed") if explain else ""
    return True, _why(entry, policy, state, "within") if explain else ""


def _why(entry: Entry, policy: UniquePolicy, state: State, case: str) -> str:
    job = f"job {entry.job_id}"
    states = "[" + ", ".join(s for s in ALL_STATES if s in policy.states) + "]"
    if case == "out":
        return f"{job} is `{state}`, not one of the states {states}"
    if case == "no period":
        return f"{job} is `{state}`, in the states {states}, and there is no period"
    assert policy.period_ms is not None
    start, counted = period_start(entry, policy)
    period = format_period(policy.period_ms)
    since = f"counted from its {counted} {format_rfc3339(start)}"
    if case == "elapsed":
        return f"{job} is `{state}` but the period ({period}, {since}) had elapsed"
    return (
        f"{job} is `{state}`, in the states {states}, and the period ({period}, {since}) "
        "has not elapsed"
    )


def period_start(entry: Entry, policy: UniquePolicy) -> tuple[int, str]:
    """When the policy's period starts for `entry`, and the name of that instant."""
    match policy.period_from:
        case PeriodFrom.CREATED_AT:
            return entry.created_at, "creation at"
        case PeriodFrom.SCHEDULED_AT:
            # A job enqueued to run at once is scheduled when it is created.
            if entry.scheduled_at is None:
                return entry.created_at, "scheduled time (its creation)"
            return entry.scheduled_at, "scheduled time"
        case _:
            assert_never(policy.period_from)
