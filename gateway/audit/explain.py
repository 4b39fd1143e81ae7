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
its state. Nothing is decided anew. A record sent for a caller says who asked for it
(`by`: the principal, with its role, and the source address), after what it did. A
record written before records carried their state is told from its own fields, and says
so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import orjson

from gateway.audit.moves import (
    event_result,
    explain_event,
    explain_rate,
    explain_tenant,
    job_before,
    job_moves,
    state_rows,
    time_of,
    what_of,
)
from gateway.core import (
    Entry,
    UniquePolicy,
    actor,
    effective_state,
    holds,
    prune,
)
from gateway.core.decision_records import job_shown
from gateway.core.periods import format_period
from gateway.core.successor import SUCCESSOR_OF

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
    by: str | None = None  # who asked for it: `admin:alice from 10.0.0.5` (core.actor.told)


def explain_record(record: Mapping[str, Any]) -> Explained:
    """The explanation of one audit record (a request's decision, or any other record
    that read or changed a route's state), and who asked for it when it says."""
    told = explain_what(record)
    by = actor.told(record.get("by"))
    if by is None:
        return told
    asked = by if by.startswith("from ") else f"by {by}"
    if told.kind == "event":  # `job …: active → cancelled by admin:alice from 10.0.0.5`
        reason = [f"{told.reason[0]} {asked}", *told.reason[1:]]
    else:
        reason = [*told.reason, f"asked {asked}"]
    return replace(told, reason=reason, by=by)


def explain_what(record: Mapping[str, Any]) -> Explained:
    """What one audit record did, and why."""
    kind = str(record.get("kind") or ("request" if "outcome" in record else "unknown"))
    if kind == "request":
        return _request(record)
    what = what_of(record)
    at = record.get("at") if isinstance(record.get("at"), str) else None
    if kind == "rate" or (kind == "event" and "rate" in what and "outcome" not in what):
        return Explained(kind, at, f"{kind} job {what.get('job_id')}", dict(what),
                         [explain_rate(what)])  # fmt: skip
    if kind == "event":
        result = event_result(record)
        head = f"event {what.get('outcome')} job {what.get('job_id')}"
        told = [explain_event(result, job_before(record, result.job_id))]
        if what.get("released"):
            told.append(
                f"job {result.job_id} was the last job its key's successor waited for: "
                f"successor {what['released']} is enqueued"
            )
        return Explained(kind, at, head, dict(what), told)
    if isinstance(what.get("tenant"), Mapping):
        tenant = what["tenant"].get("tenant")
        return Explained(kind, at, f"{kind} tenant {tenant}", dict(what), [explain_tenant(what)])
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
    for row in state_rows(state):
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
    for row in state_rows(record["state"]):
        if row[1] == "entries" and isinstance(row[2], Mapping):
            size = row[2].get("bytes")
            return f"the key's entries ({size} bytes) were too large for the record to carry"
    return "the key's entries in this record are not readable"


def explain_decision(record: Mapping[str, Any], prior: Entries) -> str:
    """Why the decision's outcome followed, given the key's entries before it.

    Whether a job held the key is asked of `core.holds`, the engine's own predicate.
    """
    outcome = record.get("outcome")
    now = time_of(record.get("decided_at")) or 0
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
    job = job_shown(record)
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
