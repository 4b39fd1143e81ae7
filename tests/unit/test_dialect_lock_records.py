"""BullMQ, sidekiq-unique-jobs and River through the processor's own code: the records
written (against the catalogue's schemas), refusals of options the gateway lacks,
replay and explain over a log that holds them."""

from __future__ import annotations

from typing import Any

import jsonschema
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.core import GatewayError, Outcome, Request, decide, parse_request
from gateway.processor.metrics import Metrics
from gateway.stage.parsing import Limits
from gateway.stage.records import Output, Source
from gateway.stage.router import Router
from tests.support import payload, validator
from tests.unit.test_dialect_records import HOUR, INTAKE, T0, Log, schema

MINUTE = 60_000
BULLMQ: dict[str, Any] = {
    "dialect": "bullmq", "queue": "paint", "name": "house", "data": {"color": "white"},
    "opts": {"deduplication": {"id": "house", "ttl": 5000}},
}  # fmt: skip
SIDEKIQ: dict[str, Any] = {
    "dialect": "sidekiq", "class": "SyncWorker", "args": [1], "lock": "until_executed",
    "lock_ttl": 60,
}  # fmt: skip
RIVER: dict[str, Any] = {
    "dialect": "river", "kind": "sort", "args": {"n": 1},
    "unique_opts": {"by_args": True, "by_period": 3600},
}  # fmt: skip
HOUR_START = T0 - T0 % HOUR


def test_every_record_fits_the_catalogue_and_names_its_dialect_and_holder() -> None:
    log = Log()
    jobs: list[dict[str, Any]] = [
        BULLMQ, BULLMQ, SIDEKIQ, SIDEKIQ, {**SIDEKIQ, "on_conflict": "raise"}, RIVER, RIVER,
        {**BULLMQ, "opts": {"jobId": "house-1", "delay": 1000, "priority": 2}},
    ]  # fmt: skip
    records = [log.request(job, T0 + i) for i, job in enumerate(jobs)]
    for record in records:
        validator("decision.json").validate(record)
    for request in log.log:
        jsonschema.validate(orjson.loads(request.value or b""), schema("request.json"))
    for job in log.outputs("jobs"):
        jsonschema.validate(payload(job.value), schema("job.json"))
    assert [r["dialect"] for r in records] == ["bullmq", "bullmq", "sidekiq", "sidekiq",
                                               "sidekiq", "river", "river", "bullmq"]  # fmt: skip
    outcomes = ["accepted", "ignored", "accepted", "ignored", "rejected", "accepted", "ignored",
                "accepted"]  # fmt: skip
    assert [r["outcome"] for r in records] == outcomes
    assert records[0]["holder"] == {
        "kind": "bullmq", "name": "deduplication", "lock_ms": 5000, "since": T0,
        "states": ["scheduled", "available", "pending", "active", "completed", "retryable",
                   "discarded"],
    }  # fmt: skip
    assert (
        records[2]["holder"]["relock"] == "on_start" and records[2]["holder"]["lock_ms"] == 60_000
    )
    assert records[5]["holder"]["since"] == HOUR_START and records[5]["holder"]["period_ms"] == HOUR
    assert records[6]["policy"]["bucket_start"] == HOUR_START
    assert records[4]["error"]["code"] == "SidekiqUniqueJobs::Conflict"
    [rejection] = [payload(o.value) for o in log.outputs("rejections")]
    assert rejection["error"]["code"] == "SidekiqUniqueJobs::Conflict"
    assert payload(log.outputs("jobs")[-1].value)["state"] == "scheduled"


def test_sidekiq_reject_and_reschedule_keep_the_duplicate_on_job_states_never_on_jobs() -> None:
    log = Log()
    reject = {**SIDEKIQ, "args": [7], "on_conflict": "reject"}
    first = log.request(reject, T0)
    dup = log.request(reject, T0 + 1)
    validator("decision.json").validate(dup)
    assert dup["outcome"] == "ignored" and dup["job_id"] == first["job_id"]
    dead = dup["duplicate_job"]
    assert dead["state"] == "discarded" and "duplicate_job" not in first
    assert [payload(o.value)["id"] for o in log.outputs("jobs")] == [first["job_id"]]
    states = {payload(o.value)["id"]: payload(o.value) for o in log.outputs("job_states")}
    assert states[dead["id"]]["state"] == "discarded"
    later = {**SIDEKIQ, "args": [8], "on_conflict": "reschedule", "schedule_in": 2}
    held = log.request(later, T0 + 2)
    kept = log.request(later, T0 + 3)["duplicate_job"]
    assert kept["state"] == "pending"
    log.tick(T0 + 2_103)  # due while the first holds the lock: pending, due 2 s later
    states = {payload(o.value)["id"]: payload(o.value) for o in log.outputs("job_states")}
    assert states[kept["id"]]["state"] == "pending"
    assert states[kept["id"]]["reschedule"]["times"] == 2
    log.event(held["job_id"], held["unique_key"], T0 + 3_000, type="job.started")
    log.event(held["job_id"], held["unique_key"], T0 + 3_001, type="job.completed")
    log.tick(T0 + 4_203)
    enqueued = payload(log.outputs("jobs")[-1].value)
    assert enqueued["id"] == kept["id"] and enqueued["state"] == "available"
    again = log.request(later, T0 + 5_000)
    assert again["outcome"] == "ignored" and again["job_id"] == kept["id"]
    log.replays_identically()


REFUSED = [
    ({**BULLMQ, "opts": {"deduplication": {"id": "h"}, "jobId": "h-1"}},
     "opts.jobId with opts.deduplication"),
    ({**SIDEKIQ, "lock": "while_executing_reject"}, "lock while_executing_reject"),
    ({**SIDEKIQ, "lock": "while_executing", "on_conflict": "reject"},
     "on_conflict reject with lock while_executing"),
    ({**SIDEKIQ, "lock_limit": 3}, "lock_limit above 1"),
    ({**SIDEKIQ, "on_conflict": "replace"}, "on_conflict replace with lock until_executed"),
    ({**SIDEKIQ, "lock": "until_and_while_executing", "on_conflict": "reject"},
     "on_conflict reject with lock until_and_while_executing"),
    ({**RIVER, "unique_opts": {"by_args": True, "by_state": ["available", "pending",
                                                              "running", "scheduled"]}},
     "unique_opts.by_state without retryable"),
]  # fmt: skip


@pytest.mark.parametrize(("job", "option"), REFUSED)
def test_an_option_the_gateway_lacks_is_decided_invalid_naming_it(
    job: dict[str, Any], option: str
) -> None:
    log = Log()
    record = log.request(job, T0)
    validator("decision.json").validate(record)
    assert record["outcome"] == "invalid" and record["dialect"] == job["dialect"]
    assert record["error"]["code"] == "unsupported_option"
    assert record["error"]["message"].startswith(f"{option} is not supported yet: ")
    assert log.outputs("jobs") == []
    # The router refuses it at intake alike, before it reaches a partition.
    out: list[Output] = []
    router = Router(lambda o, s: out.append(o), Metrics(), Limits())
    router.on_record(orjson.dumps(job), None, Source(INTAKE, 0, 0, T0, {}))
    [decision] = [payload(o.value) for o in out if o.role == "decisions"]
    assert decision["error"] == record["error"] and decision["dialect"] == job["dialect"]
    assert [o for o in out if o.role == "requests"] == []


def test_replay_reproduces_the_decisions_of_every_lock() -> None:
    log = Log()
    a = log.request(BULLMQ, T0)
    log.event(a["job_id"], a["unique_key"], T0 + 1, type="job.started")
    log.event(a["job_id"], a["unique_key"], T0 + 2, type="job.completed")
    log.request(BULLMQ, T0 + 3)  # the ttl holds though the job completed
    log.request(BULLMQ, T0 + 5000)
    s = log.request(SIDEKIQ, T0 + 5001)
    log.request(SIDEKIQ, T0 + 5002)
    log.event(s["job_id"], s["unique_key"], T0 + 2 * MINUTE, type="job.started")  # relocks
    log.request(SIDEKIQ, T0 + 2 * MINUTE + 1)
    log.request(RIVER, HOUR_START + HOUR - 1)
    log.request(RIVER, HOUR_START + HOUR)
    log.request(RIVER, HOUR_START + HOUR + 1)
    outcomes = [r["outcome"] for r in log.recorded().values() if r["kind"] == "request"]
    assert outcomes == ["accepted", "ignored", "accepted", "accepted", "ignored", "ignored",
                        "accepted", "accepted", "ignored"]  # fmt: skip
    log.replays_identically()


def test_explain_tells_each_lock_s_rule() -> None:
    def explained(*steps: tuple[dict[str, Any], int]) -> tuple[list[dict[str, Any]], str]:
        log = Log()
        records = [log.request(job, at) for job, at in steps]
        return records, log.explained()

    (a, _), text = explained((BULLMQ, T0), (BULLMQ, T0 + 1))
    assert (
        f"ignored: job {a['job_id']}: it is `available`, which its BullMQ deduplication holds in "
        "for 4.999 s more; the existing job is returned" in text
    )
    (s, _), text = explained((SIDEKIQ, T0), (SIDEKIQ, T0 + 1))
    assert (
        f"ignored: job {s['job_id']}: it is `available`, which its sidekiq-unique-jobs "
        "until_executed holds in for 59.999 s more" in text
    )
    (r, _, _), text = explained(
        (RIVER, HOUR_START + 1), (RIVER, HOUR_START + HOUR - 1), (RIVER, HOUR_START + HOUR)
    )
    assert (
        f"ignored: job {r['job_id']}: it is `available`, which its River unique_opts holds in, "
        "in the by_period bucket from 2026-02-02T02:00:00.000Z" in text
    )
    assert (
        f"job {r['job_id']}: it is in the by_period bucket from 2026-02-02T02:00:00.000Z, this "
        "request's is from 2026-02-02T03:00:00.000Z" in text
    )


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | st.text(max_size=6)
    | st.sampled_from(["until_executed", "until_executing", "until_expired", "log", "raise",
                       "replace", "available", "pending", "running", "scheduled", "retryable",
                       "while_executing", "until_and_while_executing"]),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=4), inner,
                                                                 max_size=4),
    max_leaves=10,
)  # fmt: skip
_options = st.dictionaries(
    st.sampled_from(["id", "ttl", "extend", "replace", "keepLastIfActive", "jobId", "delay",
                     "priority", "attempts", "removeOnComplete", "by_args", "by_period",
                     "by_queue", "by_state", "exclude_kind"]),
    _json, max_size=5,
)  # fmt: skip
_fields = st.dictionaries(
    st.sampled_from(["queue", "name", "data", "class", "args", "at", "retry", "lock",
                     "lock_ttl", "lock_timeout", "lock_limit", "lock_args", "on_conflict",
                     "unique_across_queues", "kind", "priority", "max_attempts",
                     "scheduled_at", "metadata", "pending"]),
    _json, max_size=8,
)  # fmt: skip


@given(st.sampled_from(["bullmq", "sidekiq", "river"]), _fields, _options)
def test_any_request_is_a_request_or_an_error_never_an_exception(
    dialect: str, fields: dict[str, Any], options: dict[str, Any]
) -> None:
    named = {"name": "n", "class": "C", "kind": "k"}
    raw = {"dialect": dialect, **named, **fields}
    raw["opts" if dialect == "bullmq" else "unique_opts"] = (
        {"deduplication": options} if dialect == "bullmq" else options
    )
    result = parse_request(raw)
    assert isinstance(result, Request | GatewayError)
    if isinstance(result, GatewayError):
        assert result.code in ("invalid_request", "unsupported_option")
    elif result.policy is not None:
        assert result.unique_key is not None and len(result.unique_key) == 64
        decision = decide((), result, T0, seed=b"x")
        again = decide(decision.entries, result, T0, seed=b"y")
        assert again.outcome is not Outcome.ACCEPTED or not decision.entries
