"""Explanation texts for each outcome and event, from decision records the core produced."""

from __future__ import annotations

from typing import Any

import orjson

from gateway.audit import HistoryItem, explain_decision, explain_event, explain_history
from gateway.audit.explain import after_decision, find_key
from gateway.core import (
    Entry,
    GatewayError,
    State,
    decide,
    parse_event,
    parse_request,
)
from gateway.core.moves import DEFAULT_VISIBILITY_TIMEOUT_MS
from gateway.core.times import format_rfc3339
from gateway.processor.records import Source, decision_record
from tests.support import apply_event

T0 = 1_760_000_000_000
REQ = "ns.gateway.requests"


def job(on_conflict: str = "reject", **unique: Any) -> dict[str, Any]:
    return {
        "type": "email.send",
        "args": {"user_id": 42},
        "unique": {"keys": ["type", "args"], "on_conflict": on_conflict, **unique},
    }


def decided(body: Any, entries: tuple[Entry, ...], now: int, offset: int = 0) -> dict[str, Any]:
    """The audit record the processor writes for `body` decided against `entries`."""
    request = parse_request(body) if not isinstance(body, GatewayError) else body
    source = Source(REQ, 0, offset, now, {})
    decision = decide(entries, request, now, seed=source.seed)
    return orjson.loads(orjson.dumps(decision_record(decision, source, f"r{offset}", "ojs")))


def held(record: dict[str, Any], state: State, at: int) -> tuple[Entry, ...]:
    return tuple(
        e.moved_to(state, at) if e.job_id == record["job_id"] else e
        for e in after_decision((), record)
    )


def test_accepted_without_existing_jobs_names_the_states():
    record = decided(job(), (), T0)
    assert (
        explain_decision(record, ()) == f"accepted: job {record['job_id']}; no job holds this key"
    )


def test_accepted_says_why_each_earlier_job_did_not_count():
    first = decided(job(), (), T0)
    prior = held(first, State.COMPLETED, T0 + 5)
    record = decided(job(), prior, T0 + 10, 1)
    assert record["outcome"] == "accepted"
    assert explain_decision(record, prior) == (
        f"accepted: job {record['job_id']}; no job holds this key against this request: "
        f"job {first['job_id']} is `completed`, not one of the states "
        "[scheduled, available, pending, active, retryable]"
    )
    periodic = job(period="PT1M")
    first = decided(periodic, (), T0)
    later = decided(periodic, after_decision((), first), T0 + 120_000, 1)
    assert "the period (PT1M, counted from its creation at" in explain_decision(
        later, after_decision((), first)
    )
    assert explain_decision(later, after_decision((), first)).endswith("had elapsed")


def test_accepted_without_a_policy():
    record = decided({"type": "email.send", "args": []}, (), T0)
    assert explain_decision(record, ()).endswith("no unique policy, so nothing can duplicate it")


def test_rejected_names_the_job_its_state_and_the_period():
    first = decided(job(), (), T0)
    prior = held(first, State.RETRYABLE, T0 + 1)
    record = decided(job(), prior, T0 + 2, 1)
    assert explain_decision(record, prior) == (
        f"rejected: job {first['job_id']} is `retryable`, in the states "
        "[scheduled, available, pending, active, retryable], and there is no period; "
        "the request is refused"
    )
    periodic = job(period="PT5M")
    first = decided(periodic, (), T0)
    record = decided(periodic, after_decision((), first), T0 + 1000, 1)
    assert "the period (PT5M, counted from its creation at 2025-10-09T08:53:20.000Z)" in (
        explain_decision(record, after_decision((), first))
    )


def test_ignored_returns_the_existing_job():
    first = decided(job("ignore"), (), T0)
    record = decided(job("ignore"), after_decision((), first), T0 + 1, 1)
    text = explain_decision(record, after_decision((), first))
    assert text.startswith(f"ignored: job {first['job_id']} is `available`")
    assert text.endswith("the existing job is returned")


def test_a_resubmitted_job_id_is_explained_as_such():
    first = decided(
        {**job(states=["completed"]), "id": "0190a000-0000-7000-8000-000000000001"}, (), T0
    )
    record = decided(
        {**job(states=["completed"]), "id": first["job_id"]}, after_decision((), first), T0 + 1, 1
    )
    assert record["outcome"] == "rejected"
    assert "carried the id of job" in explain_decision(record, after_decision((), first))


def test_replaced_names_each_cancelled_job_and_its_state():
    first = decided(job("replace"), (), T0)
    prior = held(first, State.ACTIVE, T0 + 1)
    record = decided(job("replace"), prior, T0 + 2, 1)
    assert explain_decision(record, prior) == (
        f"replaced: cancelled job {first['job_id']} (active); "
        f"accepted job {record['job_id']} in its place"
    )


def test_replacing_a_terminal_job_supersedes_it():
    body = job("replace", states=["completed"])
    first = decided(body, (), T0)
    prior = held(first, State.COMPLETED, T0 + 1)
    record = decided(body, prior, T0 + 2, 1)
    assert record["outcome"] == "replaced" and record["cancelled_job_ids"] == []
    assert "terminal: superseded, not cancelled" in explain_decision(record, prior)


def test_invalid_gives_the_error():
    record = decided({"type": 5}, (), T0)
    assert explain_decision(record, ()).startswith("invalid: invalid_request: ")


def test_events_say_what_they_did_to_the_job():
    first = decided(job(), (), T0)
    entries = after_decision((), first)
    key, jid = first["unique_key"], first["job_id"]
    started = parse_event({"job_id": jid, "unique_key": key, "type": "job.started"})
    result = apply_event(entries, started, T0 + 1)
    lease = format_rfc3339(T0 + 1 + DEFAULT_VISIBILITY_TIMEOUT_MS)
    assert explain_event(started, result) == (
        f"job {jid}: available → active (attempt 1, lease until {lease})"
    )
    failed = parse_event(
        {"job_id": jid, "unique_key": key, "type": "job.failed", "attempt": 3, "max_attempts": 3}
    )
    done = apply_event(result.entries, failed, T0 + 2)
    assert explain_event(failed, done) == (
        f"job {jid}: active → discarded (attempts exhausted: the job is discarded and "
        "releases the key)"
    )
    again = apply_event(done.entries, started, T0 + 3)
    assert explain_event(started, again).endswith("or job.deleted leaves it")
    unknown = parse_event({"job_id": "other", "unique_key": key, "state": "active"})
    assert "no job other is held" in explain_event(unknown, apply_event((), unknown, T0))


def test_history_is_explained_in_order_with_the_state_each_item_left():
    first = decided(job(), (), T0)
    key, jid = first["unique_key"], first["job_id"]
    started = {"job_id": jid, "unique_key": key, "type": "job.started"}
    completed = {"job_id": jid, "unique_key": key, "type": "job.completed"}
    second = decided(job(), held(first, State.COMPLETED, T0 + 5), T0 + 10, 1)
    items = [
        HistoryItem("decision", T0, (REQ, 0, 0), first),
        HistoryItem("event", T0 + 4, ("ns.gateway.job-events", 0, 0), completed),
        HistoryItem("event", T0 + 4, ("ns.gateway.job-events", 0, 1), started),
        HistoryItem("event", T0 + 5, ("ns.gateway.job-events", 0, 2), completed),
        HistoryItem("decision", T0 + 10, (REQ, 0, 1), second),
    ]
    lines = list(explain_history(items))
    assert lines[0].endswith(f"decision accepted  request r0  ({REQ}[0]@0)")
    assert lines[2].strip().startswith("policy: keys [type, args], states [")
    assert lines[4].strip().startswith(f"refused: job {jid} is available; ack")
    assert lines[6].strip().startswith(f"job {jid}: available → active (attempt 1, lease until")
    assert "event job.completed job" in lines[7]
    assert lines[8].strip() == f"job {jid}: active → completed"
    assert f"job {jid} is `completed`, not one of the states" in lines[10]
    assert find_key(items, jid.upper()) == key and find_key(items, "nope") is None
