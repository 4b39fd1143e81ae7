"""Properties of the engine over arbitrary sequences of requests and job-state events."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core import (
    Entry,
    EventOutcome,
    GatewayError,
    Outcome,
    State,
    audit_fields,
    decide,
    parse_event,
    parse_request,
)
from gateway.core.job_events import EVENT_TYPES
from gateway.core.times import format_rfc3339
from tests.support import apply_event

T0 = 1_770_000_000_000
HOUR = 3_600_000
RETENTION = 24 * HOUR  # short, so sequences exercise pruning
FIXED_IDS = ["019078a3-b5c7-7def-8a12-3456789abcd0", "019078a3-b5c7-7def-8a12-3456789abcd1"]


@dataclass(frozen=True)
class Submit:
    delay: int
    job_id: str | None
    schedule_in: int | None


@dataclass(frozen=True)
class Event:
    delay: int
    target: int  # index into the jobs accepted so far; past the end means an unknown job
    fields: tuple[tuple[str, Any], ...]


delays = st.integers(min_value=0, max_value=30 * HOUR)
submits = st.builds(
    Submit,
    delays,
    st.none() | st.sampled_from(FIXED_IDS),
    st.none() | st.integers(min_value=-HOUR, max_value=2 * HOUR),
)
event_fields = st.one_of(
    st.sampled_from(sorted(EVENT_TYPES)).map(lambda t: (("type", t),)),
    st.sampled_from([s.value for s in State]).map(lambda s: (("state", s),)),
    st.tuples(st.integers(0, 4), st.integers(1, 4)).map(
        lambda am: (("type", "job.failed"), ("attempt", am[0]), ("max_attempts", am[1]))
    ),
)
events = st.builds(Event, delays, st.integers(min_value=0, max_value=6), event_fields)
steps = st.lists(st.one_of(submits, events), max_size=25)


def run(sequence: list[Submit | Event], policy: dict[str, Any]) -> list[Any]:
    """Play a sequence against one key; check invariants; return what was observed."""
    entries: tuple[Entry, ...] = ()
    now, key = T0, None
    accepted: list[str] = []
    reported: dict[str, State] = {}  # each job's state as the decisions and events said
    observed: list[Any] = []
    for n, step in enumerate(sequence):
        now += step.delay
        if isinstance(step, Submit):
            raw: dict[str, Any] = {"type": "t", "args": {"a": 1}, "unique": policy}
            if step.job_id is not None:
                raw["id"] = step.job_id
            if step.schedule_in is not None:
                raw["scheduled_at"] = format_rfc3339(now + step.schedule_in)
            request = parse_request(raw)
            assert not isinstance(request, GatewayError)
            decision = decide(entries, request, now, RETENTION, seed=str(n).encode())
            entries, key = decision.entries, decision.unique_key
            for cancelled in decision.cancelled:
                assert reported[cancelled.job_id] not in {
                    State.COMPLETED, State.CANCELLED, State.DISCARDED,
                }  # fmt: skip
                reported[cancelled.job_id] = State.CANCELLED
            if decision.job is not None:
                assert decision.outcome in (Outcome.ACCEPTED, Outcome.REPLACED)
                accepted.append(decision.job["id"])
                reported[decision.job["id"]] = State(decision.job["state"])
            observed.append((audit_fields(decision), decision.job, decision.entries))
        else:
            known = step.target < len(accepted)
            job_id = accepted[step.target] if known else "unknown-job"
            event = parse_event(
                {"job_id": job_id, "unique_key": key or "0" * 64, **dict(step.fields)}
            )
            assert not isinstance(event, GatewayError)
            result = apply_event(entries, event, now, RETENTION)
            entries = result.entries
            if result.outcome is EventOutcome.APPLIED and result.deleted:
                del reported[job_id]  # a finished job removed for good
            elif result.outcome is EventOutcome.APPLIED:
                assert result.state is not None
                revived = (reported[job_id], result.state) == (State.DISCARDED, State.AVAILABLE)
                assert revived or reported[job_id] not in {
                    State.COMPLETED, State.CANCELLED, State.DISCARDED,
                }  # fmt: skip
                reported[job_id] = result.state
            elif not known:
                assert result.reason == "unknown_job"
            observed.append((result.outcome, result.reason, result.state, result.entries))
        live = [
            j
            for j, s in reported.items()
            if s not in (State.COMPLETED, State.CANCELLED, State.DISCARDED)
        ]
        assert len(live) <= 1, (live, reported)
        assert [e.job_id for e in entries if not e.terminal] == live
    return observed


@settings(max_examples=150, deadline=None)
@given(steps)
def test_reject_without_period_never_holds_two_live_jobs(sequence: list[Submit | Event]) -> None:
    run(sequence, {"on_conflict": "reject"})


@settings(max_examples=100, deadline=None)
@given(steps, st.sampled_from(["replace", "replace_except_schedule", "ignore"]))
def test_other_strategies_never_hold_two_live_jobs_either(
    sequence: list[Submit | Event], on_conflict: str
) -> None:
    run(sequence, {"on_conflict": on_conflict})


@settings(max_examples=100, deadline=None)
@given(steps, st.sampled_from(["reject", "replace", "ignore"]), st.sampled_from([None, "PT2H"]))
def test_replaying_a_sequence_reproduces_every_decision(
    sequence: list[Submit | Event], on_conflict: str, period: str | None
) -> None:
    policy = {"on_conflict": on_conflict, "period": period}
    if period is None:
        assert run(sequence, policy) == run(sequence, policy)
    else:  # a period lets two live jobs coexist by design: replay only
        assert replay(sequence, policy) == replay(sequence, policy)


def replay(sequence: list[Submit | Event], policy: dict[str, Any]) -> list[Any]:
    entries: tuple[Entry, ...] = ()
    now, key = T0, "0" * 64
    accepted: list[str] = []
    observed: list[Any] = []
    for n, step in enumerate(sequence):
        now += step.delay
        if isinstance(step, Submit):
            raw: dict[str, Any] = {"type": "t", "args": [], "id": step.job_id, "unique": policy}
            decision = decide(entries, parse_request(raw), now, RETENTION, seed=str(n).encode())
            entries, key = decision.entries, decision.unique_key or key
            if decision.job is not None:
                accepted.append(decision.job["id"])
            observed.append((audit_fields(decision), decision.job, entries))
        else:
            target = accepted[step.target] if step.target < len(accepted) else "x"
            event = parse_event({"job_id": target, "unique_key": key, **dict(step.fields)})
            result = apply_event(entries, event, now, RETENTION)
            entries = result.entries
            observed.append((result.outcome, result.reason, entries))
    return observed
