"""The OJS lifecycle's transition rule: which state may follow which, the one authority.

Transitions (OJS core, section 6). The state an event starts from is the
job's effective state (`job_effective_state`): a scheduled job whose time has
come, or a retryable job whose backoff has elapsed, counts as available.

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
and only a terminal job may be deleted. A waiting job past its expires_at is
discarded instead of claimed (leases.py).

Claims. A start may carry a `claim_id` and the `worker_id` of the worker that took
the job, kept with the active job (the admin API counts workers by it). A requeue
(job.enqueued) of an active job that carries a `claim_id` applies only to that
claim: a fetch that gave up waiting can undo its own claim, never another's.

`apply_job_event` is the one applier; what an allowed transition writes into
the job record is moves.py's. A key's entries only follow the job's new state
(`follow`).

Events of a change. The OJS events (ojs-events.md, section 3) a job record's
change from one version to the next amounts to (`transition_events`):

    to available   job.enqueued         to retryable  job.failed, job.retrying
    to scheduled   job.scheduled        to discarded  job.failed (from active), job.discarded
    to active      job.started          to cancelled  job.cancelled
    to completed   job.completed        still active, new lease_expires_at: job.heartbeat
                                        still scheduled, new scheduled_at: job.scheduled

A move to `pending` amounts to none.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from gateway.core import successor
from gateway.core.concurrency import claim_refusal
from gateway.core.engine import entry_of
from gateway.core.entries import DEFAULT_RETENTION_MS, Entry, prune
from gateway.core.errors import INVALID_REQUEST, GatewayError
from gateway.core.job_events import DELETED, FAILED, HEARTBEAT, JobEvent
from gateway.core.kept_duplicates import held_back
from gateway.core.leases import expired, past_expiry
from gateway.core.moves import (
    EventOutcome,
    EventResult,
    IgnoredReason,
    after_failure,
    applied,
    grant_lease,
    refused,
)
from gateway.core.queues import paused_refusal
from gateway.core.rate_policy import RateLimit, job_policy
from gateway.core.rates import MORE_FIELD, PERMIT_FIELD, Permit, permit_refusal
from gateway.core.states import TERMINAL_STATES, State
from gateway.core.times import format_rfc3339, parse_rfc3339

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
    permits: tuple[Permit, ...] = (),
    needed: tuple[RateLimit, ...] | None = None,
) -> tuple[EventResult, tuple[Entry, ...]]:
    """`apply_job_event` for a job under a key, and the key's entries after it. A job back
    from the dead letters may not join a key another live job holds: two would hold it. A
    claim beyond the key's concurrency limit is refused (concurrency.py), as a paused
    queue's is; a claim of a job a rate key holds applies only with a permit of each key it
    `needed` (None: the job's own; rates.py, queue_rates.py), which the job then holds while
    active. A pending successor waits for its job (successor.py), a rescheduled duplicate
    for its due time (kept_duplicates.py)."""
    result = apply_job_event(job, event, now_ms, paused)
    if result.outcome is not EventOutcome.APPLIED or result.job is None:
        return result, tuple(entries)
    kept = prune(entries, now_ms, retention_ms)
    held = successor.held_back(kept, str(result.job_id), result.state) or held_back(
        job, result.state
    )
    if held is not None and job is not None:
        return refused(str(result.job_id), State(job["state"]), held, dict(job)), kept
    claimed = result.state is State.ACTIVE and result.previous_state is not State.ACTIVE
    if claimed and job is not None:
        own = job_policy(job)
        keys = needed if needed is not None else (() if own is None else (own,))
        full = claim_refusal(job, kept) or permit_refusal(job, permits, keys)
        if full is not None:
            return refused(str(result.job_id), State(job["state"]), full, dict(job)), kept
        if permits:
            result.job[PERMIT_FIELD] = permits[0].to_dict()
        if len(permits) > 1:
            result.job[MORE_FIELD] = [p.to_dict() for p in permits[1:]]
    if result.previous_state in TERMINAL_STATES and result.state not in TERMINAL_STATES:
        holder = next((e for e in kept if e.job_id != result.job_id and not e.terminal), None)
        if holder is not None and job is not None:
            why = GatewayError(
                INVALID_REQUEST,
                f"job {result.job_id} cannot be retried: job {holder.job_id} ({holder.state}) "
                "holds its unique key now",
            )
            return refused(str(result.job_id), State(job["state"]), why, dict(job)), kept
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


def job_effective_state(job: Mapping[str, Any], now_ms: int) -> State:
    """The job's state as a worker sees it, and every route shows it: due scheduled and
    retryable jobs are available."""
    return State(shown_state(job, now_ms))


def shown_state(job: Mapping[str, Any], now_ms: int) -> Any:
    """The job's state at `now_ms`, as every route lists, counts and filters it: available
    once a scheduled or retryable job is due, else the state its record holds."""
    due = due_ms(job)
    return State.AVAILABLE if due is not None and due <= now_ms else job.get("state")


def due_ms(job: Mapping[str, Any]) -> int | None:
    """When a scheduled or retryable job becomes available (a retry with no backoff
    recorded is due at once); None for any other job, or one with no time to become so."""
    state = job.get("state")
    if state == State.SCHEDULED:
        at = job.get("scheduled_at")
    elif state == State.RETRYABLE:
        at = job.get("next_attempt_at")
        if at is None:
            return 0
    else:
        return None
    return parse_rfc3339(at) if isinstance(at, str) else None


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
        return expired(job, now_ms)  # never handed out: discarded instead (OJS core)
    effective = job_effective_state(job, now_ms)
    attempt = int(job.get("attempt") or 0)
    target = event.state
    if target is None:  # job.failed: the job's retry policy decides
        target = after_failure(job, event, attempt)
    current_time = parse_rfc3339(job["scheduled_at"]) if job.get("scheduled_at") else None
    if _unchanged(stored, target, current_time, event.scheduled_at):
        return EventResult(
            EventOutcome.IGNORED, event.job_id, stored, stored, IgnoredReason.UNCHANGED,
            job=dict(job),
        )  # fmt: skip
    if target is State.ACTIVE and paused:  # a claim: a paused queue hands out nothing
        why = paused_refusal(event.job_id, str(job.get("queue")))
        return refused(event.job_id, stored, why, dict(job))
    why_not = refusal(event.job_id, stored, effective, target, event.event_type == FAILED)
    if why_not is None and _anothers_claim(job, stored, target, event):
        why_not = GatewayError(
            INVALID_REQUEST,
            f"job {event.job_id} is active under another claim than {event.claim_id}; "
            "a requeue with a claim_id undoes that claim only",
        )
    if why_not is not None:
        return refused(event.job_id, stored, why_not, dict(job))
    return applied(job, stored, target, event, now_ms, attempt)


def _anothers_claim(job: Mapping[str, Any], stored: State, target: State, event: JobEvent) -> bool:
    return (
        event.claim_id is not None
        and stored is State.ACTIVE
        and target is State.AVAILABLE
        and job.get("claim_id") != event.claim_id
    )


def _heartbeat(job: Mapping[str, Any], event: JobEvent, stored: State, now_ms: int) -> EventResult:
    """An active job's lease runs from now for the given, else its current, duration."""
    if stored is not State.ACTIVE:
        error = GatewayError(
            INVALID_REQUEST,
            f"job {event.job_id} is {stored}; heartbeat (job.heartbeat) needs an active job",
        )
        return refused(event.job_id, stored, error, dict(job))
    moved = dict(job)
    grant_lease(moved, event.visibility_timeout_ms or job.get("visibility_timeout_ms"), now_ms)
    return EventResult(EventOutcome.APPLIED, event.job_id, stored, stored, job=moved)


def _deleted(job: Mapping[str, Any], stored: State) -> EventResult:
    """A finished job removed for good; a live one must be finished (or cancelled) first."""
    job_id = str(job["id"])
    if stored not in TERMINAL_STATES:
        needs = ", ".join(sorted(TERMINAL_STATES))
        error = GatewayError(
            INVALID_REQUEST, f"job {job_id} is {stored}; delete (job.deleted) needs one of: {needs}"
        )
        return refused(job_id, stored, error, dict(job))
    return EventResult(EventOutcome.APPLIED, job_id, stored, stored, job=dict(job), deleted=True)


def transition_events(before: Mapping[str, Any] | None, after: Mapping[str, Any]) -> list[str]:
    """The OJS event types a job record's change from `before` (None: a new job) to `after`
    amounts to, in the order they happened. A new job a cron's slot enqueued (its meta
    names the cron and the slot, core/crons.py) first amounts to OJS cron's
    `cron.triggered`."""
    events = _state_events(before, after)
    return ["cron.triggered", *events] if before is None and _fired_by_cron(after) else events


def _fired_by_cron(job: Mapping[str, Any]) -> bool:
    meta = job.get("meta")
    return isinstance(meta, Mapping) and all(
        isinstance(meta.get(k), str) for k in ("cron_name", "cron_slot", "cron_triggered_at")
    )


def _state_events(before: Mapping[str, Any] | None, after: Mapping[str, Any]) -> list[str]:
    was = None if before is None else before.get("state")
    now = after.get("state")
    if was == now:
        if (
            now == State.ACTIVE
            and before
            and before.get("lease_expires_at") != after.get("lease_expires_at")
        ):
            return ["job.heartbeat"]
        if (
            now == State.SCHEDULED
            and before
            and before.get("scheduled_at") != after.get("scheduled_at")
        ):
            return ["job.scheduled"]
        return []
    if now == State.AVAILABLE:
        return ["job.enqueued"]
    if now == State.SCHEDULED:
        return ["job.scheduled"]
    if now == State.ACTIVE:
        return ["job.started"]
    if now == State.COMPLETED:
        return ["job.completed"]
    if now == State.RETRYABLE:
        return ["job.failed", "job.retrying"]
    if now == State.DISCARDED:
        return ["job.failed", "job.discarded"] if was == State.ACTIVE else ["job.discarded"]
    if now == State.CANCELLED:
        return ["job.cancelled"]
    return []
