"""What the processor writes for dialect requests, checked against the catalogue's schemas,
and replay and explain over a log that holds them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import orjson

from gateway.audit import LogRecord, explain_record
from gateway.core import Request, parse_request
from gateway.core.times import format_rfc3339
from gateway.processor.metrics import Metrics
from gateway.stage.dedup import Dedup
from gateway.stage.parsing import Limits
from gateway.stage.records import Output, Source
from gateway.stage.router import Router
from gateway.wire import JOB_EVENT, KIND_HEADER, TICK, TICK_KEY
from tests.memory_store import Store
from tests.support import payload, validator
from tests.unit.test_replay import replayed

SCHEMAS = Path(__file__).resolve().parents[2] / "topics" / "schemas"
REQ, INTAKE = "ns.gateway.requests", "ns.gateway.intake"
T0 = 1_770_000_000_000
HOUR = 3_600_000


def schema(name: str) -> dict[str, Any]:
    return json.loads((SCHEMAS / name).read_text())


class Log:
    """One partition's log (requests, and job events as the router forwards them)
    through the processor's own code."""

    def __init__(self) -> None:
        self.out: list[tuple[Output, Source]] = []
        self.store = Store()
        self.dedup = Dedup(
            1, lambda o, s: self.out.append((o, s)), Metrics(), Limits(),
            lambda _, key: self.store.state(key),
        )  # fmt: skip
        self.log: list[LogRecord] = []

    def _handle(self, record: LogRecord) -> None:
        self.log.append(record)
        self.store.at(record.timestamp_ms)
        state = self.store.state(record.key or b"")
        self.dedup.on_record(record.value, record.key, record.source, state)

    def request(self, job: dict[str, Any], at: int) -> dict[str, Any]:
        parsed = parse_request(job)
        key = parsed.unique_key if isinstance(parsed, Request) else None
        record = LogRecord(
            REQ, 0, len(self.log), at, key.encode() if key else None, orjson.dumps(job), {}
        )
        self._handle(record)
        return payload(self.outputs("decisions")[-1].value)  # type: ignore[no-any-return]

    def event(self, job_id: str, key: str, at: int, **fields: Any) -> None:
        value = {"job_id": job_id, "unique_key": key, **fields}
        headers = {KIND_HEADER: JOB_EVENT}
        record = LogRecord(REQ, 0, len(self.log), at, key.encode(), orjson.dumps(value), headers)
        self._handle(record)

    def tick(self, at: int) -> None:
        """A tick: time alone, for what it makes due."""
        headers = {KIND_HEADER: TICK}
        self._handle(LogRecord(REQ, 0, len(self.log), at, TICK_KEY, b"", headers))

    def trail(self) -> list[LogRecord]:
        """The audit records the processor wrote, as the decisions topic holds them."""
        return [LogRecord("decisions", 0, i, 0, o.key, o.value)
                for i, o in enumerate(self.outputs("decisions"))]  # fmt: skip

    def replays_identically(self) -> None:
        """Replay verifies every audit record: no difference and no finding."""
        trail = self.trail()
        report = replayed(self.log, trail)
        assert (report.verified, report.differences, report.findings) == (len(trail), [], [])

    def explained(self) -> str:
        """Every audit record the processor wrote, told one by one."""
        told = [explain_record(payload(o.value)) for o in self.outputs("decisions")]
        return "\n".join(line for t in told for line in (t.head, *t.reason))

    def outputs(self, role: str) -> list[Output]:
        return [o for o, _ in self.out if o.role == role]

    def recorded(self) -> dict[tuple[str, int, int], dict[str, Any]]:
        return {
            (s.topic, s.partition, s.offset): payload(o.value)
            for o, s in self.out
            if o.role == "decisions"
        }


def oban(**fields: Any) -> dict[str, Any]:
    return {"dialect": "oban", "worker": "MyApp.Business", "args": {"id": 1}, "unique": True,
            "scheduled_at": format_rfc3339(T0 + HOUR), **fields}  # fmt: skip


def test_every_decision_record_names_its_dialect_and_fits_the_schema() -> None:
    log = Log()
    jobs = [
        {"type": "email.send", "args": [1], "unique": {}},
        oban(),
        {"dialect": "oban-py", "worker": "W", "args": {"a": 1}, "unique": True},
        {"dialect": "zizq", "type": "t", "payload": {}, "uniqueKey": "k", "uniqueWhile": "active"},
        {"dialect": "faktory", "jobtype": "T", "args": [1], "custom": {"unique_for": 60}},
        {"dialect": "faktory", "jobtype": "T", "args": [1], "custom": {"unique_for": 60}},
        {"dialect": "zizq", "type": "t", "uniqueWhile": "sometimes"},
        {"dialect": "resque", "class": "X"},
    ]
    records = [log.request(job, T0 + i) for i, job in enumerate(jobs)]
    decision_schema = validator("decision.json")
    for record in records:
        decision_schema.validate(record)
    assert [r["dialect"] for r in records] == [
        "ojs", "oban", "oban-py", "zizq", "faktory", "faktory", "zizq", "unknown",
    ]  # fmt: skip
    assert [r["outcome"] for r in records[-3:]] == ["rejected", "invalid", "invalid"]
    assert records[4]["holder"]["kind"] == "faktory" and records[3]["holder"]["scope"] == "active"
    [rejection] = [payload(o.value) for o in log.outputs("rejections")][:1]
    assert rejection["error"]["code"] == "NOTUNIQUE"
    for request, record in zip(log.log, records, strict=True):
        if record["outcome"] != "invalid":
            jsonschema.validate(orjson.loads(request.value or b""), schema("request.json"))


def test_an_invalid_request_on_intake_keeps_its_dialect() -> None:
    out: list[Output] = []
    router = Router(lambda o, s: out.append(o), Metrics(), Limits())
    source = Source(INTAKE, 0, 0, T0, {})
    router.on_record(orjson.dumps({"dialect": "oban", "args": {}}), None, source)
    [decision] = [payload(o.value) for o in out if o.role == "decisions"]
    assert decision["dialect"] == "oban" and decision["outcome"] == "invalid"


def test_a_dialect_job_without_a_key_gets_its_id_in_the_request_as_sent() -> None:
    out: list[Output] = []
    router = Router(lambda o, s: out.append(o), Metrics(), Limits())
    job = {"dialect": "faktory", "jobtype": "SomeJob", "args": [1]}  # no unique_for: no key
    router.on_record(orjson.dumps(job), None, Source(INTAKE, 0, 0, T0, {}))
    [forwarded] = [o for o in out if o.role == "requests"]
    sent = payload(forwarded.value)
    assert {k: v for k, v in sent.items() if k != "id"} == job
    assert forwarded.key == sent["id"].encode()


def test_an_update_publishes_the_updated_job_and_records_what_changed() -> None:
    log = Log()
    first = log.request(oban(max_attempts=3, priority=3), T0)
    update = log.request(
        oban(max_attempts=5, priority=0, replace={"scheduled": ["max_attempts", "priority"]}),
        T0 + 1,
    )
    validator("decision.json").validate(update)
    assert update["outcome"] == "updated" and update["job_id"] == first["job_id"]
    assert update["existing_job_id"] == first["job_id"]
    assert update["updated_fields"] == [
        {"field": "max_attempts", "from": 3, "to": 5},
        {"field": "priority", "from": 3, "to": 0},
    ]
    published = [payload(o.value) for o in log.outputs("jobs")]
    assert [j["id"] for j in published] == [first["job_id"]] * 2
    assert published[1]["priority"] == 0 and published[1]["max_attempts"] == 5
    assert published[1]["state"] == "scheduled" and published[1]["dialect"] == "oban"
    for job in published:
        jsonschema.validate(job, schema("job.json"))
    assert log.outputs("rejections") == [] and log.outputs("cancellations") == []


def test_replay_reproduces_dialect_decisions_holders_and_updates() -> None:
    log = Log()
    zizq = {"dialect": "zizq", "type": "t", "payload": {}, "uniqueKey": "k"}
    a = log.request(zizq, T0)
    log.request(zizq, T0 + 1)
    log.event(a["job_id"], a["unique_key"], T0 + 2, type="job.started")
    log.request(zizq, T0 + 3)
    log.event(a["job_id"], a["unique_key"], T0 + 4, type="job.failed", attempt=1)
    log.request(zizq, T0 + 5)
    first = log.request(oban(), T0 + 6)
    log.request(oban(priority=1, replace={"scheduled": ["priority"]}), T0 + 7)
    faktory = {"dialect": "faktory", "jobtype": "T", "args": [], "custom": {"unique_for": 1}}
    log.request(faktory, T0 + 8)
    log.request(faktory, T0 + 9)
    log.request(faktory, T0 + 1008)
    outcomes = [r["outcome"] for r in log.recorded().values() if r["kind"] == "request"]
    assert outcomes == ["accepted", "ignored", "accepted", "ignored", "accepted", "updated",
                        "accepted", "rejected", "accepted"]  # fmt: skip
    log.replays_identically()
    assert first["outcome"] == "accepted"


def test_explain_tells_the_holders_rule_and_the_update() -> None:
    log = Log()
    zizq = {"dialect": "zizq", "type": "t", "payload": {}, "uniqueKey": "k"}
    a = log.request(zizq, T0)
    log.request(zizq, T0 + 1)
    log.event(a["job_id"], a["unique_key"], T0 + 2, type="job.started")
    log.request({**zizq, "uniqueWhile": "active"}, T0 + 3)
    text = log.explained()
    assert f"ignored: job {a['job_id']}: it is `available`, within its Zizq scope `queued`" in text
    assert "the holder's rule decides" in text
    assert f"job {a['job_id']}: its Zizq scope `queued` ended when a worker took it" in text

    log = Log()
    first = log.request(oban(priority=3), T0)
    log.request(oban(priority=0, replace={"scheduled": ["priority"]}), T0 + 1)
    text = log.explained()
    assert f"updated: job {first['job_id']} is `scheduled`, in the states" in text
    assert "the request updates it: priority 3 → 0; the updated job is published" in text
    assert "update scheduled: [priority]" in text
