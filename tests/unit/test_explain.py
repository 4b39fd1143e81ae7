"""Explanation texts from one audit record each: the entries it carries, what it says."""

from __future__ import annotations

from typing import Any

import orjson

from gateway.audit import explain_decision, explain_record
from gateway.audit.explain import NO_STATE, entries_before
from gateway.core import Entry, GatewayError, State, decide, parse_event, parse_request
from gateway.core.moves import DEFAULT_VISIBILITY_TIMEOUT_MS
from gateway.core.times import format_rfc3339
from gateway.processor.records import Source, decision_record
from tests.support import apply_event, record_of

T0 = 1_760_000_000_000
REQ = "ns.gateway.requests"
Entries = tuple[Entry, ...]


def job(on_conflict: str = "reject", **unique: Any) -> dict[str, Any]:
    return {
        "type": "email.send",
        "args": {"user_id": 42},
        "unique": {"keys": ["type", "args"], "on_conflict": on_conflict, **unique},
    }


def decided(body: Any, entries: Entries, now: int, offset: int = 0) -> tuple[dict, Entries]:
    """The audit record the processor writes for `body` decided against `entries` (which
    it carries as it read them), and the key's entries after."""
    request = parse_request(body) if not isinstance(body, GatewayError) else body
    source = Source(REQ, 0, offset, now, {})
    decision = decide(entries, request, now, seed=source.seed)
    record = decision_record(decision, source, f"r{offset}", "ojs")
    key = record["unique_key"]
    stored = [e.to_dict() for e in entries] or None
    before = [[key, "entries", stored, None]] if key else []
    written = [[record["job_id"], None, decision.job]] if decision.job else []
    state = {"routes": [key] if key else [], "before": before, "jobs": written, "after": "0"}
    return orjson.loads(orjson.dumps({**record, "kind": "request", "state": state})), (
        decision.entries
    )


def moved(entries: Entries, job_id: str, state: State, at: int) -> Entries:
    return tuple(e.moved_to(state, at) if e.job_id == job_id else e for e in entries)


def reason(record: dict[str, Any]) -> str:
    return explain_record(record).reason[0]


def test_accepted_without_existing_jobs_names_the_states():
    record, _ = decided(job(), (), T0)
    assert reason(record) == f"accepted: job {record['job_id']}; no job holds this key"


def test_accepted_says_why_each_earlier_job_did_not_count_from_the_entries_it_carries():
    first, after = decided(job(), (), T0)
    record, _ = decided(job(), moved(after, first["job_id"], State.COMPLETED, T0 + 5), T0 + 10)
    assert record["outcome"] == "accepted"
    assert reason(record) == (
        f"accepted: job {record['job_id']}; no job holds this key against this request: "
        f"job {first['job_id']} is `completed`, not one of the states "
        "[scheduled, available, pending, active, retryable]"
    )
    periodic = job(period="PT1M")
    first, after = decided(periodic, (), T0)
    later, _ = decided(periodic, after, T0 + 120_000, 1)
    assert "the period (PT1M, counted from its creation at" in reason(later)
    assert reason(later).endswith("had elapsed")


def test_accepted_without_a_policy():
    record, _ = decided({"type": "email.send", "args": []}, (), T0)
    assert entries_before(record) == ()
    assert reason(record).endswith("no unique policy, so nothing can duplicate it")


def test_rejected_names_the_job_its_state_and_the_period():
    first, after = decided(job(), (), T0)
    record, _ = decided(job(), moved(after, first["job_id"], State.RETRYABLE, T0 + 1), T0 + 2)
    told = explain_record(record)
    assert told.kind == "request" and told.summary == {"outcome": "rejected"}
    assert told.head == "decision rejected  request r0"
    assert told.reason[0] == (
        f"rejected: job {first['job_id']} is `retryable`, in the states "
        "[scheduled, available, pending, active, retryable], and there is no period; "
        "the request is refused"
    )
    assert told.reason[1].startswith("policy: keys [type, args], states [")
    periodic = job(period="PT5M")
    first, after = decided(periodic, (), T0)
    record, _ = decided(periodic, after, T0 + 1000, 1)
    assert "the period (PT5M, counted from its creation at 2025-10-09T08:53:20.000Z)" in (
        reason(record)
    )


def test_ignored_returns_the_existing_job():
    first, after = decided(job("ignore"), (), T0)
    text = reason(decided(job("ignore"), after, T0 + 1, 1)[0])
    assert text.startswith(f"ignored: job {first['job_id']} is `available`")
    assert text.endswith("the existing job is returned")


def test_a_resubmitted_job_id_is_explained_as_such():
    body = {**job(states=["completed"]), "id": "0190a000-0000-7000-8000-000000000001"}
    _, after = decided(body, (), T0)
    record, _ = decided(body, after, T0 + 1, 1)
    assert record["outcome"] == "rejected"
    assert "carried the id of job" in reason(record)


def test_replaced_names_each_cancelled_job_and_its_state():
    first, after = decided(job("replace"), (), T0)
    record, _ = decided(job("replace"), moved(after, first["job_id"], State.ACTIVE, T0 + 1), T0 + 2)
    assert reason(record) == (
        f"replaced: cancelled job {first['job_id']} (active); "
        f"accepted job {record['job_id']} in its place"
    )


def test_replacing_a_terminal_job_supersedes_it():
    body = job("replace", states=["completed"])
    first, after = decided(body, (), T0)
    record, _ = decided(body, moved(after, first["job_id"], State.COMPLETED, T0 + 1), T0 + 2)
    assert record["outcome"] == "replaced" and record["cancelled_job_ids"] == []
    assert "terminal: superseded, not cancelled" in reason(record)


def test_invalid_gives_the_error():
    record, _ = decided({"type": 5}, (), T0)
    assert reason(record).startswith("invalid: invalid_request: ")


def test_a_record_without_state_says_so_and_is_told_from_its_fields():
    first, after = decided(job(), (), T0)
    record, _ = decided(job(), after, T0 + 1, 1)
    old = {k: v for k, v in record.items() if k not in ("kind", "state")}
    told = explain_record(old)
    assert told.kind == "request" and told.reason[0] == NO_STATE
    assert told.reason[1] == (
        f"rejected: job {first['job_id']} was `available`; the request is refused"
    )
    assert explain_decision(old, ()) == told.reason[1]


def test_entries_too_large_to_carry_are_named_not_guessed():
    first, after = decided(job(), (), T0)
    record, _ = decided(job(), after, T0 + 1, 1)
    record["state"]["before"] = [[record["unique_key"], "entries",
                                  {"digest": "ab" * 16, "bytes": 2_000_000}, None]]  # fmt: skip
    told = explain_record(record)
    assert (
        told.reason[0] == "the key's entries (2000000 bytes) were too large for the record to carry"
    )
    assert told.reason[1].startswith(f"rejected: job {first['job_id']} was `available`")


def event_record(entries: Entries, body: dict[str, Any], at: int) -> tuple[dict, Entries]:
    """A job event's audit record as the processor writes it: what became of the event and
    the job before and after."""
    event = parse_event(body)
    done = apply_event(entries, event, at)
    result = done.result
    entry = next((e for e in entries if e.job_id == body["job_id"]), None)
    before = None if entry is None else record_of(entry)
    after = None if result.deleted else result.job
    what = {
        "job_id": result.job_id or body["job_id"], "outcome": str(result.outcome),
        "reason": result.reason and str(result.reason),
        "previous_state": result.previous_state and str(result.previous_state),
        "state": result.state and str(result.state),
        "error": None if result.error is None else result.error.to_dict(),
    }  # fmt: skip
    jobs = [[body["job_id"], before, after]] if before is not None else []
    state = {"routes": [body["unique_key"]], "before": [], "jobs": jobs, "after": "0"}
    record = {
        "kind": "event",
        "at": format_rfc3339(at),
        "key": body["unique_key"],
        "what": what,
        "state": state,
        "source": {"topic": REQ, "partition": 0, "offset": 9},
    }
    return orjson.loads(orjson.dumps(record)), done.entries


def test_events_say_what_they_did_to_the_job():
    first, entries = decided(job(), (), T0)
    key, jid = first["unique_key"], first["job_id"]
    started = {"job_id": jid, "unique_key": key, "type": "job.started"}
    record, entries = event_record(entries, started, T0 + 1)
    lease = format_rfc3339(T0 + 1 + DEFAULT_VISIBILITY_TIMEOUT_MS)
    told = explain_record(record)
    assert told.head == f"event applied job {jid}" and told.summary["state"] == "active"
    assert told.reason == [f"job {jid}: available → active (attempt 1, lease until {lease})"]
    failed = {"job_id": jid, "unique_key": key, "type": "job.failed", "attempt": 3,
              "max_attempts": 3}  # fmt: skip
    record, entries = event_record(entries, failed, T0 + 2)
    assert reason(record) == (
        f"job {jid}: active → discarded (attempts exhausted: the job is discarded and "
        "releases the key)"
    )
    record, _ = event_record(entries, started, T0 + 3)
    assert reason(record).startswith(f"refused: job {jid} is discarded")
    unknown = {"job_id": "other", "unique_key": key, "state": "active"}
    assert reason(event_record(entries, unknown, T0 + 4)[0]) == (
        "ignored: no job other is held under this key"
    )


def test_a_tick_tells_each_attempt_it_ended_and_each_record_it_deleted():
    active = {"id": "j1", "state": "active", "attempt": 1, "max_attempts": 3}
    retry = {**active, "state": "retryable", "next_attempt_at": "2026-01-01T00:01:00Z",
             "error": {"type": "visibility_timeout", "message": "the lease ended"}}  # fmt: skip
    done = {"id": "j2", "state": "completed"}
    record = {"kind": "tick", "at": "2026-01-01T00:00:40Z", "key": None, "what": {},
              "state": {"routes": ["k"], "before": [], "jobs": [["j1", active, retry],
                                                             ["j2", done, None]]}}  # fmt: skip
    told = explain_record(record)
    assert told.head == "tick" and told.at == "2026-01-01T00:00:40Z"
    assert told.reason == [
        "visibility_timeout job j1: active → retryable (attempt 1 failed; next attempt at "
        "2026-01-01T00:01:00Z): the lease ended",
        "job j2: `completed`, deleted: its retention ended",
    ]
    command = {"kind": "command", "what": {"queue": "mail", "paused": True},
               "state": {"routes": ["\x00queue\x00mail"], "jobs": []}}  # fmt: skip
    told = explain_record(command)
    assert told.head == 'command {"queue":"mail","paused":true}'
    assert told.reason == ["no job moved"]
