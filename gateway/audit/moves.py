"""How an audit record's jobs moved, told from the record alone: what became of a job
event (the core's result, with the job as the event left it), and a line for each job a
tick or command moved (an attempt its time ended, told by the core's own rule,
`expire_job`, a job its retention deleted). Also the readers of a record's `state` and
`what` that explain.py shares.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from gateway.core import (
    EventOutcome,
    EventResult,
    GatewayError,
    IgnoredReason,
    State,
    expire_job,
)
from gateway.core.concurrency import CONCURRENCY_LIMIT
from gateway.core.rates import RATE_LIMITED
from gateway.core.times import parse_rfc3339


def state_rows(state: Mapping[str, Any]) -> list[list[Any]]:
    rows = state.get("before")
    if not isinstance(rows, list):
        return []
    return [r for r in rows if isinstance(r, list) and len(r) >= 3]


def jobs_written(record: Mapping[str, Any]) -> list[tuple[str, str | None, str | None]]:
    """[(job id, its state before, after)] of every job record the record wrote."""
    state = record.get("state")
    rows = state.get("jobs") if isinstance(state, Mapping) else None
    if not isinstance(rows, list):
        return []
    return [
        (str(r[0]), _text(r[1]), _text(r[2])) for r in rows if isinstance(r, list) and len(r) == 3
    ]


def job_before(record: Mapping[str, Any], job_id: str | None) -> Mapping[str, Any] | None:
    """The job's record as the record read it, before it wrote it."""
    state = record.get("state")
    for row in state_rows(state) if isinstance(state, Mapping) else []:
        if row[1] == f"job/{job_id}" and isinstance(row[2], Mapping):
            return row[2]
    return None


def event_result(record: Mapping[str, Any]) -> EventResult:
    """What an event's record says became of it, as the core's result, with the job as the
    event left it (a record written before it carried the job: told from the job before)."""
    what = what_of(record)
    job = what.get("job") if isinstance(what.get("job"), dict) else None
    job_id = what.get("job_id") if isinstance(what.get("job_id"), str) else None
    row = next((r for r in jobs_written(record) if r[0] == job_id), None)
    raw = what.get("error") if isinstance(what.get("error"), Mapping) else None
    error = None if raw is None else GatewayError(str(raw.get("code")), str(raw.get("message")))
    outcome = _enum(EventOutcome, what.get("outcome")) or EventOutcome.INVALID
    return EventResult(
        outcome, job_id,
        previous_state=_enum(State, what.get("previous_state")),
        state=_enum(State, what.get("state")),
        reason=_enum(IgnoredReason, what.get("reason")),
        error=error,
        job=job,
        deleted=outcome is EventOutcome.APPLIED and row is not None and row[2] is None,
    )  # fmt: skip


def job_moves(record: Mapping[str, Any]) -> list[str]:
    """A line for each job a record other than a request or an event wrote: an attempt
    its time ended (told by the core's own rule, `expire_job`, asked of the job as the
    record read it at the record's time), a job its retention deleted, a job moved."""
    lines = []
    at = time_of(record.get("at"))
    for job_id, was, now in jobs_written(record):
        before = job_before(record, job_id)
        if now is None:
            lines.append(f"job {job_id}: `{was}`, deleted: its retention ended")
            continue
        ended = None if before is None or at is None else expire_job(before, at)
        if ended is not None and ended.job is not None and str(ended.state) == now:
            error = ended.job.get("error") or {}
            moved = _moved(ended, before).removeprefix(f"job {job_id}: ")
            lines.append(f"{error.get('type')} job {job_id}: {moved}: {error.get('message')}")
            continue
        result = EventResult(EventOutcome.APPLIED, job_id, _enum(State, was), _enum(State, now))
        lines.append(_moved(result, before))
    return lines


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def what_of(record: Mapping[str, Any]) -> Mapping[str, Any]:
    what = record.get("what")
    return what if isinstance(what, Mapping) else {}


def _enum(kind: Any, value: Any) -> Any:
    try:
        return None if value is None else kind(value)
    except ValueError:
        return None


def explain_event(result: EventResult, before: Mapping[str, Any] | None = None) -> str:
    """What a job event did to the job (as it was `before`), as the processor applied it."""
    if result.outcome is EventOutcome.INVALID:
        return f"invalid: {None if result.error is None else result.error.message}"
    if result.outcome is EventOutcome.APPLIED:
        return _moved(result, before)
    if result.reason is IgnoredReason.UNKNOWN_JOB:
        return f"ignored: no job {result.job_id} is held under this key"
    if result.outcome is EventOutcome.REFUSED and result.error is not None:
        if result.error.code == CONCURRENCY_LIMIT:
            return (
                f"refused (concurrency limit): job {result.job_id} stays {result.state}: "
                f"{result.error.message}"
            )
        return f"refused: {result.error.message}"
    return f"ignored: job {result.job_id} is already {result.state}"


def _moved(result: EventResult, before: Mapping[str, Any] | None = None) -> str:
    """An applied transition, with what it means for the job's next attempt and its key:
    from the job afterwards where it is known (`result.job`), else from the job before."""
    after, was = result.job or {}, before or {}
    head = f"job {result.job_id}: {result.previous_state} → {result.state}"
    attempt = after.get("attempt", was.get("attempt"))
    if result.deleted:
        return f"job {result.job_id}: {result.previous_state}, deleted: its key is released"
    if result.state is State.ACTIVE and result.previous_state is State.ACTIVE:
        return f"job {result.job_id}: heartbeat, its lease renewed"
    if result.state is State.ACTIVE:
        return f"{head} (a worker took it)"
    if result.state is State.RETRYABLE:
        then = f"; next attempt at {after['next_attempt_at']}" if "next_attempt_at" in after else ""
        return f"{head} (attempt {attempt} failed{then})"
    if result.state is State.DISCARDED and result.previous_state is State.ACTIVE:
        error = after.get("error") or {}
        limit = int(was.get("max_attempts") or after.get("max_attempts") or 1)
        why = ""
        if error.get("retryable") is False:
            why = ", the error is not retryable"
        elif int(attempt or 0) >= limit:
            why = ", attempts exhausted"
        elif error:
            why = f", the error type {error.get('type')} is not retried"
        return f"{head} (attempt {attempt} of {limit} failed{why}: the job is discarded " + (
            "and releases the key)"
        )
    return head


def explain_rate(what: Mapping[str, Any]) -> str:
    """What a rate key's home did with a claim or a report, or that a route sent a claim
    there (core/rates.py), from the record's `what`."""
    raw = what.get("rate")
    rate: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    job, key = what.get("job_id"), rate.get("key")
    if "cleared" in rate:
        if rate["cleared"]:
            return f"override of rate key {key} cleared: its jobs' own limits apply"
        override = rate.get("override")
        if not isinstance(override, Mapping):
            return f"override of rate key {key} set, already past its expires_at: none applies"
        return f"rate key {key} overridden: {_limits(override)}"
    if rate.get("sent_home"):
        return f"job {job}'s claim sent to rate key {key}'s home for a permit"
    if rate.get("forwarded"):
        return f"{rate['forwarded']} of job {job} sent on to its route, after its claims"
    if "released" in rate:
        why = (
            "unused: the claim did not start the job"
            if rate.get("unused")
            else "its job left active"
        )
        return f"permit {rate['released']} of rate key {key} given back ({why})"
    over = rate.get("override")
    by = f"; under the override {_limits(over)}" if isinstance(over, Mapping) else ""
    if rate.get("outcome") == "granted":
        return (
            f"granted: job {job} may start with permit {rate.get('permit')} of rate key {key} "
            f"({rate.get('held')} held, {rate.get('starts')} starts in the sliding window{by})"
        )
    if "moved_to" in rate or ("on_limit" in rate and "limit" not in rate):
        moved = rate.get("moved_to")
        return (
            f"refused ({RATE_LIMITED}) at rate key {key}'s home: job {job} "
            + (f"{moved} by its on_limit {rate.get('on_limit')}" if moved
               else "no longer waiting, so it stays as it is")
        )  # fmt: skip
    held = "starts in its sliding window" if rate.get("strategy") == "rate" else "permits held"
    then = f"; next permit at {rate['retry_at']}" if rate.get("retry_at") else ""
    stays = (
        "stays available" if rate.get("on_limit", "wait") == "wait"
        else f"goes back to its route, to be moved by its on_limit {rate['on_limit']}"
    )  # fmt: skip
    return (
        f"refused ({RATE_LIMITED}): job {job} {stays}: rate key {key} has "
        f"{rate.get('current')} of {rate.get('limit')} {held}{then}{by}"
    )


def _limits(override: Mapping[str, Any]) -> str:
    """An override's limits as explain tells them."""
    told = []
    if override.get("concurrency") is not None:
        told.append(f"concurrency {override['concurrency']}")
    rate = override.get("rate")
    if isinstance(rate, Mapping):
        told.append(f"rate {rate.get('limit')} per {rate.get('period')}")
    until = override.get("expires_at")
    return ", ".join(told) + (f" until {until}" if until else " until cleared")


def time_of(value: Any) -> int | None:
    return parse_rfc3339(value) if isinstance(value, str) else None


def explain_tenant(what: Mapping[str, Any]) -> str:
    """What a tenant's home did (core/tenant_limits.py), from the record's `what`: a request
    admitted or refused, a place given back, limits set."""
    raw = what.get("tenant")
    told: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    tenant = told.get("tenant")
    if "refused" in told:
        error = (told.get("refused") or {}).get("error") or {}
        return f"tenant {tenant}'s home refused the request for {told.get('route')}: " + str(
            error.get("message")
        )
    if "slot" in told:
        return (
            f"tenant {tenant}'s home admitted the request for {told.get('route')}, a "
            f"{told['slot']} place taken: {told.get('waiting')} waiting, "
            f"{told.get('scheduled')} scheduled"
        )
    if "released" in told:
        return (
            f"tenant {tenant}: a {told['released']} place given back (its job started or "
            f"ended, or its request made no job): {told.get('waiting')} waiting"
        )
    reason = told.get("reason")
    return f"tenant {tenant}'s limits set to {orjson.dumps(told.get('limits')).decode()}" + (
        "" if reason is None else f" ({reason})"
    )
