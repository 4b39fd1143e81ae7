"""An existing job updated in place: Oban's replace (on_conflict `update`), and a
trailing debounce (debounce.py) that moves the waiting job holding the key instead of
refusing a duplicate. The updated job keeps its id, its creation and what the update
does not name; its state follows its new scheduled time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from gateway.core.debounce import Debounce
from gateway.core.decision import Change, Debounced, Decision, Outcome, refuse
from gateway.core.entries import Entry, effective_state
from gateway.core.errors import GatewayError
from gateway.core.jobs import initial_state
from gateway.core.request import Request
from gateway.core.states import State
from gateway.core.times import format_rfc3339, parse_rfc3339


def update(request: Request, kept: tuple[Entry, ...], now_ms: int, existing: Entry) -> Decision:
    """Oban's replace: the existing job, its named fields set to the request's values."""
    assert request.policy is not None
    state = effective_state(existing, now_ms)
    wanted = request.policy.fields_to_update(state)
    if existing.job is None or not wanted:
        return refuse(Outcome.IGNORED, request, kept, now_ms, existing)
    values = _updatable_values(request, now_ms)
    changes = tuple(
        Change(name, existing.job.get(name), values[name])
        for name in wanted
        if existing.job.get(name) != values[name]
    )
    if not changes:
        return refuse(Outcome.IGNORED, request, kept, now_ms, existing)
    job = _changed(existing.job, changes)
    updated = updated_entry(existing, job, state, now_ms)
    return _updated(request, kept, now_ms, (existing, state), (updated, job), changes)


def _changed(before: Mapping[str, Any], changes: tuple[Change, ...]) -> dict[str, Any]:
    """A job with the changes made (a field changed to None is removed)."""
    job = {**before, **{c.field: c.after for c in changes}}
    for change in changes:
        if change.after is None:
            job.pop(change.field)
    return job


def _updated(
    request: Request,
    kept: tuple[Entry, ...],
    now_ms: int,
    existing: tuple[Entry, State],
    updated: tuple[Entry, dict[str, Any]],
    changes: tuple[Change, ...],
    debounced: Debounced | None = None,
) -> Decision:
    """The decision that updated the existing job (its entry and effective state) into
    `updated` (the entry and the job)."""
    (entry, state), (moved, job) = existing, updated
    job["state"] = str(effective_state(moved, now_ms))
    return Decision(
        Outcome.UPDATED,
        now_ms,
        tuple(moved if e is entry else e for e in kept),
        request.unique_key,
        request.policy,
        job=job,
        existing=entry,
        existing_state=state,
        changes=changes,
        debounced=debounced,
    )


def updated_record(job: Mapping[str, Any], decision: Decision) -> dict[str, Any]:
    """A stored job record after an `updated` decision: the changed fields set, and the
    state the update left it in (a new scheduled time can (un)schedule it)."""
    out = dict(job)
    for change in decision.changes:
        if change.after is None:
            out.pop(change.field, None)
        else:
            out[change.field] = change.after
    if isinstance(out.get("retry"), Mapping) and "max_attempts" in out:
        out["retry"] = {**out["retry"], "max_attempts": out["max_attempts"]}
    entry = next((e for e in decision.entries if e.job_id == out["id"]), None)
    if entry is not None:
        out["state"] = str(entry.state)
        if entry.state is State.AVAILABLE:
            out.setdefault("enqueued_at", format_rfc3339(decision.decided_at))
    return out


def _updatable_values(request: Request, now_ms: int) -> dict[str, Any]:
    """The request's value of every updatable field, as the job record holds it.

    A job without a scheduled time is scheduled now, as Oban does at insert.
    """
    env = request.envelope
    return {
        "args": env.args,
        "max_attempts": env.max_attempts,
        "meta": env.meta,
        "priority": env.priority,
        "queue": env.queue,
        "scheduled_at": format_rfc3339(now_ms if env.scheduled_at is None else env.scheduled_at),
        "tags": env.raw.get("tags"),
        "type": env.type,
    }


def updated_entry(entry: Entry, job: Mapping[str, Any], state: State, now_ms: int) -> Entry:
    scheduled = job.get("scheduled_at")
    scheduled_at = parse_rfc3339(scheduled) if isinstance(scheduled, str) else None
    if state in (State.SCHEDULED, State.AVAILABLE):
        state = initial_state(scheduled_at, now_ms)  # a new time can (un)schedule it
    else:
        state = entry.state
    return replace(
        entry,
        type=str(job["type"]),
        queue=str(job["queue"]),
        max_attempts=int(job["max_attempts"]),
        scheduled_at=scheduled_at,
        state=state,
        job=dict(job),
    )


def job_of(entry: Entry) -> dict[str, Any]:
    """What an entry knows of its job, when it keeps no copy and no record is given."""
    job: dict[str, Any] = {
        "id": entry.job_id, "type": entry.type, "queue": entry.queue,
        "max_attempts": entry.max_attempts,
    }  # fmt: skip
    if entry.scheduled_at is not None:
        job["scheduled_at"] = format_rfc3339(entry.scheduled_at)
    return job


def wants_records(request: Request | GatewayError) -> bool:
    """Whether deciding `request` may update a job's record (a debounce): the processor then
    passes `decide` the key's job records."""
    return (
        isinstance(request, Request)
        and request.policy is not None
        and request.policy.debounce is not None
        and bool(request.policy.debounce.states)
    )


def move_waiting(
    request: Request,
    kept: tuple[Entry, ...],
    now_ms: int,
    existing: Entry,
    debounce: Debounce,
    record: Mapping[str, Any] | None,
) -> Decision:
    """The waiting job that holds the key, moved to run after this request (see the rules)."""
    env = request.envelope
    run_at = now_ms if env.scheduled_at is None else env.scheduled_at
    capped = False
    if debounce.max_wait_ms is not None and run_at > existing.created_at + debounce.max_wait_ms:
        run_at, capped = existing.created_at + debounce.max_wait_ms, True
    if record is not None:
        before = {k: v for k, v in record.items() if k not in ("route", "partition")}
    else:
        before = dict(existing.job) if existing.job is not None else job_of(existing)
    values: dict[str, Any] = {}
    if debounce.replace:
        values.update(args=env.args, meta=env.meta)
    values["scheduled_at"] = format_rfc3339(run_at)
    changes = tuple(
        Change(name, before.get(name), value)
        for name, value in values.items()
        if before.get(name) != value
    )
    job = _changed(before, changes)
    state = effective_state(existing, now_ms)
    updated = updated_entry(existing, job, state, now_ms)
    restart = debounce.restart_lock and has_lock(existing)
    if restart:
        assert updated.holder is not None
        updated = replace(updated, holder=replace(updated.holder, since=now_ms))
    if existing.job is None:  # the entry keeps a copy only where it kept one (Oban's)
        updated = replace(updated, job=None)
    moved = Debounced(run_at, existing.created_at, capped, restart)
    return _updated(request, kept, now_ms, (existing, state), (updated, job), changes, moved)


def has_lock(entry: Entry) -> bool:
    return entry.holder is not None and entry.holder.expires_at is not None


def lock_restarted(ignored: Decision, existing: Entry, now_ms: int) -> Decision:
    """An ignored duplicate that restarts the holder's lock (BullMQ's extend alone)."""
    if existing.holder is None or not has_lock(existing):
        return ignored
    moved = replace(existing, holder=replace(existing.holder, since=now_ms))
    entries = tuple(moved if e is existing else e for e in ignored.entries)
    return replace(ignored, entries=entries, debounced=Debounced(None, None, False, True))
