"""A job record moved by one transition, and the result an event gets (`EventResult`).

lifecycle.py decides whether a transition may happen; `applied` writes it into
the whole job record: the attempt counting (a start is the next attempt), the
timestamps (started_at, completed_at for completed and discarded,
cancelled_at, discarded_at, enqueued_at: a start that finds none sets the
time the job was ready, `ready_at`), the lease a start grants (`grant_lease`), the result, the
errors and the next retry time (see retry.py). Whether a failure is retried
or discarded is `after_failure`'s. leases.py moves jobs by time through the
same `applied`.

Errors. Each failure's error record is `error` (the last) and the last
MAX_ERRORS of them, oldest first, are `errors`; older ones are dropped first
when the record would exceed MAX_JOB_RECORD_BYTES.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import orjson

from gateway.core.errors import GatewayError
from gateway.core.job_events import JobEvent, is_int
from gateway.core.limits import MAX_JOB_RECORD_BYTES, too_large
from gateway.core.retry import RetryPolicy
from gateway.core.states import TERMINAL_STATES, State
from gateway.core.times import format_rfc3339

# A worker that claims a job without saying for how long holds it this long
# unless it heartbeats: the visibility timeout of SQS and OJS workers.
DEFAULT_VISIBILITY_TIMEOUT_MS = 1_800_000  # OJS worker protocol 5.2: 1800 s
MAX_ERRORS = 10


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


# States a job waits for a worker in: available now, or once its time comes.
WAITING_STATES = frozenset({State.AVAILABLE, State.SCHEDULED, State.RETRYABLE})


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


def grant_lease(job: dict[str, Any], duration_ms: Any, now_ms: int) -> None:
    """Hand the job to its worker for `duration_ms` from now (an integer of at least 1),
    else for DEFAULT_VISIBILITY_TIMEOUT_MS; the duration is kept for its heartbeats."""
    lease = duration_ms if is_int(duration_ms, 1) else DEFAULT_VISIBILITY_TIMEOUT_MS
    job["visibility_timeout_ms"] = lease
    job["lease_expires_at"] = format_rfc3339(now_ms + lease)


def applied(
    job: Mapping[str, Any], stored: State, target: State, event: JobEvent, now_ms: int, attempt: int
) -> EventResult:
    """The job record moved from `stored` to `target` by `event` at `now_ms`; refused if a
    result or an error would grow it past MAX_JOB_RECORD_BYTES."""
    moved = _moved(dict(job), stored, target, event, now_ms, attempt)
    # Only a result or an error grows a record.
    if (event.result is not None or event.failure is not None) and not _fit(moved):
        size = len(orjson.dumps(moved))
        error = too_large("the job record", size, MAX_JOB_RECORD_BYTES)
        return refused(event.job_id, stored, error, dict(job))
    return EventResult(EventOutcome.APPLIED, event.job_id, stored, target, job=moved)


def _fit(job: dict[str, Any]) -> bool:
    """Whether the record fits MAX_JOB_RECORD_BYTES, once the oldest errors make room."""
    while len(orjson.dumps(job)) > MAX_JOB_RECORD_BYTES:
        if not job.get("errors"):
            return False
        job["errors"] = job["errors"][1:]
    return True


def after_failure(job: Mapping[str, Any], event: JobEvent, attempt: int) -> State:
    """Where a failure leaves the job: discarded at its max attempts, or when the error says
    `retryable: false` or has a type its retry policy never retries; else retryable."""
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
        grant_lease(job, event.visibility_timeout_ms or job.get("visibility_timeout_ms"), now_ms)
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


def refused(
    job_id: str, stored: State, error: GatewayError, job: dict[str, Any] | None = None
) -> EventResult:
    """An event refused for a job in `stored`, with why; `job`: the record, unchanged."""
    reason = IgnoredReason.ALREADY_TERMINAL if stored in TERMINAL_STATES else (
        IgnoredReason.NOT_ALLOWED
    )  # fmt: skip
    return EventResult(EventOutcome.REFUSED, job_id, stored, stored, reason, error, job)
