"""Replay over synthetic logs: processing order, comparison, what the trail shows, and the
--policy flip report."""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.audit import LogRecord, replay_under_policy
from gateway.audit.account import Trail
from gateway.audit.findings import TRUNCATED, ReplayReport
from gateway.audit.replay import PartitionReplay, intake_audits, replay_intake
from gateway.audit.trail_store import TrailStore
from gateway.audit.verify import Layout
from gateway.audit.whatif import paired
from gateway.core import Entry, Request, UniquePolicy, decide, parse_policy, parse_request
from gateway.core.limits import MAX_RECORD_BYTES
from gateway.processor.metrics import Metrics
from gateway.stage.context import DELETED, Staged
from gateway.stage.dedup import Dedup
from gateway.stage.kinds import Kind
from gateway.stage.parsing import Limits
from gateway.stage.records import Output, Source, decision_record, record_size, request_id
from gateway.stage.requests import Requests
from gateway.stage.trail import CHAIN_KEY, UNKEYED, Sealer, digest, intact, seal
from gateway.wire import JOB_EVENT, KIND_HEADER, TICK, TICK_KEY
from tests.memory_store import Store
from tests.support import replaces_code

REQ, INTAKE = "ns.gateway.requests", "ns.gateway.intake"
LAYOUT = Layout(REQ, INTAKE, 1)
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
    a duplicate's existing job as its stored record shows it (for the --policy replay)."""
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


def processed(records: list[LogRecord], sealer: Sealer | None = None) -> list[LogRecord]:
    """The audit records the processor's own code writes for one partition's records (sealed
    by `sealer`, else without a key)."""
    store, trail = Store(), list[LogRecord]()

    def emit(output: Output, _: Source) -> None:
        if output.role == "decisions":
            trail.append(LogRecord("decisions", 0, len(trail), 0, output.key, output.value))

    dedup = Dedup(1, emit, Metrics(), Limits(), lambda _, key: store.state(key),
                  sealer=sealer or UNKEYED)  # fmt: skip
    for r in records:
        store.at(r.timestamp_ms)
        dedup.on_record(r.value, r.key, r.source, store.state(r.key or b""))
    return trail


def replayed(records: list[LogRecord], trail: list[LogRecord]) -> ReplayReport:
    report = ReplayReport()
    with tempfile.TemporaryDirectory() as root:
        store = TrailStore(Path(root) / "state")
        PartitionReplay(1, Limits(), store, report).run(records, Trail(0, LAYOUT, report), trail)
        store.close()
    return report


def test_a_faithful_log_replays_identically_events_where_they_stand():
    key = key_of(JOB)
    first = rec(REQ, 0, T0, JOB, key)
    [recorded_first] = recorded_by_core([first]).values()
    ids = {"job_id": recorded_first["job_id"], "unique_key": key}
    started = event(1, T0 + 1, {**ids, "type": "job.started"}, key)
    done = event(2, T0 + 1, {**ids, "type": "job.completed"}, key)
    # Completed before the second request: under the default states the key is free again.
    log = [first, started, done, rec(REQ, 3, T0 + 1, JOB, key), rec(REQ, 4, T0 + 2, JOB, key)]
    trail = processed(log)
    kinds = [(v["kind"], v.get("outcome")) for v in map(orjson.loads, (t.value for t in trail))]
    assert kinds == [("request", "accepted"), ("event", None), ("event", None),
                     ("request", "accepted"), ("request", "rejected")]  # fmt: skip
    report = replayed(log, trail)
    assert (report.verified, report.different, report.findings) == (5, 0, [])


def _resealed(record: LogRecord, **changed: Any) -> LogRecord:
    """The audit record with fields changed and its digest made again: a different decision,
    not an altered record."""
    value = orjson.loads(record.value or b"")
    value.update(changed)
    del value["digest"]
    body = orjson.dumps(value)
    sealed = body[:-1] + b',"digest":"' + digest(body).encode() + b'"}'
    return replace(record, value=sealed)


def test_a_different_decision_is_reported_field_by_field_and_an_altered_one_as_altered():
    key = key_of(JOB)
    log = [rec(REQ, i, T0 + i, JOB, key) for i in range(3)]
    trail = processed(log)
    different = [trail[0], _resealed(trail[1], outcome="ignored", error=None), trail[2]]
    report = replayed(log, different)
    assert (report.verified, report.different) == (2, 1)
    changed = {d.field: (d.recorded, d.replayed) for d in report.differences}
    assert set(changed) == {"outcome", "error", "digest"}
    assert changed["outcome"] == ("ignored", "rejected")
    assert changed["error"][0] is None and changed["error"][1]["code"] == "duplicate"
    # The chain shows it too: the record after it names the digest it had.
    assert [(f.kind, f.position) for f in report.findings] == [("missing", trail[2].position)]
    altered = (trail[1].value or b"").replace(b'"outcome":"rejected"', b'"outcome":"ignored"')
    report = replayed(log, [trail[0], replace(trail[1], value=altered), trail[2]])
    assert report.differences == []
    assert [(f.kind, f.position) for f in report.findings] == [("altered", trail[1].position)]


def test_rerouted_requests_are_counted_not_compared():
    key = key_of(JOB)
    good = rec(REQ, 0, T0, JOB, key)
    misrouted = rec(REQ, 1, T0 + 1, JOB, "0" * 64)  # key is not its fingerprint
    log = [good, misrouted]
    report = replayed(log, processed(log))
    assert (report.rerouted, report.verified, report.findings) == (1, 1, [])


def test_invalid_intake_records_are_replayed_by_the_router():
    bad = rec(INTAKE, 0, T0, b"not json")
    accepted = LogRecord("decisions", 0, 0, 0, None, orjson.dumps(
        {"outcome": "accepted", "source": {"topic": INTAKE, "partition": 0, "offset": 0}}
    ))  # fmt: skip
    report = ReplayReport()
    replay_intake([bad], intake_audits([accepted], INTAKE, 0), Limits(), report)
    changed = {d.field: (d.recorded, d.replayed) for d in report.differences}
    assert changed["outcome"] == ("accepted", "invalid")
    assert changed["error"][1]["code"] == "invalid_request"


def beside(
    records: list[LogRecord], recorded: dict[tuple[str, int, int], dict[str, Any]]
) -> list[tuple[LogRecord, Mapping[str, Any] | None]]:
    """One partition's records, each beside its recorded decision, through `paired`."""
    decided = [r for r in records if r.position in recorded]
    decisions = [
        LogRecord("decisions", 0, n, 0, None, orjson.dumps({
            **recorded[r.position],
            "source": {"topic": r.topic, "partition": r.partition, "offset": r.offset},
        }))
        for n, r in enumerate(decided)
    ]  # fmt: skip
    return list(paired(records, decisions))


def policy(**raw: Any) -> UniquePolicy:
    parsed = parse_policy(raw)
    assert isinstance(parsed, UniquePolicy)
    return parsed


def test_policy_replay_reports_the_decisions_that_flip():
    key = key_of(JOB)
    requests = [rec(REQ, i, T0 + i, JOB, key) for i in range(3)]
    recorded = recorded_by_core(requests)
    report = replay_under_policy(
        [beside(requests, recorded)], policy(keys=["type", "args"], on_conflict="ignore"), Limits()
    )
    assert report.replayed == 3 and len(report.flips) == 2
    assert report.transitions == {("rejected", "ignored"): 2}
    first_job = recorded[(REQ, 0, 0)]["job_id"]
    assert {f.replayed_job_id for f in report.flips} == {first_job}
    unchanged = replay_under_policy(
        [beside(requests, recorded)], policy(keys=["type", "args"]), Limits()
    )
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
        [beside([first, started, done, second], recorded)], policy(keys=["type"]), Limits()
    )
    assert report.replayed == 2 and report.flips == []


@replaces_code
def test_a_record_the_processor_failed_on_keeps_the_chain_and_replays(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = Requests._record_jobs

    def fail_on_the_second(self: Requests, decision: Any, *rest: Any) -> None:
        if decision.decided_at == T0 + 1:
            raise ValueError("the handling failed")
        real(self, decision, *rest)

    monkeypatch.setattr(Requests, "_record_jobs", fail_on_the_second)
    jobs = [{**JOB, "args": {"user_id": i}} for i in range(3)]
    log = [rec(REQ, i, T0 + i, job, key_of(job)) for i, job in enumerate(jobs)]
    trail = processed(log)
    failed = orjson.loads(trail[1].value or b"")
    assert failed["outcome"] == "invalid" and failed["error"]["code"] == "internal"
    assert failed["state"]["before"] == [] and failed["prev"] == orjson.loads(
        trail[0].value or b"")["digest"]  # fmt: skip
    report = replayed(log, trail)
    assert (report.verified, report.different, report.findings) == (3, 0, [])


def test_an_audit_record_too_large_to_carry_its_state_is_truncated_and_still_fits() -> None:
    staged: dict[bytes, Staged] = {}
    for n in range(20_000):  # a tick that touched twenty thousand routes
        state = Staged(Store().state(b"r"))
        state.reads[f"job/{n:036d}"] = (b'{"state":"completed","pad":"' + b"x" * 80 + b'"}', None)
        state.writes[f"job/{n:036d}"] = (DELETED, None)
        staged[f"route-{n:060d}".encode()] = state
    head = Staged(Store().state(CHAIN_KEY))
    tick = Source(REQ, 0, 7, T0, {KIND_HEADER: TICK})
    outputs: list[Output] = []
    seal(outputs, staged, head, tick, TICK_KEY, Kind.TICK, None, [], {})
    [audit] = outputs
    record = orjson.loads(audit.value or b"")
    assert record_size(audit) < MAX_RECORD_BYTES and intact(audit.value or b"")
    assert record["state"]["truncated"] == {
        "routes": 20_000, "before": 20_000, "jobs": 20_000, "due": 0,
    }  # fmt: skip
    assert record["state"]["routes"] == [] and record["state"]["before"] == []


def test_after_a_truncated_audit_record_a_replay_starts_afresh_with_no_false_finding() -> None:
    key = key_of(JOB)
    log = [rec(REQ, i, T0 + i, JOB, key) for i in range(3)]
    trail = processed(log)
    second = orjson.loads(trail[1].value or b"")
    counts = {n: len(second["state"][n]) for n in ("routes", "before", "jobs", "due")}
    truncated = {"routes": [], "before": [], "jobs": [], "due": [], "truncated": counts,
                 "after": second["state"]["after"]}  # fmt: skip
    shortened = _resealed(trail[1], state=truncated)
    after = _resealed(trail[2], prev=orjson.loads(shortened.value or b"")["digest"])
    report = replayed(log, [trail[0], shortened, after])
    assert (report.verified, report.different, report.findings) == (2, 0, [])
    assert report.unverifiable == {TRUNCATED: 1}
