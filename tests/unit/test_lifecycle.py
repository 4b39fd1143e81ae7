"""The OJS lifecycle rules: which event moves which job, and what a move records."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.core import (
    INVALID_REQUEST,
    TERMINAL_STATES,
    EventOutcome,
    IgnoredReason,
    JobEvent,
    RetryPolicy,
    State,
    apply_job_event,
    job_effective_state,
    parse_event,
    parse_request,
    ready_at,
)
from gateway.core.job_events import EVENT_TYPES
from gateway.core.jobs import accepted_job, job_expires_at
from gateway.core.lifecycle import ALLOWED_FROM
from gateway.core.retry import jitter_factor
from gateway.core.times import format_rfc3339, parse_rfc3339

T0 = 1_770_000_000_000
JOB = "019078a3-b5c7-7def-8a12-3456789abcde"


def new_job(**fields: Any) -> dict[str, Any]:
    request = parse_request({"type": "work.item", "args": [1], **fields})
    assert not isinstance(request, Exception) and hasattr(request, "envelope"), request
    env = request.envelope  # type: ignore[union-attr]
    return accepted_job(env, JOB, None, T0, env.scheduled_at)


def event(**fields: Any) -> JobEvent:
    parsed = parse_event({"job_id": JOB, **fields})
    assert isinstance(parsed, JobEvent), parsed
    return parsed


def run(job: dict[str, Any], at: int, **fields: Any) -> Any:
    return apply_job_event(job, event(**fields), at)


def in_state(state: State, **fields: Any) -> dict[str, Any]:
    return {**new_job(**fields), "state": str(state)}


def test_fetch_claims_an_available_job_once() -> None:
    job = new_job()
    assert job["enqueued_at"] == format_rfc3339(T0) and "started_at" not in job
    first = run(job, T0 + 5, type="job.started")
    assert first.outcome is EventOutcome.APPLIED
    assert (first.previous_state, first.state) == (State.AVAILABLE, State.ACTIVE)
    assert first.job["attempt"] == 1 and first.job["started_at"] == format_rfc3339(T0 + 5)
    second = run(first.job, T0 + 6, type="job.started")
    assert second.outcome is EventOutcome.IGNORED and second.reason is IgnoredReason.UNCHANGED
    assert second.job == first.job  # a second claim changes nothing and is not a claim


def test_ack_completes_an_active_job_keeps_its_result_and_clears_the_error() -> None:
    active = {**run(new_job(), T0 + 1, type="job.started").job, "error": {"message": "old"}}
    done = run(active, T0 + 9, type="job.completed", result={"ok": True})
    assert done.outcome is EventOutcome.APPLIED and done.state is State.COMPLETED
    assert done.job["completed_at"] == format_rfc3339(T0 + 9)
    assert done.job["result"] == {"ok": True} and "error" not in done.job
    again = run(done.job, T0 + 10, type="job.completed")
    assert again.outcome is EventOutcome.IGNORED  # a repeated ack changes nothing
    nack = run(done.job, T0 + 10, type="job.failed", error={"message": "late"})
    assert nack.outcome is EventOutcome.REFUSED and nack.reason is IgnoredReason.ALREADY_TERMINAL


@pytest.mark.parametrize("state", [State.AVAILABLE, State.SCHEDULED, State.PENDING])
def test_ack_and_nack_need_an_active_job(state: State) -> None:
    job = in_state(state, scheduled_at=format_rfc3339(T0 + 60_000))
    for fields in ({"type": "job.completed"}, {"type": "job.failed", "error": {"message": "x"}}):
        result = run(job, T0 + 1, **fields)
        assert result.outcome is EventOutcome.REFUSED
        assert result.error is not None and result.error.code == INVALID_REQUEST
        assert "active" in result.error.message and result.job == job


def test_nack_retries_with_backoff_until_attempts_run_out_then_discards() -> None:
    retry = {"max_attempts": 2, "initial_interval": "PT1S", "jitter": False}
    job = new_job(options={"retry": retry})
    active = run(job, T0 + 1, type="job.started").job
    failed = run(active, T0 + 2, type="job.failed", error={"code": "boom", "message": "m"})
    assert failed.state is State.RETRYABLE
    assert failed.job["next_attempt_at"] == format_rfc3339(T0 + 2 + 1000)
    assert failed.job["error"]["type"] == "boom" and failed.job["error"]["attempt"] == 1
    assert "completed_at" not in failed.job
    # not fetchable before its time, fetchable after
    assert job_effective_state(failed.job, T0 + 1001) is State.RETRYABLE
    early = run(failed.job, T0 + 1001, type="job.started")
    assert early.outcome is EventOutcome.REFUSED
    assert job_effective_state(failed.job, T0 + 1002) is State.AVAILABLE
    second = run(failed.job, T0 + 1002, type="job.started").job
    assert second["attempt"] == 2 and "next_attempt_at" not in second
    last = run(second, T0 + 2000, type="job.failed", error={"message": "again"})
    assert last.state is State.DISCARDED
    assert last.job["discarded_at"] == last.job["completed_at"] == format_rfc3339(T0 + 2000)


def test_a_non_retryable_error_discards_at_once() -> None:
    policy = {"retry": {"max_attempts": 5, "non_retryable_errors": ["Fatal"]}}
    active = run(new_job(options=policy), T0 + 1, type="job.started").job
    said = run(active, T0 + 2, type="job.failed", error={"message": "x", "retryable": False})
    assert said.state is State.DISCARDED
    typed = run(active, T0 + 2, type="job.failed", error={"type": "Fatal", "message": "x"})
    assert typed.state is State.DISCARDED


@pytest.mark.parametrize("state", sorted(frozenset(State) - TERMINAL_STATES))
def test_cancel_moves_any_live_job_and_stamps_it(state: State) -> None:
    result = run(in_state(state), T0 + 3, type="job.cancelled")
    assert result.outcome is EventOutcome.APPLIED and result.state is State.CANCELLED
    assert result.job["cancelled_at"] == format_rfc3339(T0 + 3)
    assert "completed_at" not in result.job


def test_a_scheduled_job_is_fetchable_once_due_and_gets_its_enqueued_time() -> None:
    job = new_job(scheduled_at=format_rfc3339(T0 + 60_000))
    assert job["state"] == "scheduled" and "enqueued_at" not in job
    assert run(job, T0 + 59_999, type="job.started").outcome is EventOutcome.REFUSED
    started = run(job, T0 + 60_001, type="job.started").job
    assert started["enqueued_at"] == format_rfc3339(T0 + 60_000)
    assert ready_at(job) == job["scheduled_at"]


def test_unknown_jobs_are_ignored() -> None:
    result = apply_job_event(None, event(type="job.completed"), T0)
    assert result.outcome is EventOutcome.IGNORED and result.reason is IgnoredReason.UNKNOWN_JOB


EVENTS = [{"type": t} for t in EVENT_TYPES] + [{"state": s.value} for s in State]


@given(
    state=st.sampled_from(list(State)),
    fields=st.sampled_from(EVENTS),
    due=st.booleans(),
    attempt=st.integers(min_value=0, max_value=4),
)
def test_every_event_in_every_state_follows_the_table(
    state: State, fields: dict[str, Any], due: bool, attempt: int
) -> None:
    at = T0 + 10_000
    when = format_rfc3339(at - 1 if due else at + 1)
    job = {**in_state(state), "attempt": attempt, "scheduled_at": when, "next_attempt_at": when}
    if "error" not in fields and fields.get("type") == "job.failed":
        fields = {**fields, "error": {"message": "x"}}
    result = apply_job_event(job, event(**fields), at)
    effective = job_effective_state(job, at)
    target = result.state if result.outcome is EventOutcome.APPLIED else None
    kind = fields.get("type")
    if kind == "job.heartbeat" or kind == "job.deleted":
        # Neither moves the state: a heartbeat needs an active job, a delete a finished one.
        needs = {State.ACTIVE} if kind == "job.heartbeat" else TERMINAL_STATES
        assert (result.outcome is EventOutcome.APPLIED) is (state in needs)
        assert result.state is state
        return
    revived = state is State.DISCARDED and target is State.AVAILABLE  # dead-letter retry
    if state in TERMINAL_STATES and not revived:
        assert result.outcome is not EventOutcome.APPLIED and result.job == job
        return
    if revived:
        assert result.job is not None
        assert result.job["attempt"] == 0
        return
    if result.outcome is EventOutcome.APPLIED:
        assert target is not None and target is not state
        allowed = {State.ACTIVE} if fields.get("type") == "job.failed" else ALLOWED_FROM[target]
        assert effective in allowed or state in allowed
        started = target is State.ACTIVE
        assert result.job is not None
        assert result.job["attempt"] == attempt + (1 if started else 0)
    else:
        assert result.job == job  # nothing moves unless applied


def test_stamps_are_rfc3339_and_never_before_the_job() -> None:
    job = run(new_job(), T0 + 7, type="job.started").job
    for name in ("created_at", "enqueued_at", "started_at"):
        stamp = parse_rfc3339(job[name])
        assert stamp is not None and stamp >= T0


@given(
    attempt=st.integers(min_value=1, max_value=30),
    initial=st.integers(min_value=0, max_value=60_000),
    coefficient=st.floats(min_value=1.0, max_value=5.0),
    cap=st.integers(min_value=1, max_value=600_000),
    strategy=st.sampled_from(["exponential", "polynomial", "linear", "none"]),
    jitter=st.booleans(),
)
def test_backoff_is_capped_and_jittered_within_half_to_one_and_a_half(
    attempt: int, initial: int, coefficient: float, cap: int, strategy: str, jitter: bool
) -> None:
    policy = RetryPolicy(3, initial, coefficient, cap, jitter, strategy)
    delay = policy.delay_ms(attempt, JOB)
    plain = RetryPolicy(3, initial, coefficient, cap, False, strategy).delay_ms(attempt, JOB)
    assert 0 <= plain <= cap
    if jitter:
        assert int(plain * 0.5) - 1 <= delay <= plain * 1.5
        assert delay == policy.delay_ms(attempt, JOB)  # reproducible on replay
    else:
        assert delay == plain


def test_jitter_factors_spread_over_the_range() -> None:
    factors = [jitter_factor(f"job-{i}", 1) for i in range(2000)]
    assert all(0.5 <= f < 1.5 for f in factors)
    assert min(factors) < 0.55 and max(factors) > 1.45


def test_exponential_backoff_doubles_by_default() -> None:
    policy = RetryPolicy(jitter=False)
    assert [policy.delay_ms(n, JOB) for n in (1, 2, 3)] == [1000, 2000, 4000]


def test_a_job_record_expires_the_retention_after_it_became_terminal() -> None:
    retention = 7 * 86_400_000
    live = run(new_job(), T0 + 1, type="job.started").job
    assert job_expires_at(new_job(), retention) is None
    assert job_expires_at(live, retention) is None  # live jobs never expire by time
    done = run(live, T0 + 9, type="job.completed").job
    assert job_expires_at(done, retention) == T0 + 9 + retention
    cancelled = run(new_job(), T0 + 4, type="job.cancelled").job
    assert job_expires_at(cancelled, retention) == T0 + 4 + retention
    discarded = run(live, T0 + 6, type="job.failed", error={"message": "x"}, max_attempts=1).job
    assert discarded["state"] == "discarded"
    assert job_expires_at(discarded, retention) == T0 + 6 + retention


def test_a_replace_cancels_a_live_job_record_and_leaves_a_finished_one():
    from gateway.core.lifecycle import cancelled_by_replace

    live = {"id": "j", "state": "active"}
    cancelled = cancelled_by_replace(live, 1_770_000_000_000)
    assert cancelled is not None
    assert (cancelled["state"], cancelled["previous_state"]) == ("cancelled", "active")
    assert cancelled["cancelled_at"] == "2026-02-02T02:40:00.000Z"
    assert cancelled_by_replace({"id": "j", "state": "completed"}, 1_770_000_000_000) is None
