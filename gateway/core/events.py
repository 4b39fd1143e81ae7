"""Job-state events and the transition rules of the OJS lifecycle: the one authority.

An event message is a JSON object with `job_id` and either `state` (an OJS
state) or `type` (an OJS lifecycle event type):

    job.enqueued -> available     job.completed -> completed
    job.scheduled -> scheduled    job.retrying  -> retryable
    job.started  -> active        job.discarded -> discarded
    job.cancelled -> cancelled    job.failed    -> retryable, or discarded
    job.heartbeat: an active job's lease is extended, its state unchanged
    job.deleted: a terminal job is removed for good (its key is released)

`unique_key` (the job's key) is optional; the event's record key is the
job's route: its unique_key, else its id (see `route_key`). Optional fields:
`attempt`, `max_attempts`, `scheduled_at` (RFC 3339), `result` (any JSON, kept
by job.completed), `error` (an object with a `message`, kept by job.failed;
`retryable: false` discards at once), `visibility_timeout_ms` (job.started,
job.heartbeat: the lease), `claim_id` and `worker_id` (below). Other fields are
allowed and ignored.

Claims. A start may carry a `claim_id` and the `worker_id` of the worker that took
the job, kept with the active job (the admin API counts workers by it). A requeue
(job.enqueued) of an active job that carries a `claim_id` applies only to that
claim: a fetch that gave up waiting can undo its own claim, never another's.

Leases. A start (job.started) hands the job to a worker for a lease:
`lease_expires_at` = event time + `visibility_timeout_ms` (default
DEFAULT_VISIBILITY_TIMEOUT_MS), kept with the job as its lease duration. A
heartbeat moves `lease_expires_at` to event time + the given or kept duration.
A job's own `timeout_ms` bounds each attempt: started_at + timeout_ms. Past
either (`attempt_deadline`), `expire_job` ends the attempt with an error:
past its timeout the attempt failed (retryable by the job's policy,
error type `timeout`); past its lease the worker is gone and the job is
retryable with no backoff, available again at once (error type
`visibility_timeout`, as OJS's worker protocol has it); at max attempts either
is discarded. The processor applies
it when event time passes the deadline.

Errors. Each failure's error record is `error` (the last) and the last
MAX_ERRORS of them, oldest first, are `errors`; older ones are dropped first
when the record would exceed MAX_JOB_RECORD_BYTES.

Transitions (OJS core, section 6). The state an event starts from is the
job's effective state: a scheduled job whose time has come, or a retryable
job whose backoff has elapsed, counts as available.

    to active     (fetch)   from available
    to completed  (ack)     from active
    to retryable / discarded (fail) from active; job.discarded also from retryable
    to cancelled            from any non-terminal state
    to available            from scheduled, retryable, pending, active (requeue),
                            discarded (dead-letter retry: attempt back to 0)
    to scheduled            from scheduled (a new time), available, retryable, pending
    to pending              from scheduled, available

An event that asks for the state the job is already in changes nothing and
is ignored (`unchanged`): a repeated event is harmless, and a second claim of
an active job is not a claim. An unknown job is ignored (`unknown_job`).
Anything else is refused with `invalid_request` (the code the OJS HTTP
binding gives an invalid transition), naming the state and what was needed;
a terminal job refuses every other state (but for the dead-letter retry),
and only a terminal job may be deleted.

`apply_job_event` is the one applier: it moves a whole job record with its
attempt counting (a start is the next attempt), the timestamps (started_at,
completed_at for completed and discarded, cancelled_at, discarded_at,
enqueued_at), the lease, the result, the errors and the next retry time (see
retry.py). A key's entries only follow the job's new state (`follow`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

import orjson

from gateway.core.engine import entry_of
from gateway.core.entries import DEFAULT_RETENTION_MS, Entry, prune
from gateway.core.errors import INVALID_EVENT, INVALID_REQUEST, GatewayError
from gateway.core.limits import (
    MAX_ERROR_BYTES,
    MAX_EVENT_BYTES,
    MAX_ID_BYTES,
    MAX_JOB_RECORD_BYTES,
    MAX_RESULT_BYTES,
    duration_problem,
    instant_problem,
    json_problem,
    too_large,
)
from gateway.core.queues import paused_refusal
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
    "job.heartbeat": State.ACTIVE,  # keeps the job active: no transition
    "job.deleted": None,  # no state: the job is gone
}
HEARTBEAT, DELETED, FAILED = "job.heartbeat", "job.deleted", "job.failed"
# A worker that claims a job without saying for how long holds it this long
# unless it heartbeats: the visibility timeout of SQS and OJS workers.
DEFAULT_VISIBILITY_TIMEOUT_MS = 1_800_000  # OJS worker protocol 5.2: 1800 s
MAX_ERRORS = 10
_NON_TERMINAL = frozenset(State) - TERMINAL_STATES
# Target state -> the (effective) states it may be reached from.
ALLOWED_FROM: dict[State, frozenset[State]] = {
    State.ACTIVE: frozenset({State.AVAILABLE}),
    State.COMPLETED: frozenset({State.ACTIVE}),
    State.RETRYABLE: frozenset({State.ACTIVE}),
    State.DISCARDED: frozenset({State.ACTIVE, State.RETRYABLE}),
    State.CANCELLED: _NON_TERMINAL,
    State.AVAILABLE: frozenset(
        {State.SCHEDULED, State.RETRYABLE, State.PENDING, State.ACTIVE, State.DISCARDED}
    ),
    State.SCHEDULED: frozenset({State.SCHEDULED, State.AVAILABLE, State.RETRYABLE, State.PENDING}),
    State.PENDING: frozenset({State.SCHEDULED, State.AVAILABLE}),
}
FAIL_FROM = frozenset({State.ACTIVE})
# The one way out of a terminal state: OJS's dead-letter retry.
_REVIVES = frozenset({(State.DISCARDED, State.AVAILABLE)})
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
    state: State | None  # None for job.failed and job.deleted
    event_type: str | None = None
    attempt: int | None = None
    max_attempts: int | None = None
    scheduled_at: int | None = None
    result: Any = None
    # The worker's error object of a failure (job.failed, job.retrying, job.discarded).
    failure: Mapping[str, Any] | None = None
    visibility_timeout_ms: int | None = None
    claim_id: str | None = None
    worker_id: str | None = None  # who took the job (job.started): kept while it is active

    @property
    def route(self) -> str:
        """The record key the event travels under: its job's route."""
        return route_key(self.unique_key, self.job_id)


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
    job_id: str | None = None
    previous_state: State | None = None
    state: State | None = None
    reason: IgnoredReason | None = None
    error: GatewayError | None = None
    # The job record afterwards (the record as it is when not applied).
    job: dict[str, Any] | None = None
    # Applied job.deleted: the record and the job's entry are to go, its key released.
    deleted: bool = False


def route_key(unique_key: str | None, job_id: str) -> str:
    """Where a job lives, the route rule's one statement (gateway.wire.route applies it to
    a request): its unique key, else its id. Its requests and events are keyed by this."""
    return unique_key or job_id


def job_record(job: Mapping[str, Any], unique_key: str | None, partition: int) -> dict[str, Any]:
    """A new job as its route's state and `job_states` hold it: the decided job with where
    it lives. The HTTP binding builds its provisional copy of an answered job with this."""
    return {**job, "route": route_key(unique_key, str(job["id"])), "partition": partition}


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
    lease = raw.get("visibility_timeout_ms")
    if lease is not None and not _is_int(lease, minimum=1):
        return _bad("visibility_timeout_ms must be an integer of at least 1 (milliseconds)")
    if lease is not None and (problem := duration_problem(lease, "visibility_timeout_ms")):
        return _bad(problem)
    for name in ("claim_id", "worker_id"):
        value = raw.get(name)
        if value is not None and not (isinstance(value, str) and 0 < len(value) <= MAX_ID_BYTES):
            return _bad(f"{name} must be a non-empty string of at most {MAX_ID_BYTES} characters")
    return JobEvent(
        job_id, key, state, event_type, attempt, max_attempts, scheduled_ms, result, failure,
        lease, raw.get("claim_id"), raw.get("worker_id"),
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
    leaves = stored not in TERMINAL_STATES or (not failed and (stored, target) in _REVIVES)
    if leaves and (effective in allowed or stored in allowed):
        return None
    needs = ", ".join(sorted(allowed))
    shown = stored if stored is effective else f"{stored} (due, so {effective})"
    if stored is State.DISCARDED:
        why = (
            f"job {job_id} is discarded, a terminal state: only a dead-letter retry "
            "(job.enqueued) or job.deleted leaves it"
        )
    elif stored in TERMINAL_STATES:
        why = f"job {job_id} is {stored}, a terminal state: no transition leaves it"
    else:
        operation = "nack (job.failed)" if failed else _OPERATION[target]
        why = f"job {job_id} is {shown}; {operation} needs one of: {needs}"
    return GatewayError(INVALID_REQUEST, why)


def _unchanged(stored: State, target: State, scheduled_now: int | None, asked: int | None) -> bool:
    return target is stored and asked in (None, scheduled_now)


def on_key(
    job: Mapping[str, Any] | None,
    entries: Iterable[Entry],
    event: JobEvent | GatewayError,
    now_ms: int,
    retention_ms: int = DEFAULT_RETENTION_MS,
    paused: bool = False,
) -> tuple[EventResult, tuple[Entry, ...]]:
    """`apply_job_event` for a job under a key, and the key's entries after it. A job back
    from the dead letters may not join a key another live job holds: two would hold it."""
    result = apply_job_event(job, event, now_ms, paused)
    if result.outcome is not EventOutcome.APPLIED or result.job is None:
        return result, tuple(entries)
    kept = prune(entries, now_ms, retention_ms)
    if result.previous_state in TERMINAL_STATES and result.state not in TERMINAL_STATES:
        holder = next((e for e in kept if e.job_id != result.job_id and not e.terminal), None)
        if holder is not None and job is not None:
            why = GatewayError(
                INVALID_REQUEST,
                f"job {result.job_id} cannot be retried: job {holder.job_id} ({holder.state}) "
                "holds its unique key now",
            )
            return _refused(str(result.job_id), State(job["state"]), why, dict(job)), kept
    return result, follow(kept, result.job, result, now_ms, retention_ms)


def follow(
    entries: Iterable[Entry],
    job: Mapping[str, Any],
    result: EventResult,
    now_ms: int,
    retention_ms: int = DEFAULT_RETENTION_MS,
) -> tuple[Entry, ...]:
    """A key's entries after an applied transition of one of its jobs, pruned: the job's
    entry takes its new state (a no-op move leaves it as it was), a deleted job's entry
    goes, and a job back from the dead letters holds its key again if its entry was gone."""
    job_id, state = str(job["id"]), result.state
    scheduled = job.get("scheduled_at")
    scheduled_at = parse_rfc3339(scheduled) if isinstance(scheduled, str) else None
    kept = [e for e in entries if not (result.deleted and e.job_id == job_id)]
    if state is None or result.deleted:
        return prune(kept, now_ms, retention_ms)
    moved = [
        e.moved_to(state, now_ms, scheduled_at)
        if e.job_id == job_id and (e.state is not state or e.scheduled_at != scheduled_at)
        else e
        for e in kept
    ]
    revived = result.previous_state in TERMINAL_STATES and state not in TERMINAL_STATES
    if revived and all(e.job_id != job_id for e in moved):
        moved.append(replace(entry_of(job), state_changed_at=now_ms))
    return prune(moved, now_ms, retention_ms)


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
    job: Mapping[str, Any] | None,
    event: JobEvent | GatewayError,
    now_ms: int,
    paused: bool = False,
) -> EventResult:
    """Move a job record by one event at `now_ms` (the event record's timestamp); `paused`:
    the job's queue is paused there and then (see queues.py)."""
    if isinstance(event, GatewayError):
        return EventResult(EventOutcome.INVALID, error=event)
    if job is None:
        return EventResult(EventOutcome.IGNORED, event.job_id, reason=IgnoredReason.UNKNOWN_JOB)
    stored = State(job["state"])
    if event.event_type == HEARTBEAT:
        return _heartbeat(job, event, stored, now_ms)
    if event.event_type == DELETED:
        return _deleted(job, stored)
    if event.state is State.ACTIVE and past_expiry(job, now_ms):
        return _expired(job, now_ms)  # never handed out: discarded instead (OJS core)
    effective = job_effective_state(job, now_ms)
    attempt = int(job.get("attempt") or 0)
    target = event.state
    if target is None:  # job.failed: the job's retry policy decides
        target = _after_failure(job, event, attempt)
    current_time = parse_rfc3339(job["scheduled_at"]) if job.get("scheduled_at") else None
    if _unchanged(stored, target, current_time, event.scheduled_at):
        return EventResult(
            EventOutcome.IGNORED, event.job_id, stored, stored, IgnoredReason.UNCHANGED,
            job=dict(job),
        )  # fmt: skip
    if target is State.ACTIVE and paused:  # a claim: a paused queue hands out nothing
        why = paused_refusal(event.job_id, str(job.get("queue")))
        return _refused(event.job_id, stored, why, dict(job))
    refused = refusal(event.job_id, stored, effective, target, event.event_type == FAILED)
    if refused is None and _anothers_claim(job, stored, target, event):
        refused = GatewayError(
            INVALID_REQUEST,
            f"job {event.job_id} is active under another claim than {event.claim_id}; "
            "a requeue with a claim_id undoes that claim only",
        )
    if refused is not None:
        return _refused(event.job_id, stored, refused, dict(job))
    return _applied(job, stored, target, event, now_ms, attempt)


def _anothers_claim(job: Mapping[str, Any], stored: State, target: State, event: JobEvent) -> bool:
    return (
        event.claim_id is not None
        and stored is State.ACTIVE
        and target is State.AVAILABLE
        and job.get("claim_id") != event.claim_id
    )


def expire_job(job: Mapping[str, Any], now_ms: int) -> EventResult | None:
    """A job whose `job_deadline` has come at `now_ms`; None if it is not due.

    A waiting job past its expires_at is discarded with an `expired` error. An active
    one past its lease or its attempt's timeout: past its timeout the attempt failed, as
    a nack would fail it (retryable by its policy); past its lease the worker is gone:
    retryable with no backoff, so available again at once (OJS's worker protocol), with
    a `visibility_timeout` error. Either way the attempt counts: at max attempts the job
    is discarded."""
    if past_expiry(job, now_ms):
        return _expired(job, now_ms)
    if job.get("state") != State.ACTIVE:
        return None
    deadline = attempt_deadline(job)
    if deadline is None or deadline > now_ms:
        return None
    lease, timeout = _lease_ms(job), _timeout_at(job)
    timed_out = timeout is not None and timeout <= now_ms and (lease is None or timeout <= lease)
    if timed_out:
        kind = "timeout"
        message = f"the attempt ran past the job's timeout_ms ({job['timeout_ms']} ms)"
    else:
        kind = "visibility_timeout"
        message = "the worker neither finished nor heartbeat the job before its lease expired"
    failure = {"type": kind, "message": message}
    event = JobEvent(str(job["id"]), job.get("unique_key"), None, FAILED, failure=failure)
    attempt = int(job.get("attempt") or 0)
    target = _after_failure(job, event, attempt)
    result = _applied(job, State.ACTIVE, target, event, now_ms, attempt)
    if not timed_out and result.state is State.RETRYABLE and result.job is not None:
        # The expired lease is no fault of the job: no backoff.
        result.job["next_attempt_at"] = format_rfc3339(now_ms)
        result.job["retry_delay_ms"] = 0
    return result


def job_deadline(job: Mapping[str, Any]) -> int | None:
    """When event time next changes the job by itself (`expire_job`): a waiting job's
    expires_at, an active one's `attempt_deadline`; None for any other."""
    if job.get("state") in WAITING_STATES:
        return expires_at_ms(job)
    return attempt_deadline(job)


def expires_at_ms(job: Mapping[str, Any]) -> int | None:
    at = job.get("expires_at")
    return parse_rfc3339(at) if isinstance(at, str) else None


def past_expiry(job: Mapping[str, Any], now_ms: int) -> bool:
    """A job no worker has taken yet (waiting) whose expires_at has come: OJS core says
    it MUST be discarded, never handed out."""
    if job.get("state") not in WAITING_STATES:
        return False
    at = expires_at_ms(job)
    return at is not None and at <= now_ms


def _expired(job: Mapping[str, Any], now_ms: int) -> EventResult:
    message = f"the job passed its expires_at ({job['expires_at']}) before a worker took it"
    failure = {"type": "expired", "message": message, "retryable": False}
    event = JobEvent(str(job["id"]), job.get("unique_key"), None, FAILED, failure=failure)
    stored = State(job["state"])
    return _applied(job, stored, State.DISCARDED, event, now_ms, int(job.get("attempt") or 0))


def attempt_deadline(job: Mapping[str, Any]) -> int | None:
    """When an active job's attempt ends unless the worker finishes or heartbeats: the
    earlier of its lease and its timeout; None for a job not active (or with neither)."""
    if job.get("state") != State.ACTIVE:
        return None
    times = [t for t in (_lease_ms(job), _timeout_at(job)) if t is not None]
    return min(times) if times else None


def _lease_ms(job: Mapping[str, Any]) -> int | None:
    at = job.get("lease_expires_at")
    return parse_rfc3339(at) if isinstance(at, str) else None


def _timeout_at(job: Mapping[str, Any]) -> int | None:
    started, timeout = job.get("started_at"), job.get("timeout_ms")
    start_ms = parse_rfc3339(started) if isinstance(started, str) else None
    if start_ms is None or not isinstance(timeout, int) or not _is_int(timeout, minimum=1):
        return None
    return start_ms + timeout


def _heartbeat(job: Mapping[str, Any], event: JobEvent, stored: State, now_ms: int) -> EventResult:
    """An active job's lease runs from now for the given, else its current, duration."""
    if stored is not State.ACTIVE:
        error = GatewayError(
            INVALID_REQUEST,
            f"job {event.job_id} is {stored}; heartbeat (job.heartbeat) needs an active job",
        )
        return _refused(event.job_id, stored, error, dict(job))
    moved = dict(job)
    _lease(moved, event.visibility_timeout_ms or job.get("visibility_timeout_ms"), now_ms)
    return EventResult(EventOutcome.APPLIED, event.job_id, stored, stored, job=moved)


def _lease(job: dict[str, Any], duration_ms: Any, now_ms: int) -> None:
    lease = duration_ms if _is_int(duration_ms, 1) else DEFAULT_VISIBILITY_TIMEOUT_MS
    job["visibility_timeout_ms"] = lease
    job["lease_expires_at"] = format_rfc3339(now_ms + lease)


def _deleted(job: Mapping[str, Any], stored: State) -> EventResult:
    """A finished job removed for good; a live one must be finished (or cancelled) first."""
    job_id = str(job["id"])
    if stored not in TERMINAL_STATES:
        needs = ", ".join(sorted(TERMINAL_STATES))
        error = GatewayError(
            INVALID_REQUEST, f"job {job_id} is {stored}; delete (job.deleted) needs one of: {needs}"
        )
        return _refused(job_id, stored, error, dict(job))
    return EventResult(EventOutcome.APPLIED, job_id, stored, stored, job=dict(job), deleted=True)


def _applied(
    job: Mapping[str, Any], stored: State, target: State, event: JobEvent, now_ms: int, attempt: int
) -> EventResult:
    moved = _moved(dict(job), stored, target, event, now_ms, attempt)
    # Only a result or an error grows a record.
    if (event.result is not None or event.failure is not None) and not _fit(moved):
        size = len(orjson.dumps(moved))
        error = too_large("the job record", size, MAX_JOB_RECORD_BYTES)
        return _refused(event.job_id, stored, error, dict(job))
    return EventResult(EventOutcome.APPLIED, event.job_id, stored, target, job=moved)


def _fit(job: dict[str, Any]) -> bool:
    """Whether the record fits MAX_JOB_RECORD_BYTES, once the oldest errors make room."""
    while len(orjson.dumps(job)) > MAX_JOB_RECORD_BYTES:
        if not job.get("errors"):
            return False
        job["errors"] = job["errors"][1:]
    return True


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
    if target is not State.ACTIVE:
        for name in ("lease_expires_at", "claim_id", "worker_id"):
            job.pop(name, None)
    if event.attempt is not None:
        job["attempt"] = event.attempt
    if event.max_attempts is not None:
        job["max_attempts"] = event.max_attempts
    if target is State.ACTIVE:
        if event.attempt is None:
            job["attempt"] = attempt + 1  # OJS counts attempts as they start
        job["started_at"] = now
        # The fetch's lease, else the job's own (its option, or its last attempt's).
        _lease(job, event.visibility_timeout_ms or job.get("visibility_timeout_ms"), now_ms)
        for name, value in (("claim_id", event.claim_id), ("worker_id", event.worker_id)):
            if value is None:
                job.pop(name, None)
            else:
                job[name] = value
        job.setdefault("enqueued_at", ready_at({**job, "state": str(stored)}) or now)
        job.pop("next_attempt_at", None)
    elif target is State.COMPLETED:
        job["completed_at"] = now
        job.pop("error", None)  # a success clears the last attempt's error
        if event.result is not None:
            job["result"] = event.result
    if event.failure is not None and target in _KEEPS_ERROR:
        error = _error_record(event.failure, int(job.get("attempt") or 0), now)
        job["error"] = error
        job["errors"] = [*job.get("errors", ()), error][-MAX_ERRORS:]
    if target in (State.RETRYABLE, State.DISCARDED):
        if target is State.RETRYABLE:
            policy = RetryPolicy.from_dict(job.get("retry"))
            delay = policy.delay_ms(int(job.get("attempt") or 1), str(job["id"]))
            job["next_attempt_at"] = format_rfc3339(now_ms + delay)
            job["retry_delay_ms"] = delay  # what OJS clients read beside next_attempt_at
        else:
            job["discarded_at"] = job["completed_at"] = now
            job.pop("next_attempt_at", None)
    if target is State.CANCELLED:
        job["cancelled_at"] = now
        job.pop("next_attempt_at", None)
    elif target is State.AVAILABLE:
        job["enqueued_at"] = now
        job.pop("next_attempt_at", None)
        if stored is State.ACTIVE:
            job.pop("started_at", None)  # a requeued attempt never ran to an end
        elif stored is State.DISCARDED:  # a dead-letter retry: a fresh start, errors kept
            job["attempt"] = 0
            for name in ("started_at", "completed_at", "discarded_at"):
                job.pop(name, None)
    elif target is State.SCHEDULED and event.scheduled_at is not None:
        job["scheduled_at"] = format_rfc3339(event.scheduled_at)
    return job


# The states a failure's error is recorded in (available: a lease that expired).
_KEEPS_ERROR = frozenset({State.RETRYABLE, State.DISCARDED, State.AVAILABLE})


def _error_record(failure: Mapping[str, Any], attempt: int, now: str) -> dict[str, Any]:
    """The job's `error`: the OJS error object (type, message) plus what the worker sent."""
    record = {k: v for k, v in failure.items() if v is not None}
    record["type"] = str(failure.get("type") or failure.get("code") or "error")
    record["message"] = str(failure.get("message", ""))
    record.update(attempt=attempt, occurred_at=now)
    return record


def _refused(
    job_id: str, stored: State, error: GatewayError, job: dict[str, Any] | None = None
) -> EventResult:
    reason = IgnoredReason.ALREADY_TERMINAL if stored in TERMINAL_STATES else (
        IgnoredReason.NOT_ALLOWED
    )  # fmt: skip
    return EventResult(EventOutcome.REFUSED, job_id, stored, stored, reason, error, job)


def _is_int(value: object, minimum: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def _bad(message: str) -> GatewayError:
    return GatewayError(INVALID_EVENT, message)
