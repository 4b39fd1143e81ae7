"""Replay over synthetic logs: processing order, comparison, and the --policy flip report."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson

from gateway.audit import LogRecord, replay, replay_under_policy
from gateway.core import Entry, Request, UniquePolicy, decide, parse_policy, parse_request
from gateway.processor.parsing import Limits
from gateway.processor.records import decision_record, request_id
from gateway.wire import JOB_EVENT, KIND_HEADER

REQ, INTAKE = "ns.gateway.requests", "ns.gateway.intake"
T0 = 1_760_000_000_000
JOB = {"type": "email.send", "args": {"user_id": 7}, "unique": {"keys": ["type", "args"]}}


def key_of(job: dict[str, Any]) -> str:
    request = parse_request(job)
    assert isinstance(request, Request) and request.unique_key
    return request.unique_key


def rec(topic: str, offset: int, ts: int, value: Any, key: str | None = None) -> LogRecord:
    data = value if isinstance(value, bytes) else orjson.dumps(value)
    return LogRecord(topic, 0, offset, ts, key.encode() if key else None, data, {})


def event(offset: int, ts: int, value: Any, key: str) -> LogRecord:
    """A job event as the router forwards it into `requests`."""
    return LogRecord(
        REQ, 0, offset, ts, key.encode(), orjson.dumps(value), {KIND_HEADER: JOB_EVENT}
    )


def recorded_by_core(requests: list[LogRecord]) -> dict[tuple[str, int, int], dict[str, Any]]:
    """What the processor records for requests of one key with no events between them:
    a duplicate's existing job as its stored record shows it."""
    entries: tuple[Entry, ...] = ()
    jobs: dict[str, dict[str, Any]] = {}
    out = {}
    for r in requests:
        request = parse_request(orjson.loads(r.value or b""))
        decision = decide(entries, request, r.timestamp_ms, seed=r.source.seed)
        entries = decision.entries
        if decision.job is not None:
            jobs[str(decision.job["id"])] = decision.job
        existing = decision.existing
        if existing is not None and existing.job_id in jobs:
            decision = replace(decision, existing=replace(existing, job=jobs[existing.job_id]))
        raw = request.envelope.raw if isinstance(request, Request) else None
        record = decision_record(decision, r.source, request_id(r.source, raw), "ojs")
        out[r.position] = orjson.loads(orjson.dumps(record))
    return out


def test_events_in_the_log_are_applied_where_they_stand():
    key = key_of(JOB)
    first = rec(REQ, 0, T0, JOB, key)
    [recorded_first] = recorded_by_core([first]).values()
    ids = {"job_id": recorded_first["job_id"], "unique_key": key}
    started = event(1, T0 + 1, {**ids, "type": "job.started"}, key)
    done = event(2, T0 + 1, {**ids, "type": "job.completed"}, key)
    # Completed before the second request: under the default states the key is free again.
    second = rec(REQ, 3, T0 + 1, JOB, key)
    recorded = {first.position: recorded_first}
    report = replay([], [first, started, done, second], recorded, 1, Limits())
    assert report.compared == 2
    [missing] = report.differences
    assert (missing.source, missing.replayed) == (second.position, "decision accepted")


def test_a_faithful_log_replays_identically():
    key = key_of(JOB)
    requests = [rec(REQ, i, T0 + i, JOB, key) for i in range(3)]
    recorded = recorded_by_core(requests)
    assert [r["outcome"] for r in recorded.values()] == ["accepted", "rejected", "rejected"]
    report = replay([], requests, recorded, 1, Limits())
    assert (report.compared, report.identical, report.differences) == (3, 3, [])


def test_a_changed_record_is_reported_field_by_field():
    key = key_of(JOB)
    requests = [rec(REQ, i, T0 + i, JOB, key) for i in range(2)]
    recorded = recorded_by_core(requests)
    recorded[(REQ, 0, 1)] = {**recorded[(REQ, 0, 1)], "outcome": "ignored", "error": None}
    report = replay([], requests, recorded, 1, Limits())
    assert (report.identical, report.different) == (1, 1)
    changed = {d.field: (d.recorded, d.replayed) for d in report.differences}
    assert set(changed) == {"outcome", "error"}
    assert changed["outcome"] == ("ignored", "rejected")
    assert changed["error"][0] is None and changed["error"][1]["code"] == "duplicate"
    assert {d.request_id for d in report.differences} == {f"{REQ}/0/1"}


def test_a_missing_record_is_a_difference_and_rerouted_requests_are_not_compared():
    key = key_of(JOB)
    good = rec(REQ, 0, T0, JOB, key)
    misrouted = rec(REQ, 1, T0 + 1, JOB, "0" * 64)  # key is not its fingerprint
    report = replay([], [good, misrouted], {}, 1, Limits())
    assert report.rerouted == 1 and report.compared == 1
    [diff] = report.differences
    assert (diff.field, diff.recorded, diff.replayed) == ("(record)", "none", "decision accepted")


def test_invalid_intake_records_are_replayed_by_the_router():
    bad = rec(INTAKE, 0, T0, b"not json")
    recorded = {(INTAKE, 0, 0): {"outcome": "accepted"}}
    report = replay([bad], [], recorded, 1, Limits())
    changed = {d.field: (d.recorded, d.replayed) for d in report.differences}
    assert changed["outcome"] == ("accepted", "invalid")
    assert changed["error"][1]["code"] == "invalid_request"


def test_compare_from_skips_earlier_decisions_but_replays_them():
    key = key_of(JOB)
    requests = [rec(REQ, i, T0 + i, JOB, key) for i in range(3)]
    recorded = recorded_by_core(requests)
    report = replay([], requests, recorded, 1, Limits(), compare_from_ms=T0 + 1)
    assert (report.compared, report.identical) == (2, 2)  # still rejected: state was rebuilt


def policy(**raw: Any) -> UniquePolicy:
    parsed = parse_policy(raw)
    assert isinstance(parsed, UniquePolicy)
    return parsed


def test_policy_replay_reports_the_decisions_that_flip():
    key = key_of(JOB)
    requests = [rec(REQ, i, T0 + i, JOB, key) for i in range(3)]
    recorded = recorded_by_core(requests)
    report = replay_under_policy(
        requests, recorded, policy(keys=["type", "args"], on_conflict="ignore"), Limits()
    )
    assert report.replayed == 3 and len(report.flips) == 2
    assert report.transitions == {("rejected", "ignored"): 2}
    first_job = recorded[(REQ, 0, 0)]["job_id"]
    assert {f.replayed_job_id for f in report.flips} == {first_job}
    unchanged = replay_under_policy(requests, recorded, policy(keys=["type", "args"]), Limits())
    assert unchanged.flips == []


def test_policy_replay_follows_events_to_the_replayed_jobs():
    key = key_of(JOB)
    first, second = rec(REQ, 0, T0, JOB, key), rec(REQ, 3, T0 + 10, JOB, key)
    recorded = recorded_by_core([first])
    job_id = recorded[first.position]["job_id"]
    ids = {"job_id": job_id, "unique_key": key}
    started = event(1, T0 + 4, {**ids, "type": "job.started"}, key)
    done = event(2, T0 + 5, {**ids, "type": "job.completed"}, key)
    recorded[second.position] = {**recorded[first.position], "outcome": "accepted"}
    # Under keys [type] the key and the job id change; the completion must follow the job.
    report = replay_under_policy(
        [first, started, done, second], recorded, policy(keys=["type"]), Limits()
    )
    assert report.replayed == 2 and report.flips == []
