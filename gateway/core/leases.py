"""Leases and deadlines: when event time alone ends a job's attempt or its wait.

A start (job.started) hands the job to a worker for a lease:
`lease_expires_at` = event time + `visibility_timeout_ms` (default
DEFAULT_VISIBILITY_TIMEOUT_MS), kept with the job as its lease duration. A
heartbeat moves `lease_expires_at` to event time + the given or kept duration
(both written by `moves.grant_lease`). A job's own `timeout_ms` bounds each
attempt: started_at + timeout_ms. Past either (`attempt_deadline`),
`expire_job` ends the attempt with an error: past its timeout the attempt
failed (retryable by the job's policy, error type `timeout`); past its lease
the worker is gone and the job is retryable with no backoff, available again
at once (error type `visibility_timeout`, as OJS's worker protocol has it); at
max attempts either is discarded. A waiting job past its expires_at is
discarded (`expired`), never handed out. The processor applies these when
event time passes the job's `job_deadline`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.core.job_events import FAILED, JobEvent, is_int
from gateway.core.kept_duplicates import reschedule_due
from gateway.core.moves import WAITING_STATES, EventResult, after_failure, applied
from gateway.core.states import State
from gateway.core.times import format_rfc3339, parse_rfc3339


def expire_job(job: Mapping[str, Any], now_ms: int) -> EventResult | None:
    """A job whose `job_deadline` has come at `now_ms`; None if it is not due.

    A waiting job past its expires_at is discarded with an `expired` error. An active
    one past its lease or its attempt's timeout: past its timeout the attempt failed, as
    a nack would fail it (retryable by its policy); past its lease the worker is gone:
    retryable with no backoff, so available again at once (OJS's worker protocol), with
    a `visibility_timeout` error. Either way the attempt counts: at max attempts the job
    is discarded."""
    if past_expiry(job, now_ms):
        return expired(job, now_ms)
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
    target = after_failure(job, event, attempt)
    result = applied(job, State.ACTIVE, target, event, now_ms, attempt)
    if not timed_out and result.state is State.RETRYABLE and result.job is not None:
        # The expired lease is no fault of the job: no backoff.
        result.job["next_attempt_at"] = format_rfc3339(now_ms)
        result.job["retry_delay_ms"] = 0
    return result


def job_deadline(job: Mapping[str, Any]) -> int | None:
    """When event time next changes the job by itself: a waiting job's expires_at, an
    active one's `attempt_deadline` (`expire_job`), a rescheduled one's due time
    (`kept_duplicates.redecide`); None for any other."""
    if job.get("state") == State.PENDING:
        return reschedule_due(job)
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


def expired(job: Mapping[str, Any], now_ms: int) -> EventResult:
    """A waiting job past its expires_at (`past_expiry`), discarded with an `expired` error."""
    message = f"the job passed its expires_at ({job['expires_at']}) before a worker took it"
    failure = {"type": "expired", "message": message, "retryable": False}
    event = JobEvent(str(job["id"]), job.get("unique_key"), None, FAILED, failure=failure)
    stored = State(job["state"])
    return applied(job, stored, State.DISCARDED, event, now_ms, int(job.get("attempt") or 0))


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
    if start_ms is None or not isinstance(timeout, int) or not is_int(timeout, minimum=1):
        return None
    return start_ms + timeout
