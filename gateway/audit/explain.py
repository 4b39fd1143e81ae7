"""Why each audit record on `decisions` came out as it did, from that record alone.

Pure: the text for a record is a function of the record. A request's record
carries the key's entries it was decided from (`state.before`), so why it
was accepted, rejected, ignored, replaced or updated is asked of the
engine's own predicate (`core.holds`) over exactly those entries. A job
event's record carries what became of it (`what`, with the job as it left
it), the job's record as it found it and the states it moved it between
(`state.jobs`). A
tick's record carries the jobs its time made due as they were: the attempt
it ended is told by the core's own rule (`core.expire_job`) at the record's
time, which is what the processor did; a record its retention deleted, by
its state. Nothing is decided anew. A record written before records carried
their state is told from its own fields, and says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.core import (
    Entry,
    EventOutcome,
    EventResult,
    GatewayError,
    IgnoredReason,
    State,
    UniquePolicy,
    effective_state,
    expire_job,
    holds,
    prune,
)
from gateway.core.concurrency import CONCURRENCY_LIMIT
from gateway.core.periods import format_period
from gateway.core.successor import SUCCESSOR_OF
from gateway.core.times import parse_rfc3339

Entries = tuple[Entry, ...]
NO_STATE = (
    "this record carries no state (written before audit records did): told from its own fields"
)


@dataclass(frozen=True, slots=True)
class Explained:
    """One audit record, told: what it is, about what, and why it came out so."""

    kind: str  # request, event, command, id_report, id_claim, tick
    at: str | None  # the record's time, RFC 3339
    head: str  # one line: what the record is
    summary: dict[str, Any]  # a request's outcome, or another record's `what`
    reason: list[str]  # why, a line each


def explain_record(record: Mapping[str, Any]) -> Explained:
    """The explanation of one audit record (a request's decision, or any other record
    that read or changed a route's state)."""
    kind = str(record.get("kind") or ("request" if "outcome" in record else "unknown"))
    if kind == "request":
        return _request(record)
    what = _what(record)
    at = record.get("at") if isinstance(record.get("at"), str) else None
    if kind == "event":
        result = event_result(record)
        head = f"event {what.get('outcome')} job {what.get('job_id')}"
        told = [explain_event(result, _job_before(record, result.job_id))]
        if what.get("released"):
            told.append(
                f"job {result.job_id} was the last job its key's successor waited for: "
                f"successor {what['released']} is enqueued"
            )
        return Explained(kind, at, head, dict(what), told)
    moves = job_moves(record)
    head = kind if not what else f"{kind} {orjson.dumps(what).decode()}"
    if "answered_again" in what:  # an idempotent retry (stage/idempotency.py)
        moves = [
            f"answered again: idempotency key {what.get('idempotency_key')!r} was answered "
            f"for request {what.get('answer_of')} with the same body; its answer is sent "
            f"again (time {what.get('answered_again')}), no new decision, no new job",
            *moves,
        ]
    return Explained(kind, at, head, dict(what), moves or ["no job moved"])


def _request(record: Mapping[str, Any]) -> Explained:
    outcome = record.get("outcome")
    head = f"decision {outcome}  request {record.get('request_id')}"
    prior = entries_before(record)
    if prior is None:
        reason = [NO_STATE if not isinstance(record.get("state"), Mapping) else _too_large(record)]
        reason.append(explain_decision(record, ()))
    else:
        reason = [explain_decision(record, prior)]
    if isinstance(record.get("policy"), Mapping):
        reason.append(f"policy: {describe_policy(record['policy'])}")
    at = record.get("decided_at") if isinstance(record.get("decided_at"), str) else None
    return Explained("request", at, head, {"outcome": outcome}, reason)


def entries_before(record: Mapping[str, Any]) -> Entries | None:
    """The key's entries the request was decided from, as its record carries them; None
    when it carries none (an older record, or entries too large to carry)."""
    state = record.get("state")
    if not isinstance(state, Mapping):
        return None
    key = record.get("unique_key")
    for row in _cells(state):
        if row[0] == key and row[1] == "entries":
            value = row[2]
            if value is None:
                return ()
            if not isinstance(value, list):
                return None  # {"digest", "bytes"}: too large to carry
            try:
                return tuple(Entry.from_dict(item) for item in value)
            except (ValueError, AttributeError):
                return None
    return ()  # not read: a request without a unique key


def _too_large(record: Mapping[str, Any]) -> str:
    for row in _cells(record["state"]):
        if row[1] == "entries" and isinstance(row[2], Mapping):
            size = row[2].get("bytes")
            return f"the key's entries ({size} bytes) were too large for the record to carry"
    return "the key's entries in this record are not readable"


def _cells(state: Mapping[str, Any]) -> list[list[Any]]:
    rows = state.get("before")
    if not isinstance(rows, list):
        return []
    return [r for r in rows if isinstance(r, list) and len(r) >= 3]


def _jobs(record: Mapping[str, Any]) -> list[tuple[str, str | None, str | None]]:
    """[(job id, its state before, after)] of every job record the record wrote."""
    state = record.get("state")
    rows = state.get("jobs") if isinstance(state, Mapping) else None
    if not isinstance(rows, list):
        return []
    return [
        (str(r[0]), _text(r[1]), _text(r[2])) for r in rows if isinstance(r, list) and len(r) == 3
    ]


def _job_before(record: Mapping[str, Any], job_id: str | None) -> Mapping[str, Any] | None:
    """The job's record as the record read it, before it wrote it."""
    state = record.get("state")
    for row in _cells(state) if isinstance(state, Mapping) else []:
        if row[1] == f"job/{job_id}" and isinstance(row[2], Mapping):
            return row[2]
    return None


def event_result(record: Mapping[str, Any]) -> EventResult:
    """What an event's record says became of it, as the core's result, with the job as the
    event left it (a record written before it carried the job: told from the job before)."""
    what = _what(record)
    job = what.get("job") if isinstance(what.get("job"), dict) else None
    job_id = what.get("job_id") if isinstance(what.get("job_id"), str) else None
    row = next((r for r in _jobs(record) if r[0] == job_id), None)
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
    at = _time(record.get("at"))
    for job_id, was, now in _jobs(record):
        before = _job_before(record, job_id)
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


def _what(record: Mapping[str, Any]) -> Mapping[str, Any]:
    what = record.get("what")
    return what if isinstance(what, Mapping) else {}


def _enum(kind: Any, value: Any) -> Any:
    try:
        return None if value is None else kind(value)
    except ValueError:
        return None


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
    job = record.get("job")
    if isinstance(job, Mapping) and job.get("state") == "pending" and job.get(SUCCESSOR_OF):
        return _kept_last(record, job, prior, now)
    if outcome == "accepted":
        reasons = [holds(e, policy, now).why for e in kept]
        detail = f" against this request: {'; '.join(reasons)}" if reasons else ""
        return f"accepted: job {record.get('job_id')}; no job holds this key{detail}"
    existing = record.get("existing_job_id")
    held = next((e for e in kept if e.job_id == existing), None)
    debounced = record.get("debounce")
    if isinstance(debounced, Mapping) and outcome == "updated":
        return _debounced(record, debounced, held, policy, now)
    if outcome in ("rejected", "ignored", "updated"):
        then = {
            "rejected": "the request is refused",
            "ignored": "the existing job is returned"
            + (
                "; its lock restarts from now (the request's extend)"
                if isinstance(debounced, Mapping) and debounced.get("lock_restarted")
                else ""
            ),
            "updated": f"the request updates it: {_changes(record)}; the updated job is published",
        }[outcome]
        if held is None:
            state = record.get("existing_job_state")
            return f"{outcome}: job {existing} was `{state}`; {then}"
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


def _kept_last(record: Mapping[str, Any], job: Mapping[str, Any], prior: Entries, now: int) -> str:
    """A request kept as its key's successor (core/successor.py)."""
    followed = job[SUCCESSOR_OF]
    state = _state_before(followed, prior, now, record.get("existing_job_id"), record)
    told = (
        f"{record.get('outcome')} (kept as the successor): job {followed} ({state}) holds "
        f"the key and has not finished, so the request is kept as job {record.get('job_id')}, "
        "pending, off the queue until that job finishes, then enqueued"
    )
    older = record.get("cancelled_job_ids") or []
    if older:
        told += f"; it replaces the older successor {', '.join(older)}, cancelled"
    return told


def _debounced(
    record: Mapping[str, Any],
    debounced: Mapping[str, Any],
    held: Entry | None,
    policy: UniquePolicy,
    now: int,
) -> str:
    """A debounce: the waiting job that held the key moved to run after this request."""
    existing = record.get("existing_job_id")
    why = (
        f"job {existing} was `{record.get('existing_job_state')}`"
        if held is None
        else holds(held, policy, now).why
    )
    debounce = policy.debounce
    when = f"its run time moves to {debounced.get('run_at')}"
    if debounced.get("capped") and debounce is not None and debounce.max_wait_ms is not None:
        when += (
            f", capped by max_wait ({format_period(debounce.max_wait_ms)} from the burst's "
            f"first request at {debounced.get('burst_start')})"
        )
    elif debounce is not None and debounce.delay_ms is not None:
        when += f" (the request's time + delay {format_period(debounce.delay_ms)})"
    else:
        when += " (the request's own run time)"
    replaced = (
        "; its args and meta become the request's"
        if debounce is not None and debounce.replace
        else ""
    )
    lock = "; its lock restarts from now" if debounced.get("lock_restarted") else ""
    changed = _changes(record) or "nothing changed"
    return (
        f"updated (debounced): {why}; it is still waiting, so the request joins its burst "
        f"(begun {debounced.get('burst_start')}) and no second job is made: {when}"
        f"{replaced}{lock}; changes: {changed}; the updated job is published"
    )


def _changes(record: Mapping[str, Any]) -> str:
    changes = record.get("updated_fields") or []
    return ", ".join(
        f"{c.get('field')} {_show(c.get('from'))} → {_show(c.get('to'))}"
        for c in changes
        if isinstance(c, Mapping)
    )


def _show(value: Any) -> str:
    return "(none)" if value is None else orjson.dumps(value).decode()


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
    debounce = policy.get("debounce")
    if isinstance(debounce, Mapping) and not debounce.get("states"):
        parts.append("a duplicate restarts the holder's lock (extend)")
    elif isinstance(debounce, Mapping):
        told = [f"debounce a job in {_list(debounce.get('states'))}"]
        delay = debounce.get("delay") or "(the request's own)"
        told.append(f"delay {delay}")
        if debounce.get("max_wait"):
            told.append(f"max_wait {debounce['max_wait']}")
        if debounce.get("replace"):
            told.append("replace")
        if debounce.get("restart_lock"):
            told.append("restarting the holder's lock")
        parts.append(" ".join(told))
    if policy.get("keep_last_if_active"):
        parts.append("keep the last request while the job runs")
    return ", ".join(parts)


def _state_before(
    job_id: str, prior: Entries, now: int, existing: Any, record: Mapping[str, Any]
) -> str:
    for entry in prior:
        if entry.job_id == job_id:
            return str(effective_state(entry, now))
    return str(record.get("existing_job_state")) if job_id == existing else "its state not carried"


def _policy(record: Mapping[str, Any]) -> UniquePolicy | None:
    raw = record.get("policy")
    policy = UniquePolicy.from_dict(raw) if isinstance(raw, Mapping) else None
    return policy if isinstance(policy, UniquePolicy) else None


def _list(values: Any) -> str:
    return "[" + ", ".join(str(v) for v in values or []) + "]"


def _time(value: Any) -> int | None:
    return parse_rfc3339(value) if isinstance(value, str) else None
