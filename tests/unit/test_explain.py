"""Explanation texts, each from one audit record the processor's own code wrote."""

from __future__ import annotations

from typing import Any

import orjson

from gateway import wire
from gateway.audit import explain_decision, explain_record
from gateway.audit.explain import NO_STATE, Explained, entries_before
from gateway.core import Request, parse_request
from gateway.core.times import format_rfc3339
from gateway.processor.metrics import Metrics
from gateway.stage.dedup import Dedup
from gateway.stage.parsing import Limits
from gateway.stage.records import Output, Source
from gateway.stage.schedule import LEASES
from gateway.wire import JOB_EVENT, KIND_HEADER, TICK, TICK_KEY
from tests.memory_store import Store
from tests.support import payload

T0 = 1_760_000_000_000


class Log:
    """One partition's log through the processor: each call gives the audit record the
    record it sends left (None: it left none)."""

    def __init__(self) -> None:
        self.out: list[Output] = []
        self.store = Store()
        self.dedup = Dedup(
            1, lambda o, _: self.out.append(o), Metrics(), Limits(),
            lambda _, key: self.store.state(key),
        )  # fmt: skip
        self.offset = 0

    def send(self, value: bytes, key: bytes, at: int, kind: bytes | None = None) -> Any:
        source = Source("requests", 0, self.offset, at, {KIND_HEADER: kind} if kind else {})
        self.offset += 1
        self.store.at(at)
        before = len(self.out)
        self.dedup.on_record(value, key, source, self.store.state(key))
        audits = [payload(o.value) for o in self.out[before:] if o.role == "decisions"]
        assert len(audits) <= 1
        return audits[0] if audits else None

    def request(self, body: dict[str, Any], at: int) -> dict[str, Any]:
        request = parse_request(body)
        route = wire.route(request) if isinstance(request, Request) else None
        route = route or "x"  # an invalid request: it is refused where it lands
        record = self.send(orjson.dumps(body), route.encode(), at)
        assert record["kind"] == "request"
        return record  # type: ignore[no-any-return]

    def event(self, record: dict[str, Any], at: int, **fields: Any) -> dict[str, Any]:
        key = record["unique_key"]
        body = {"job_id": record["job_id"], "unique_key": key, **fields}
        return self.send(orjson.dumps(body), key.encode(), at, JOB_EVENT)  # type: ignore[no-any-return]

    def tick(self, at: int) -> dict[str, Any] | None:
        return self.send(b"", TICK_KEY, at, TICK)  # type: ignore[no-any-return]


def job(on_conflict: str = "reject", **unique: Any) -> dict[str, Any]:
    return {
        "type": "email.send",
        "args": {"user_id": 42},
        "unique": {"keys": ["type", "args"], "on_conflict": on_conflict, **unique},
    }


def told(record: dict[str, Any]) -> Explained:
    return explain_record(orjson.loads(orjson.dumps(record)))


def reason(record: dict[str, Any]) -> str:
    return told(record).reason[0]


def test_accepted_without_existing_jobs():
    record = Log().request(job(), T0)
    assert entries_before(record) == ()
    assert reason(record) == f"accepted: job {record['job_id']}; no job holds this key"


def test_accepted_says_why_each_earlier_job_did_not_count_from_the_entries_it_carries():
    log = Log()
    first = log.request(job(), T0)
    log.event(first, T0 + 1, type="job.started")
    log.event(first, T0 + 2, type="job.completed")
    record = log.request(job(), T0 + 10)
    assert [e.job_id for e in entries_before(record) or ()] == [first["job_id"]]
    assert reason(record) == (
        f"accepted: job {record['job_id']}; no job holds this key against this request: "
        f"job {first['job_id']} is `completed`, not one of the states "
        "[scheduled, available, pending, active, retryable]"
    )
    log = Log()
    log.request(job(period="PT1M"), T0)
    later = log.request(job(period="PT1M"), T0 + 120_000)
    assert "the period (PT1M, counted from its creation at" in reason(later)
    assert reason(later).endswith("had elapsed")


def test_accepted_without_a_policy():
    body = {"type": "email.send", "args": [], "id": "0199eeee-0000-7000-8000-000000000001"}
    record = Log().request(body, T0)
    assert reason(record).endswith("no unique policy, so nothing can duplicate it")


def test_rejected_names_the_job_its_state_and_the_period():
    log = Log()
    first = log.request(job(), T0)
    log.event(first, T0 + 1, type="job.started")
    log.event(first, T0 + 2, type="job.failed", error={"message": "x"})
    record = log.request(job(), T0 + 3)
    explained = told(record)
    assert explained.kind == "request" and explained.summary == {"outcome": "rejected"}
    assert explained.head == f"decision rejected  request {record['request_id']}"
    assert explained.reason[0] == (
        f"rejected: job {first['job_id']} is `retryable`, in the states "
        "[scheduled, available, pending, active, retryable], and there is no period; "
        "the request is refused"
    )
    assert explained.reason[1].startswith("policy: keys [type, args], states [")
    log = Log()
    log.request(job(period="PT5M"), T0)
    record = log.request(job(period="PT5M"), T0 + 1000)
    assert "the period (PT5M, counted from its creation at 2025-10-09T08:53:20.000Z)" in (
        reason(record)
    )


def test_ignored_returns_the_existing_job():
    log = Log()
    first = log.request(job("ignore"), T0)
    text = reason(log.request(job("ignore"), T0 + 1))
    assert text.startswith(f"ignored: job {first['job_id']} is `available`")
    assert text.endswith("the existing job is returned")


def test_replaced_names_each_cancelled_job_and_its_state():
    log = Log()
    first = log.request(job("replace"), T0)
    log.event(first, T0 + 1, type="job.started")
    record = log.request(job("replace"), T0 + 2)
    assert reason(record) == (
        f"replaced: cancelled job {first['job_id']} (active); "
        f"accepted job {record['job_id']} in its place"
    )


def test_replacing_a_terminal_job_supersedes_it():
    log = Log()
    first = log.request(job("replace", states=["completed"]), T0)
    log.event(first, T0 + 1, type="job.started")
    log.event(first, T0 + 2, type="job.completed")
    record = log.request(job("replace", states=["completed"]), T0 + 3)
    assert record["outcome"] == "replaced" and record["cancelled_job_ids"] == []
    assert "terminal: superseded, not cancelled" in reason(record)


def test_invalid_gives_the_error():
    record = Log().request({"type": 5}, T0)
    assert reason(record).startswith("invalid: invalid_request: ")


def test_a_record_without_state_says_so_and_is_told_from_its_fields():
    log = Log()
    first = log.request(job(), T0)
    record = log.request(job(), T0 + 1)
    old = {k: v for k, v in record.items() if k not in ("kind", "state", "prev", "digest")}
    explained = explain_record(old)
    assert explained.kind == "request" and explained.reason[0] == NO_STATE
    assert explained.reason[1] == (
        f"rejected: job {first['job_id']} was `available`; the request is refused"
    )
    assert explain_decision(old, ()) == explained.reason[1]


def test_entries_too_large_to_carry_are_named_not_guessed():
    log = Log()
    first = log.request(job(), T0)
    record = log.request(job(), T0 + 1)
    record["state"]["before"] = [
        [record["unique_key"], "entries", {"digest": "ab" * 16, "bytes": 2_000_000}, None]
    ]
    explained = told(record)
    too_large = "the key's entries (2000000 bytes) were too large for the record to carry"
    assert explained.reason[0] == too_large
    assert explained.reason[1].startswith(f"rejected: job {first['job_id']} was `available`")


def test_events_say_what_they_did_to_the_job_they_found():
    log = Log()
    first = log.request(job(), T0)
    jid = first["job_id"]
    started = told(log.event(first, T0 + 1, type="job.started"))
    assert started.kind == "event" and started.head == f"event applied job {jid}"
    assert started.summary["previous_state"] == "available"
    assert started.reason == [f"job {jid}: available → active (a worker took it)"]
    beat = log.event(first, T0 + 2, type="job.heartbeat")
    assert reason(beat) == f"job {jid}: heartbeat, its lease renewed"
    failed = log.event(first, T0 + 3, type="job.failed", error={"message": "x"})
    # The event's record carries the job as it left it: the next attempt is told.
    assert reason(failed).startswith(f"job {jid}: active → retryable (attempt 1 failed; next ")
    log.event(first, T0 + 60_000, type="job.started")
    gave_up = log.event(first, T0 + 60_001, type="job.failed",
                        error={"message": "x", "retryable": False})  # fmt: skip
    assert reason(gave_up) == (
        f"job {jid}: active → discarded (attempt 2 of 3 failed, the error is not retryable: "
        "the job is discarded and releases the key)"
    )
    refused = log.event(first, T0 + 60_002, type="job.started")
    assert reason(refused).startswith(f"refused: job {jid} is discarded")
    unknown = log.event({**first, "job_id": "other"}, T0 + 60_003, state="active")
    assert reason(unknown) == "ignored: no job other is held under this key"


def test_a_tick_tells_each_attempt_it_ended_by_the_core_s_own_rule():
    log = Log()
    first = log.request(job(), T0)
    jid = first["job_id"]
    log.event(first, T0 + 10, type="job.started", visibility_timeout_ms=1_000)
    at = LEASES.seen_at(T0 + 1_010)
    tick = log.tick(at)
    assert tick is not None
    explained = told(tick)
    assert explained.kind == "tick" and explained.at == format_rfc3339(at)
    assert explained.reason == [
        f"visibility_timeout job {jid}: active → retryable (attempt 1 failed; next attempt "
        f"at {format_rfc3339(at)}): the worker neither finished nor heartbeat the job before "
        "its lease expired"
    ]


def test_a_record_of_another_kind_says_what_it_was_and_what_it_moved():
    record = {"kind": "command", "what": {"queue": "mail", "paused": True},
              "state": {"routes": ["\x00queue\x00mail"], "before": [], "jobs": []}}  # fmt: skip
    explained = explain_record(record)
    assert explained.head == 'command {"queue":"mail","paused":true}'
    assert explained.reason == ["no job moved"]
    jobs = [["j2", "completed", None]]
    tombstone = {"kind": "tick", "at": "2026-01-01T00:00:00Z", "what": None,
                 "state": {"routes": ["k"], "before": [], "jobs": jobs}}  # fmt: skip
    assert explain_record(tombstone).reason == ["job j2: `completed`, deleted: its retention ended"]
