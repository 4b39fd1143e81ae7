"""Job-state events: parsing, the type-to-state mapping, and applying them to entries."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.core import (
    INVALID_EVENT,
    INVALID_REQUEST,
    Entry,
    EventOutcome,
    GatewayError,
    IgnoredReason,
    JobEvent,
    State,
    parse_event,
    parse_event_json,
)
from gateway.core.job_events import EVENT_TYPES
from tests.support import apply_event

KEY = "a" * 64
JOB = "019078a3-b5c7-7def-8a12-3456789abcde"
T0 = 1_770_000_000_000


def entry(state: State, job_id: str = JOB, **fields: Any) -> Entry:
    return Entry(job_id, state, T0, T0, "t", "default", **fields)


def parsed(**fields: Any) -> JobEvent:
    event = parse_event({"job_id": JOB, "unique_key": KEY, **fields})
    assert isinstance(event, JobEvent), event
    return event


@pytest.mark.parametrize(
    ("event_type", "state"),
    [
        ("job.enqueued", State.AVAILABLE),
        ("job.scheduled", State.SCHEDULED),
        ("job.started", State.ACTIVE),
        ("job.completed", State.COMPLETED),
        ("job.retrying", State.RETRYABLE),
        ("job.discarded", State.DISCARDED),
        ("job.cancelled", State.CANCELLED),
    ],
)
def test_event_types_map_to_states(event_type: str, state: State) -> None:
    event = parsed(type=event_type)
    assert event.state is state and event.event_type == event_type


@pytest.mark.parametrize("state", list(State))
def test_states_may_be_given_directly(state: State) -> None:
    assert parsed(state=state.value).state is state


@pytest.mark.parametrize(
    ("fields", "max_attempts", "state"),
    [
        ({"attempt": 1, "max_attempts": 3}, 3, State.RETRYABLE),
        ({"attempt": 3, "max_attempts": 3}, 3, State.DISCARDED),
        ({"attempt": 4, "max_attempts": 3}, 3, State.DISCARDED),
        ({"attempt": 2}, 2, State.DISCARDED),  # the job's own max_attempts
        ({"attempt": 2}, 5, State.RETRYABLE),
        ({"attempt": 2, "max_attempts": 5}, 2, State.RETRYABLE),  # the event's wins
        ({}, 1, State.DISCARDED),  # no attempt: the job's own (its first) counts
        ({}, 2, State.RETRYABLE),
    ],
)
def test_job_failed_is_discarded_once_attempts_are_exhausted(
    fields: dict[str, Any], max_attempts: int, state: State
) -> None:
    event = parsed(type="job.failed", **fields)
    assert event.state is None
    result = apply_event((entry(State.ACTIVE, max_attempts=max_attempts),), event, T0)
    assert result.state is state


def test_uuid_job_ids_are_compared_in_lowercase() -> None:
    event = parse_event({"job_id": JOB.upper(), "unique_key": KEY, "state": "active"})
    assert isinstance(event, JobEvent) and event.job_id == JOB


def test_unknown_fields_are_allowed() -> None:
    assert parsed(state="active", worker="w-1", time="2026-01-01T00:00:00Z").state is State.ACTIVE


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ([], "the event must be a JSON object"),
        ({"unique_key": KEY, "state": "active"}, "job_id is required"),
        ({"job_id": "", "unique_key": KEY, "state": "active"}, "job_id is required"),
        ({"job_id": 5, "unique_key": KEY, "state": "active"}, "job_id is required"),
        ({"job_id": JOB, "unique_key": "A" * 64, "state": "active"}, "unique_key, when given"),
        ({"job_id": JOB, "unique_key": "abc", "state": "active"}, "unique_key, when given"),
        ({"job_id": JOB, "type": "job.failed", "error": "boom"}, "error must be an object"),
        ({"job_id": JOB, "unique_key": KEY}, "give exactly one of state"),
        (
            {"job_id": JOB, "unique_key": KEY, "state": "active", "type": "job.started"},
            "give exactly one of state",
        ),
        ({"job_id": JOB, "unique_key": KEY, "state": "running"}, "state must be one of"),
        ({"job_id": JOB, "unique_key": KEY, "state": ["active"]}, "state must be one of"),
        ({"job_id": JOB, "unique_key": KEY, "type": "job.exploded"}, "type must be one of"),
        ({"job_id": JOB, "unique_key": KEY, "type": {}}, "type must be one of"),
        (
            {"job_id": JOB, "unique_key": KEY, "type": "job.failed", "attempt": -1},
            "attempt must be an integer of at least 0",
        ),
        (
            {"job_id": JOB, "unique_key": KEY, "type": "job.failed", "attempt": True},
            "attempt must be an integer",
        ),
        (
            {"job_id": JOB, "unique_key": KEY, "type": "job.failed", "max_attempts": 0},
            "max_attempts must be an integer of at least 1",
        ),
        (
            {"job_id": JOB, "unique_key": KEY, "state": "scheduled", "scheduled_at": "soon"},
            "scheduled_at must be an RFC 3339 date-time",
        ),
    ],
)
def test_malformed_events_are_error_values(raw: Any, message: str) -> None:
    error = parse_event(raw)
    assert isinstance(error, GatewayError)
    assert error.code == INVALID_EVENT
    assert message in error.message


def test_malformed_json_is_an_invalid_event() -> None:
    error = parse_event_json(b"{")
    assert isinstance(error, GatewayError) and error.code == INVALID_EVENT
    assert isinstance(
        parse_event_json(f'{{"job_id":"{JOB}","unique_key":"{KEY}","state":"active"}}'), JobEvent
    )


def test_an_event_moves_its_job_and_stamps_the_time() -> None:
    other = entry(State.AVAILABLE, job_id="other")
    result = apply_event([entry(State.AVAILABLE), other], parsed(type="job.started"), T0 + 5)
    assert result.outcome is EventOutcome.APPLIED
    assert (result.job_id, result.previous_state, result.state) == (
        JOB,
        State.AVAILABLE,
        State.ACTIVE,
    )
    moved, untouched = result.entries
    assert (moved.state, moved.state_changed_at, moved.created_at) == (State.ACTIVE, T0 + 5, T0)
    assert untouched is other


def test_events_for_unknown_jobs_are_ignored_and_reported() -> None:
    stored = (entry(State.AVAILABLE, job_id="other"),)
    result = apply_event(stored, parsed(type="job.completed"), T0)
    assert result.outcome is EventOutcome.IGNORED
    assert result.reason is IgnoredReason.UNKNOWN_JOB
    assert result.job_id == JOB and result.entries == stored


@pytest.mark.parametrize("terminal", [State.COMPLETED, State.CANCELLED, State.DISCARDED])
@pytest.mark.parametrize(
    "event_type", ["job.enqueued", "job.started", "job.retrying", "job.failed", "job.completed"]
)
def test_no_event_resurrects_a_terminal_job(terminal: State, event_type: str) -> None:
    stored = (entry(terminal),)
    result = apply_event(stored, parsed(type=event_type), T0 + 1)
    if (terminal, event_type) == (State.DISCARDED, "job.enqueued"):
        assert result.outcome is EventOutcome.APPLIED  # the dead-letter retry, tested apart
        return
    if EVENT_TYPES[event_type] is terminal:
        assert result.outcome is EventOutcome.IGNORED
        assert result.reason is IgnoredReason.UNCHANGED
    else:
        assert result.outcome is EventOutcome.REFUSED
        assert result.reason is IgnoredReason.ALREADY_TERMINAL
        assert result.error is not None and result.error.code == INVALID_REQUEST
        assert "terminal" in result.error.message
    assert result.entries == stored


def test_an_event_without_a_key_is_routed_by_its_job_id() -> None:
    event = parse_event({"job_id": JOB, "type": "job.started"})
    assert isinstance(event, JobEvent) and event.unique_key is None and event.route == JOB
    assert parsed(type="job.started").route == KEY


def test_a_repeated_event_changes_nothing() -> None:
    stored = (entry(State.ACTIVE),)
    result = apply_event(stored, parsed(type="job.started"), T0 + 1)
    assert result.outcome is EventOutcome.IGNORED and result.reason is IgnoredReason.UNCHANGED
    assert result.entries == stored
    done = apply_event((entry(State.COMPLETED),), parsed(state="completed"), T0 + 1)
    assert done.reason is IgnoredReason.UNCHANGED


def test_jobs_go_back_to_available_or_scheduled_from_retryable() -> None:
    stored = (entry(State.RETRYABLE),)
    back = apply_event(stored, parsed(type="job.enqueued"), T0 + 1)
    assert back.entries[0].state is State.AVAILABLE
    later = apply_event(
        stored, parsed(type="job.scheduled", scheduled_at="2026-02-12T10:00:00Z"), T0 + 1
    )
    assert later.entries[0].state is State.SCHEDULED
    assert later.entries[0].scheduled_at == 1_770_890_400_000


def test_a_new_time_for_a_scheduled_job_is_applied() -> None:
    stored = (entry(State.SCHEDULED, scheduled_at=T0 + 10),)
    result = apply_event(stored, parsed(state="scheduled", scheduled_at="2026-02-12T10:00:00Z"), T0)
    assert result.outcome is EventOutcome.APPLIED
    assert result.entries[0].scheduled_at == 1_770_890_400_000


def test_an_invalid_event_is_an_invalid_result_that_keeps_the_entries() -> None:
    error = parse_event({})
    assert isinstance(error, GatewayError)
    stored = (entry(State.ACTIVE),)
    result = apply_event(stored, error, T0)
    assert result.outcome is EventOutcome.INVALID and result.error == error
    assert result.entries == stored


def test_applying_prunes() -> None:
    old = Entry("old", State.COMPLETED, T0, T0, "t", "default")
    result = apply_event((old, entry(State.ACTIVE)), parsed(type="job.completed"), T0 + 1, 1)
    assert [e.job_id for e in result.entries] == [JOB]
