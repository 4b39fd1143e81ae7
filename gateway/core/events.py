"""Job-state events and the transition rules of the OJS lifecycle: the one authority.

An event message is a JSON object with `job_id` and either `state` (an OJS
state) or `type` (an OJS lifecycle event type):

    job.enqueued -> available     job.completed -> completed
    job.scheduled -> scheduled    job.retrying  -> retryable
    job.started  -> active        job.discarded -> discarded
    job.cancelled -> cancelled    job.failed    -> retryable, or discarded

`unique_key` (the job's key) is optional; the event's record key is the
job's route: its unique_key, else its id (see `route_key`). Optional fields:
`attempt`, `max_attempts`, `scheduled_at` (RFC 3339), `result` (any JSON, kept
by job.completed) and `error` (an object with a `message`, kept by job.failed;
`retryable: false` discards at once). Other fields are allowed and ignored.

Transitions (OJS core, section 6). The state an event starts from is the
job's effective state: a scheduled job whose time has come, or a retryable
job whose backoff has elapsed, counts as available.

    to active     (fetch)   from available
    to completed  (ack)     from active
    to retryable / discarded (fail) from active; job.discarded also from retryable
    to cancelled            from any non-terminal state
    to available            from scheduled, retryable, pending, active (requeue)
    to scheduled            from scheduled (a new time), available, retryable, pending
    to pending              from scheduled, available

An event that asks for the state the job is already in changes nothing and
is ignored (`unchanged`): a repeated event is harmless, and a second claim of
an active job is not a claim. An unknown job is ignored (`unknown_job`).
Anything else is refused with `invalid_request` (the code the OJS HTTP
binding gives an invalid transition), naming the state and what was needed;
a terminal job refuses every other state.

Two appliers share these rules. `apply_job_event` moves a whole job record:
attempt counting (a start is the next attempt), the timestamps
(started_at, completed_at for completed and discarded, cancelled_at,
discarded_at, enqueued_at), the result, the error and the next retry time
(see retry.py). `apply_event` moves the dedup entries of a key, which know
only states; the processor mirrors each applied job transition onto them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import orjson

from gateway.core.entries import DEFAULT_RETENTION_MS, Entry, prune
from gateway.core.errors import INVALID_EVENT, INVALID_REQUEST, GatewayError
from gateway.core.limits import (
    MAX_ERROR_BYTES,
    MAX_EVENT_BYTES,
    MAX_JOB_RECORD_BYTES,
    MAX_RESULT_BYTES,
    instant_problem,
    json_problem,
    too_large,
)
from gateway.core.retry import RetryPolicy
from gateway.core.states import TERMINAL_STATES, State
from gateway.core.times import format_rfc3339, parse_rfc3339

EVENT_TYPES: dict[str, State | None] = {
    "job.enqueued": State.AVAILABLE,
    "job.scheduled": State.SCHEDULED,
    "job.started": State.ACTIVE,
    "job.completed": State.COMPLETED,
    "job.retrying": State.RETRYABLE,
    "job.failed": None,  # retryable or discarded, see the fail rule
    "job.discarded": State.DISCARDED,
    "job.cancelled": State.CANCELLED,
}
_NON_TERMINAL = frozenset(State) - TERMINAL_STATES
# Target state -> the (effective) states it may be reached from.
ALLOWED_FROM: dict[State, frozenset[State]] = {
    State.ACTIVE: frozenset({State.AVAILABLE}),
    State.COMPLETED: frozenset({State.ACTIVE}),
    State.RETRYABLE: frozenset({State.ACTIVE}),
    State.DISCARDED: frozenset({State.ACTIVE, State.RETRYABLE}),
    State.CANCELLED: _NON_TERMINAL,
    State.AVAILABLE: frozenset({State.SCHEDULED, State.RETRYABLE, State.PENDING, State.ACTIVE}),
    State.SCHEDULED: frozenset({State.SCHEDULED, State.AVAILABLE, State.RETRYABLE, State.PENDING}),
    State.PENDING: frozenset({State.SCHEDULED, State.AVAILABLE}),
}
FAIL_FROM = frozenset({State.ACTIVE})
_OPERATION = {
    State.ACTIVE: "fetch (job.started)",
    State.COMPLETED: "ack (job.completed)",
    State.RETRYABLE: "job.retrying",
    State.DISCARDED: "job.discarded",
    State.CANCELLED: "cancel (job.cancelled)",
    State.AVAILABLE: "job.enqueued",
    State.SCHEDULED: "job.scheduled",
    State.PENDING: "pending",
}
_STATE_NAMES = frozenset(s.value for s in State)
_KEY = re.compile(r"[0-9a-f]{64}")
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class JobEvent:
    job_id: str
    unique_key: str | None
    state: State | None  # None only for job.failed
    event_type: str | None = None
    attempt: int | None = None
    max_attempts: int | None = None
    scheduled_at: int | None = None
    result: Any = None
    # The worker's error object of a failure (job.failed, job.retrying, job.discarded).
    failure: Mapping[str, Any] | None = None

    @property
    def route(self) -> str:
        """The record key the event travels under: the job's key, else its id."""
        return self.unique_key or self.job_id

    def target_state(self, entry: Entry) -> State:
        """The state an entry moves to; job.failed judges attempts from the event."""
        if self.state is not None:
            return self.state
        limit = self.max_attempts if self.max_attempts is not None else entry.max_attempts
        if self.attempt is not None and self.attempt >= limit:
            return State.DISCARDED
        return State.RETRYABLE


class EventOutcome(StrEnum):
    APPLIED = "applied"
    IGNORED = "ignored"
    REFUSED = "refused"
    INVALID = "invalid"


class IgnoredReason(StrEnum):
    UNKNOWN_JOB = "unknown_job"
    UNCHANGED = "unchanged"
    ALREADY_TERMINAL = "already_terminal"
    NOT_ALLOWED = "not_allowed"


@dataclass(frozen=True, slots=True)
class EventResult:
    outcome: EventOutcome
    # The entries to store under the key afterwards, pruned (apply_event only).
    entries: tuple[Entry, ...]
    job_id: str | None = None
    previous_state: State | None = None
    state: State | None = None
    reason: IgnoredReason | None = None
    error: GatewayError | None = None
    # The job record afterwards (apply_job_event only; the record as it is when not applied).
    job: dict[str, Any] | None = None


def route_key(unique_key: str | None, job_id: str) -> str:
    """Where a job lives: events about it are keyed (and so partitioned) by this."""
    return unique_key or job_id


def parse_event(raw: object) -> JobEvent | GatewayError:
    """Validate an event object; its size, nesting and numbers are held to limits.py."""
    if not isinstance(raw, Mapping):
        return _bad("the event must be a JSON object")
    problem = json_problem(raw)
    if problem is not None:
        return _bad(problem)
    try:
        size = len(orjson.dumps(raw))
    except orjson.JSONEncodeError as exc:
        return _bad(f"the event is not JSON: {exc}")
    if size > MAX_EVENT_BYTES:
        return too_large("the event", size, MAX_EVENT_BYTES)
    return _parse_event(raw)


def _parse_event(raw: Mapping[str, Any]) -> JobEvent | GatewayError:
    job_id = raw.get("job_id")
    if not isinstance(job_id, str) or not job_id:
        return _bad("job_id is required: the id of the job the event is about")
    if _UUID.fullmatch(job_id):
        job_id = job_id.lower()  # ids are stored in lowercase
    key = raw.get("unique_key")
    if key is not None and (not isinstance(key, str) or not _KEY.fullmatch(key)):
        return _bad("unique_key, when given, must be the job's key: 64 lowercase hex digits")

    state_name, event_type = raw.get("state"), raw.get("type")
    if (state_name is None) == (event_type is None):
        return _bad("give exactly one of state (an OJS state) or type (an OJS event type)")
    state: State | None
    if state_name is not None:
        if not isinstance(state_name, str) or state_name not in _STATE_NAMES:
            return _bad(f"state must be one of {', '.join(State)}, not {state_name!r}")
        state = State(state_name)
    else:
        if not isinstance(event_type, str) or event_type not in EVENT_TYPES:
            return _bad(f"type must be one of {', '.join(EVENT_TYPES)}, not {event_type!r}")
        state = EVENT_TYPES[event_type]

    attempt, max_attempts = raw.get("attempt"), raw.get("max_attempts")
    if attempt is not None and not _is_int(attempt, minimum=0):
        return _bad("attempt must be an integer of at least 0")
    if max_attempts is not None and not _is_int(max_attempts, minimum=1):
        return _bad("max_attempts must be an integer of at least 1")
    scheduled_at = raw.get("scheduled_at")
    scheduled_ms = None
    if scheduled_at is not None:
        scheduled_ms = parse_rfc3339(scheduled_at) if isinstance(scheduled_at, str) else None
        if scheduled_ms is None:
            return _bad("scheduled_at must be an RFC 3339 date-time with a time zone")
        problem = instant_problem(scheduled_ms, "scheduled_at")
        if problem is not None:
            return _bad(problem)
    result = raw.get("result")
    if result is not None and (size := len(orjson.dumps(result))) > MAX_RESULT_BYTES:
        return too_large("the result", size, MAX_RESULT_BYTES)
    failure = raw.get("error")
    if failure is not None and (size := len(orjson.dumps(failure))) > MAX_ERROR_BYTES:
        return too_large("the error", size, MAX_ERROR_BYTES)
    if failure is not None and not (
        isinstance(failure, Mapping) and isinstance(failure.get("message", ""), str)
    ):
        return _bad("error must be an object with a message, e.g. {code, message, retryable}")
    return JobEvent(
        job_id, key, state, event_type, attempt, max_attempts, scheduled_ms, result, failure,
    )  # fmt: skip


def parse_event_json(data: bytes | str) -> JobEvent | GatewayError:
    """`parse_event` of a JSON text; one over MAX_EVENT_BYTES is refused unparsed."""
    if len(data) > MAX_EVENT_BYTES:
        return too_large("the event", len(data), MAX_EVENT_BYTES)
    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        return _bad(f"the event is not valid JSON: {exc}")
    return parse_event(raw)


# -- the rule ------------------------------------------------------------------


def refusal(
    job_id: str, stored: State, effective: State, target: State, failed: bool = False
) -> GatewayError | None:
    """None if `target` may follow; else why not (an OJS invalid_request).

    `failed`: the event is a failure report (job.failed), allowed from active only.
    """
    allowed = FAIL_FROM if failed else ALLOWED_FROM[target]
    if stored not in TERMINAL_STATES and (effective in allowed or stored in allowed):
        return None
    needs = ", ".join(sorted(allowed))
    shown = stored if stored is effective else f"{stored} (due, so {effective})"
    if stored in TERMINAL_STATES:
        why = f"job {job_id} is {stored}, a terminal state: no transition leaves it"
    else:
        operation = "nack (job.failed)" if failed else _OPERATION[target]
        why = f"job {job_id} is {shown}; {operation} needs one of: {needs}"
    return GatewayError(INVALID_REQUEST, why)


def _unchanged(stored: State, target: State, scheduled_now: int | None, asked: int | None) -> bool:
    return target is stored and asked in (None, scheduled_now)


# -- applied to the dedup entries of a key ---------------------------------------


def apply_event(
    entries: Iterable[Entry],
    event: JobEvent | GatewayError,
    now_ms: int,
    retention_ms: int = DEFAULT_RETENTION_MS,
) -> EventResult:
    """Move the event's job among a key's entries; `now_ms` is the event record's timestamp."""
    kept = prune(entries, now_ms, retention_ms)
    if isinstance(event, GatewayError):
        return EventResult(EventOutcome.INVALID, kept, error=event)
    entry = next((e for e in kept if e.job_id == event.job_id), None)
    if entry is None:
        return EventResult(
            EventOutcome.IGNORED, kept, event.job_id, reason=IgnoredReason.UNKNOWN_JOB
        )
    target = event.target_state(entry)
    if _unchanged(entry.state, target, entry.scheduled_at, event.scheduled_at):
        return EventResult(
            EventOutcome.IGNORED, kept, entry.job_id, entry.state, entry.state,
            IgnoredReason.UNCHANGED,
        )  # fmt: skip
    effective = entry_effective_state(entry, now_ms)
    refused = refusal(entry.job_id, entry.state, effective, target, event.state is None)
    if refused is not None:
        return _refused(kept, entry.job_id, entry.state, refused)
    after = follow(kept, entry.job_id, target, now_ms, event.scheduled_at, retention_ms)
    return EventResult(EventOutcome.APPLIED, after, entry.job_id, entry.state, target)


def follow(
    entries: Iterable[Entry],
    job_id: str,
    state: State,
    now_ms: int,
    scheduled_at: int | None = None,
    retention_ms: int = DEFAULT_RETENTION_MS,
) -> tuple[Entry, ...]:
    """The entries with one job moved to `state` (a transition already decided), pruned."""
    moved = (e.moved_to(state, now_ms, scheduled_at) if e.job_id == job_id else e for e in entries)
    return prune(moved, now_ms, retention_ms)


def entry_effective_state(entry: Entry, now_ms: int) -> State:
    scheduled = entry.state is State.SCHEDULED
    if scheduled and entry.scheduled_at is not None and entry.scheduled_at <= now_ms:
        return State.AVAILABLE
    return entry.state


# -- applied to a whole job record ----------------------------------------------


def cancelled_by_replace(job: Mapping[str, Any], at_ms: int) -> dict[str, Any] | None:
    """The record of a job a `replace` cancelled at `at_ms`; None if it had already finished."""
    if State(job["state"]) in TERMINAL_STATES:
        return None
    return {
        **job,
        "state": str(State.CANCELLED),
        "previous_state": job["state"],
        "cancelled_at": format_rfc3339(at_ms),
    }


# States a job waits for a worker in: available now, or once its time comes.
WAITING_STATES = frozenset({State.AVAILABLE, State.SCHEDULED, State.RETRYABLE})


def job_effective_state(job: Mapping[str, Any], now_ms: int) -> State:
    """The job's state as a worker sees it: due scheduled and retryable jobs are available."""
    state = State(job["state"])
    due = {State.SCHEDULED: job.get("scheduled_at"), State.RETRYABLE: job.get("next_attempt_at")}
    if state in due:
        at = due[state]
        at_ms = parse_rfc3339(at) if isinstance(at, str) else None
        if state is State.RETRYABLE and at is None:
            return State.AVAILABLE  # a retry with no backoff recorded is due at once
        if at_ms is not None and at_ms <= now_ms:
            return State.AVAILABLE
    return state


def ready_at(job: Mapping[str, Any]) -> str | None:
    """When a waiting job becomes fetchable (its queue-order time), or None if it never will."""
    state = job.get("state")
    if state == State.SCHEDULED:
        return job.get("scheduled_at")
    if state == State.RETRYABLE:
        return job.get("next_attempt_at") or job.get("enqueued_at") or job.get("created_at")
    if state == State.AVAILABLE:
        return job.get("enqueued_at") or job.get("created_at")
    return None


def apply_job_event(
    job: Mapping[str, Any] | None, event: JobEvent | GatewayError, now_ms: int
) -> EventResult:
    """Move a job record by one event at `now_ms` (the event record's timestamp)."""
    if isinstance(event, GatewayError):
        return EventResult(EventOutcome.INVALID, (), error=event)
    if job is None:
        return EventResult(EventOutcome.IGNORED, (), event.job_id, reason=IgnoredReason.UNKNOWN_JOB)
    stored = State(job["state"])
    effective = job_effective_state(job, now_ms)
    attempt = int(job.get("attempt") or 0)
    target = event.state
    if target is None:  # job.failed: the job's retry policy decides
        target = _after_failure(job, event, attempt)
    current_time = parse_rfc3339(job["scheduled_at"]) if job.get("scheduled_at") else None
    if _unchanged(stored, target, current_time, event.scheduled_at):
        return EventResult(
            EventOutcome.IGNORED, (), event.job_id, stored, stored, IgnoredReason.UNCHANGED,
            job=dict(job),
        )  # fmt: skip
    refused = refusal(event.job_id, stored, effective, target, event.state is None)
    if refused is not None:
        return _refused((), event.job_id, stored, refused, dict(job))
    moved = _moved(dict(job), stored, target, event, now_ms, attempt)
    if event.result is not None or event.failure is not None:  # the only fields that grow it
        size = len(orjson.dumps(moved))
        if size > MAX_JOB_RECORD_BYTES:
            error = too_large("the job record", size, MAX_JOB_RECORD_BYTES)
            return _refused((), event.job_id, stored, error, dict(job))
    return EventResult(EventOutcome.APPLIED, (), event.job_id, stored, target, job=moved)


def _after_failure(job: Mapping[str, Any], event: JobEvent, attempt: int) -> State:
    if event.attempt is not None:
        attempt = event.attempt
    limit = event.max_attempts or int(job.get("max_attempts") or 1)
    failure = event.failure or {}
    policy = RetryPolicy.from_dict(job.get("retry"))
    error_type = failure.get("type") or failure.get("code")
    if (
        attempt >= limit
        or failure.get("retryable") is False
        or (error_type is not None and error_type in policy.non_retryable)
    ):
        return State.DISCARDED
    return State.RETRYABLE


def _moved(
    job: dict[str, Any], stored: State, target: State, event: JobEvent, now_ms: int, attempt: int
) -> dict[str, Any]:
    now = format_rfc3339(now_ms)
    job["state"] = str(target)
    if event.attempt is not None:
        job["attempt"] = event.attempt
    if event.max_attempts is not None:
        job["max_attempts"] = event.max_attempts
    if target is State.ACTIVE:
        if event.attempt is None:
            job["attempt"] = attempt + 1  # OJS counts attempts as they start
        job["started_at"] = now
        job.setdefault("enqueued_at", ready_at({**job, "state": str(stored)}) or now)
        job.pop("next_attempt_at", None)
    elif target is State.COMPLETED:
        job["completed_at"] = now
        job.pop("error", None)  # a success clears the last attempt's error
        if event.result is not None:
            job["result"] = event.result
    elif target in (State.RETRYABLE, State.DISCARDED):
        if event.failure is not None:
            job["error"] = _error_record(event.failure, int(job.get("attempt") or 0), now)
        if target is State.RETRYABLE:
            policy = RetryPolicy.from_dict(job.get("retry"))
            delay = policy.delay_ms(int(job.get("attempt") or 1), str(job["id"]))
            job["next_attempt_at"] = format_rfc3339(now_ms + delay)
        else:
            job["discarded_at"] = job["completed_at"] = now
            job.pop("next_attempt_at", None)
    elif target is State.CANCELLED:
        job["cancelled_at"] = now
        job.pop("next_attempt_at", None)
    elif target is State.AVAILABLE:
        job["enqueued_at"] = now
        job.pop("next_attempt_at", None)
        if stored is State.ACTIVE:
            job.pop("started_at", None)  # a requeued attempt never ran to an end
    elif target is State.SCHEDULED and event.scheduled_at is not None:
        job["scheduled_at"] = format_rfc3339(event.scheduled_at)
    return job


def _error_record(failure: Mapping[str, Any], attempt: int, now: str) -> dict[str, Any]:
    """The job's `error`: the OJS error object (type, message) plus what the worker sent."""
    record = {k: v for k, v in failure.items() if v is not None}
    record["type"] = str(failure.get("type") or failure.get("code") or "error")
    record["message"] = str(failure.get("message", ""))
    record.update(attempt=attempt, occurred_at=now)
    return record


def _refused(
    kept: tuple[Entry, ...],
    job_id: str,
    stored: State,
    error: GatewayError,
    job: dict[str, Any] | None = None,
) -> EventResult:
    reason = IgnoredReason.ALREADY_TERMINAL if stored in TERMINAL_STATES else (
        IgnoredReason.NOT_ALLOWED
    )  # fmt: skip
    return EventResult(EventOutcome.REFUSED, kept, job_id, stored, stored, reason, error, job)


def _is_int(value: object, minimum: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def _bad(message: str) -> GatewayError:
    return GatewayError(INVALID_EVENT, message)
