"""Why each decision about a key came out as it did, from the records alone.

Pure: the text for a decision is a function of its audit record (outcome,
policy as applied, existing and cancelled jobs) and of the history before it
on the same key. The history is kept as the core's entries and the jobs'
records: a decision record adds the job it accepted (and marks what a replace
cancelled), and job events and expired attempts move the records by the
processor's own rules (see jobs.py), the key's entries following as the
processor's do. Nothing is decided again here.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import orjson

from gateway.audit.jobs import JobBook
from gateway.core import (
    DEFAULT_RETENTION_MS,
    Entry,
    EventOutcome,
    EventResult,
    GatewayError,
    Holder,
    IgnoredReason,
    JobEvent,
    State,
    UniquePolicy,
    effective_state,
    holds,
    parse_event,
    prune,
)
from gateway.core.lifecycle import cancelled_by_replace, follow
from gateway.core.times import format_rfc3339, parse_rfc3339

Entries = tuple[Entry, ...]


@dataclass(frozen=True, slots=True)
class HistoryItem:
    """A decision record or a job event (its JSON), where it sits in the log and when."""

    # "decision", "event", "queue" (a queue command: its bytes), or "time": another record
    # of the key's partition, which moves its time on (a tick, or a record about another key).
    kind: str
    timestamp_ms: int
    position: tuple[str, int, int]
    record: Any

    @property
    def topic(self) -> str:
        return self.position[0]


def find_key(items: Iterable[HistoryItem], job_id: str) -> str | None:
    """The unique_key of the job `job_id`, from any decision or event that names it."""
    wanted = job_id.lower()
    for item in items:
        rec = item.record if isinstance(item.record, Mapping) else {}
        named = {rec.get("job_id"), rec.get("existing_job_id"), *rec.get("cancelled_job_ids", [])}
        key = rec.get("unique_key")
        if wanted in {str(n).lower() for n in named if n} and isinstance(key, str):
            return key
    return None


def explain_history(
    items: Sequence[HistoryItem], retention_ms: int = DEFAULT_RETENTION_MS
) -> Iterator[str]:
    """One block of lines per item, and per attempt an item's time ended, in log order."""
    entries: Entries = ()
    book = JobBook()
    for item in items:
        stamp = format_rfc3339(item.timestamp_ms)
        where = "{}[{}]@{}".format(*item.position)
        for expired in book.expire(item.timestamp_ms):
            assert expired.job is not None
            error = expired.job.get("error") or {}
            yield f"{stamp}  {error.get('type')} job {expired.job_id}  ({where})"
            yield f"    {_moved(expired)}: {error.get('message')}"
            entries = follow(entries, expired.job, expired, item.timestamp_ms, retention_ms)
        if item.kind == "decision":
            rec = item.record
            head = f"decision {rec.get('outcome')}  request {rec.get('request_id')}"
            yield f"{stamp}  {head}  ({where})"
            yield f"    {explain_decision(rec, entries)}"
            if isinstance(rec.get("policy"), Mapping):
                yield f"    policy: {describe_policy(rec['policy'])}"
            entries = after_decision(entries, rec)
            _record_jobs(book, rec)
        elif item.kind == "queue":
            book.command(item.position[1], item.record, item.timestamp_ms)
        elif item.kind == "event":
            event = parse_event(item.record)
            result, entries = book.apply(
                event, entries, item.timestamp_ms, retention_ms, item.position[1]
            )  # fmt: skip
            yield f"{stamp}  event {_event_name(item.record)}  ({where})"
            yield f"    {explain_event(event, result)}"


def _record_jobs(book: JobBook, record: Mapping[str, Any]) -> None:
    """The job records a decision made or moved, as the processor stores them."""
    now = _time(record.get("decided_at")) or 0
    for job_id in record.get("cancelled_job_ids") or []:
        old = book.jobs.get(str(job_id))
        cancelled = None if old is None else cancelled_by_replace(old, now)
        if cancelled is not None:
            book.accepted(cancelled)
    job = record.get("job")
    if record.get("outcome") in ("accepted", "replaced", "updated") and isinstance(job, Mapping):
        book.accepted({**book.jobs.get(str(job.get("id")), {}), **job})


def explain_decision(record: Mapping[str, Any], prior: Entries) -> str:
    """Why the decision's outcome followed, given the key's entries before it.

    Whether a job held the key is asked of `core.holds`, the engine's own predicate.
    """
    outcome = record.get("outcome")
    now = _time(record.get("decided_at")) or 0
    policy = _policy(record)
    if outcome == "invalid":
        error = record.get("error") or {}
        return f"invalid: {error.get('code')}: {error.get('message')}"
    if policy is None:
        return (
            f"accepted: job {record.get('job_id')}; the job has no unique policy, "
            "so nothing can duplicate it"
        )
    kept = prune(prior, now)
    if outcome == "accepted":
        reasons = [holds(e, policy, now).why for e in kept]
        detail = f" against this request: {'; '.join(reasons)}" if reasons else ""
        return f"accepted: job {record.get('job_id')}; no job holds this key{detail}"
    existing = record.get("existing_job_id")
    held = next((e for e in kept if e.job_id == existing), None)
    if outcome in ("rejected", "ignored", "updated"):
        then = {
            "rejected": "the request is refused",
            "ignored": "the existing job is returned",
            "updated": f"the request updates it: {_changes(record)}; the updated job is published",
        }[outcome]
        if held is None:
            state = record.get("existing_job_state")
            return f"{outcome}: job {existing} was `{state}` (before this log's history); {then}"
        holding = holds(held, policy, now)
        if not holding.holds:
            return (
                f"{outcome}: the request carried the id of job {existing}, which already holds "
                f"this key: a resubmitted job is never a second job; {then}"
            )
        return f"{outcome}: {holding.why}; {then}"
    if outcome == "replaced":
        cancelled = [
            f"cancelled job {jid} ({_state_before(jid, prior, now, existing, record)})"
            for jid in record.get("cancelled_job_ids") or []
        ]
        if not cancelled:
            cancelled = [
                f"job {existing} was `{record.get('existing_job_state')}`, which is in the "
                "policy's states but terminal: superseded, not cancelled"
            ]
        return f"replaced: {'; '.join(cancelled)}; accepted job {record.get('job_id')} in its place"
    return f"{outcome}: no explanation for this outcome"


def _changes(record: Mapping[str, Any]) -> str:
    changes = record.get("updated_fields") or []
    return ", ".join(
        f"{c.get('field')} {_show(c.get('from'))} → {_show(c.get('to'))}"
        for c in changes
        if isinstance(c, Mapping)
    )


def _show(value: Any) -> str:
    return "(none)" if value is None else orjson.dumps(value).decode()


def explain_event(event: JobEvent | GatewayError, result: EventResult) -> str:
    """What a job event did to the job, as the processor applied it."""
    if isinstance(event, GatewayError):
        return f"invalid: {event.message}"
    if result.outcome is EventOutcome.APPLIED:
        return _moved(result)
    if result.reason is IgnoredReason.UNKNOWN_JOB:
        return f"ignored: no job {event.job_id} is held under this key"
    if result.outcome is EventOutcome.REFUSED and result.error is not None:
        return f"refused: {result.error.message}"
    return f"ignored: job {event.job_id} is already {result.state}"


def _moved(result: EventResult) -> str:
    """An applied transition, with what it means for the job's next attempt and its key."""
    job = result.job or {}
    head = f"job {result.job_id}: {result.previous_state} → {result.state}"
    if result.deleted:
        return f"job {result.job_id}: {result.previous_state}, deleted: its key is released"
    if result.state is State.ACTIVE and result.previous_state is State.ACTIVE:
        return f"job {result.job_id}: heartbeat, lease until {job.get('lease_expires_at')}"
    if result.state is State.ACTIVE:
        return f"{head} (attempt {job.get('attempt')}, lease until {job.get('lease_expires_at')})"
    if result.state is State.RETRYABLE:
        return f"{head} (attempt {job.get('attempt')} failed; next attempt at " + (
            f"{job.get('next_attempt_at')})"
        )
    if result.state is State.DISCARDED and result.previous_state is State.ACTIVE:
        error = job.get("error") or {}
        why = "attempts exhausted"
        if error.get("retryable") is False:
            why = "the error is not retryable"
        elif int(job.get("attempt") or 0) < int(job.get("max_attempts") or 1):
            why = f"the error type {error.get('type')} is not retried"
        return f"{head} ({why}: the job is discarded and releases the key)"
    return head


def after_decision(prior: Entries, record: Mapping[str, Any]) -> Entries:
    """The key's entries after a decision, as its record tells them (no rule applied)."""
    now = _time(record.get("decided_at")) or 0
    cancelled = set(record.get("cancelled_job_ids") or [])
    entries = [e.moved_to(State.CANCELLED, now) if e.job_id in cancelled else e for e in prior]
    job = record.get("job")
    if not isinstance(job, Mapping):
        return tuple(entries)
    if record.get("outcome") == "updated":
        return tuple(_updated(e, job) if e.job_id == job.get("id") else e for e in entries)
    if job.get("id") not in {e.job_id for e in entries}:
        entry = _entry(job, record.get("holder"))
        if entry is not None:
            entries.append(entry)
    return tuple(entries)


def _updated(entry: Entry, job: Mapping[str, Any]) -> Entry:
    """The entry as an update's record shows its job."""
    fresh = _entry(job, None)
    if fresh is None:
        return entry
    return replace(
        entry, state=fresh.state, type=fresh.type, queue=fresh.queue,
        scheduled_at=fresh.scheduled_at, max_attempts=fresh.max_attempts, job=dict(job),
    )  # fmt: skip


def describe_policy(policy: Mapping[str, Any]) -> str:
    parts = [f"keys {_list(policy.get('keys'))}"]
    for name in ("args_keys", "meta_keys"):
        if policy.get(name) is not None:
            parts.append(f"{name} {_list(policy[name])}")
    parts += [
        f"states {_list(policy.get('states'))}",
        f"period {policy.get('period') or 'none'}",
        f"on_conflict {policy.get('on_conflict')}",
    ]
    if policy.get("period_from"):
        parts.append(f"period from {policy['period_from']}")
    if policy.get("judge") == "holder":
        parts.append("the holder's rule decides")
    if isinstance(policy.get("update_fields"), Mapping):
        updates = "; ".join(f"{s}: {_list(f)}" for s, f in policy["update_fields"].items())
        parts.append(f"update {updates}")
    return ", ".join(parts)


def _state_before(
    job_id: str, prior: Entries, now: int, existing: Any, record: Mapping[str, Any]
) -> str:
    for entry in prior:
        if entry.job_id == job_id:
            return str(effective_state(entry, now))
    return str(record.get("existing_job_state")) if job_id == existing else "state before this log"


def _policy(record: Mapping[str, Any]) -> UniquePolicy | None:
    raw = record.get("policy")
    policy = UniquePolicy.from_dict(raw) if isinstance(raw, Mapping) else None
    return policy if isinstance(policy, UniquePolicy) else None


def _list(values: Any) -> str:
    return "[" + ", ".join(str(v) for v in values or []) + "]"


def _time(value: Any) -> int | None:
    return parse_rfc3339(value) if isinstance(value, str) else None


def _event_name(raw: Any) -> str:
    if not isinstance(raw, Mapping):
        return "(malformed)"
    name = raw.get("type") or f"state={raw.get('state')}"
    attempt = raw.get("attempt")
    if attempt is not None:
        limit = raw.get("max_attempts")
        name += f" (attempt {attempt}{f' of {limit}' if limit is not None else ''})"
    return f"{name} job {raw.get('job_id')}"


def _entry(job: Mapping[str, Any], holder: Any) -> Entry | None:
    """The entry a job record stands for; None if the record lacks what an entry needs."""
    created = _time(job.get("created_at"))
    try:
        state = State(str(job.get("state")))
    except ValueError:
        return None
    if created is None or not isinstance(job.get("id"), str):
        return None
    max_attempts = job.get("max_attempts")
    return Entry(
        job_id=job["id"],
        state=state,
        created_at=created,
        state_changed_at=created,
        type=str(job.get("type")),
        queue=str(job.get("queue")),
        scheduled_at=_time(job.get("scheduled_at")),
        max_attempts=max_attempts if isinstance(max_attempts, int) else 3,
        holder=_holder(holder),
    )


def _holder(raw: Any) -> Holder | None:
    try:
        return Holder.from_dict(raw) if isinstance(raw, Mapping) else None
    except ValueError:
        return None  # a record written by something else: explain without the rule
