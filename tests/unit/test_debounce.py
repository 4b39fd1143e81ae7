"""Trailing debounce (`unique.debounce`, an OJS extension): a burst of requests for one key
becomes one job, run `delay` after the burst's last request (at most `max_wait` after its
first), with the newest payload under `replace`; a job that no longer waits is a duplicate
as before. The engine's rule (hypothesis over bursts), the policy's form and refusals, and
the processor's own code: records, the job moved on `jobs` and `job_states`, replay and
explain."""

from __future__ import annotations

from typing import Any

import jsonschema
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core import (
    Entry,
    GatewayError,
    Outcome,
    Request,
    State,
    UniquePolicy,
    decide,
    parse_request,
)
from gateway.core.times import format_rfc3339
from tests.support import payload, validator
from tests.unit.test_dialect_records import Log, schema
from tests.unit.test_dialects import Story, ids

T0 = 1_770_000_000_000
S = 1000


def job(n: int, delay: str | int = "PT5S", max_wait: str | None = "PT1M", replace: bool = True,
        **unique: Any) -> dict[str, Any]:  # fmt: skip
    debounce: dict[str, Any] = {"delay": delay, "replace": replace}
    if max_wait is not None:
        debounce["max_wait"] = max_wait
    return {"type": "search.reindex", "args": [{"doc": "d1", "rev": n}], "meta": {"n": n},
            "unique": {"keys": ["type"], "debounce": debounce, **unique}}  # fmt: skip


def parsed(raw: dict[str, Any]) -> Request:
    request = parse_request(raw)
    assert isinstance(request, Request), request
    return request


class Burst:
    """One key's entries and job records, as the processor keeps them."""

    def __init__(self) -> None:
        self.entries: tuple[Entry, ...] = ()
        self.records: dict[str, dict[str, Any]] = {}
        self.n = 0

    def submit(self, raw: dict[str, Any], at: int) -> Any:
        self.n += 1
        decision = decide(self.entries, parsed(raw), at, seed=b"%d" % self.n,
                          records=self.records)  # fmt: skip
        self.entries = decision.entries
        if decision.job is not None:
            self.records[str(decision.job["id"])] = dict(decision.job)
        return decision


# --- the engine's rule -----------------------------------------------------------------------


@settings(max_examples=300)
@given(
    gaps=st.lists(st.integers(0, 20 * S), min_size=1, max_size=25),
    delay_s=st.integers(1, 10),
    max_wait_s=st.one_of(st.none(), st.integers(10, 90)),
)
def test_a_burst_is_one_job_run_after_its_last_request_capped_with_the_newest_payload(
    gaps: list[int], delay_s: int, max_wait_s: int | None
) -> None:
    burst = Burst()
    times = [T0]
    for gap in gaps:
        times.append(times[-1] + gap)
    max_wait = None if max_wait_s is None else f"PT{max_wait_s}S"
    decisions = [burst.submit(job(i, f"PT{delay_s}S", max_wait), at)
                 for i, at in enumerate(times)]  # fmt: skip
    assert decisions[0].outcome is Outcome.ACCEPTED
    assert {d.outcome for d in decisions[1:]} <= {Outcome.UPDATED}
    assert len(burst.entries) == 1 and len(burst.records) == 1  # exactly one job
    run_at = times[-1] + delay_s * S
    if max_wait_s is not None:
        run_at = min(run_at, times[0] + max_wait_s * S)
    [entry] = burst.entries
    [record] = burst.records.values()
    assert entry.scheduled_at == run_at
    assert record["scheduled_at"] == format_rfc3339(run_at)
    assert record["args"] == [{"doc": "d1", "rev": len(times) - 1}]  # the newest payload
    assert record["meta"] == {"n": len(times) - 1}
    assert record["state"] == ("scheduled" if run_at > times[-1] else "available")
    last = decisions[-1]
    if len(decisions) > 1:
        assert last.debounced is not None and last.debounced.run_at == run_at
        assert last.debounced.burst_start == T0
        capped = max_wait_s is not None and times[-1] + delay_s * S > T0 + max_wait_s * S
        assert last.debounced.capped is capped


def test_the_first_request_runs_a_delay_after_it() -> None:
    first = Burst().submit(job(0), T0)
    assert first.outcome is Outcome.ACCEPTED and first.job is not None
    assert (first.job["state"], first.job["scheduled_at"]) == (
        "scheduled",
        format_rfc3339(T0 + 5 * S),
    )


def test_without_replace_the_job_keeps_its_first_payload_and_only_moves() -> None:
    burst = Burst()
    burst.submit(job(0, replace=False), T0)
    moved = burst.submit(job(1, replace=False), T0 + 2 * S)
    assert moved.outcome is Outcome.UPDATED
    assert [c.field for c in moved.changes] == ["scheduled_at"]
    assert moved.changes[0].before == format_rfc3339(T0 + 5 * S)
    assert moved.changes[0].after == format_rfc3339(T0 + 7 * S)
    assert moved.job is not None and moved.job["args"] == [{"doc": "d1", "rev": 0}]


def test_changes_name_what_the_update_carries() -> None:
    burst = Burst()
    burst.submit(job(0), T0)
    moved = burst.submit(job(1), T0 + 1 * S)
    assert [(c.field, c.before, c.after) for c in moved.changes] == [
        ("args", [{"doc": "d1", "rev": 0}], [{"doc": "d1", "rev": 1}]),
        ("meta", {"n": 0}, {"n": 1}),
        ("scheduled_at", format_rfc3339(T0 + 5 * S), format_rfc3339(T0 + 6 * S)),
    ]


@pytest.mark.parametrize(
    ("events", "state"),
    [
        ([{"type": "job.started"}], "active"),
        ([{"type": "job.failed", "error": {"message": "x"}}], "retryable"),
    ],
)
def test_a_job_that_no_longer_waits_is_a_duplicate_under_the_policy(
    events: list[dict[str, Any]], state: str
) -> None:
    story = Story()
    first = story.submit(job(0, on_conflict="reject"), T0)
    at = T0 + 6 * S
    for event in events:
        story.event(ids(first), at, **event)
        at += 1
    refused = story.submit(job(1, on_conflict="reject"), at)
    assert refused.outcome is Outcome.REJECTED and refused.debounced is None
    assert str(refused.existing_state) == state
    ignored = story.submit(job(2, on_conflict="ignore"), at + 1)
    assert ignored.outcome is Outcome.IGNORED and ids(ignored) == ids(first)


def test_a_finished_job_releases_the_key_and_the_next_request_starts_a_new_burst() -> None:
    burst = Burst()
    first = burst.submit(job(0), T0)
    burst.entries = tuple(e.moved_to(State.COMPLETED, T0 + 7 * S) for e in burst.entries)
    second = burst.submit(job(1), T0 + 8 * S)
    assert second.outcome is Outcome.ACCEPTED and second.job is not None
    assert second.job["id"] != first.job["id"]
    assert second.job["scheduled_at"] == format_rfc3339(T0 + 13 * S)


# --- the policy's form -----------------------------------------------------------------------


def test_the_policy_is_canonical_and_reads_back_from_its_record() -> None:
    policy = parsed(job(0, delay=5, max_wait="PT60S")).policy
    assert policy is not None and policy.debounce is not None
    assert (policy.debounce.delay_ms, policy.debounce.max_wait_ms) == (5000, 60_000)
    shown = policy.to_dict()
    assert shown["debounce"] == {
        "delay": "PT5S", "delay_ms": 5000, "max_wait": "PT1M", "max_wait_ms": 60_000,
        "replace": True, "states": ["scheduled", "available"], "restart_lock": False,
    }  # fmt: skip
    assert UniquePolicy.from_dict(shown) == policy
    # A policy without a debounce keeps the record it had.
    assert "debounce" not in parsed({"type": "a", "args": [], "unique": {}}).policy.to_dict()  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("debounce", "message"),
    [
        ("PT5S", "unique.debounce must be an object"),
        ({}, "unique.debounce.delay is required"),
        ({"max_wait": "PT1M"}, "unique.debounce.delay is required"),
        ({"delay": "soon"}, 'unique.debounce.delay "soon" is not an ISO 8601 duration'),
        ({"delay": "P1M"}, 'unique.debounce.delay "P1M" uses years or months'),
        ({"delay": -5}, "unique.debounce.delay must be positive"),
        ({"delay": "PT5S", "max_wait": "PT1S"}, "unique.debounce.max_wait (PT1S) must be at least"),
        ({"delay": "PT5S", "max_wait": True}, "unique.debounce.max_wait must be a string or an"),
        ({"delay": "PT5S", "replace": "yes"}, "unique.debounce.replace must be true or false"),
        ({"delay": "PT5S", "leading": True}, "unique.debounce.leading is not a debounce field"),
    ],
)
def test_a_malformed_debounce_is_refused_naming_the_field(debounce: Any, message: str) -> None:
    raw = {"type": "a", "args": [], "unique": {"debounce": debounce}}
    error = parse_request(raw)
    assert isinstance(error, GatewayError) and error.code == "invalid_request"
    assert error.message.startswith(message), error.message
    nested = parse_request({"type": "a", "args": [], "options": {"unique": {"debounce": debounce}}})
    assert isinstance(nested, GatewayError)
    assert nested.message.startswith(message.replace("unique.", "options.unique.", 1))


def test_a_scheduled_time_with_a_debounce_is_refused() -> None:
    for when in ("+PT5S", "2026-02-02T00:00:00Z"):
        error = parse_request({**job(0), "scheduled_at": when})
        assert isinstance(error, GatewayError) and error.code == "invalid_request"
        assert error.message.startswith("unique.debounce sets the job's run time")


# --- through the processor's own code -------------------------------------------------------


def test_the_processor_moves_the_job_publishes_it_and_records_the_update() -> None:
    log = Log()
    first = log.request(job(0), T0)
    moved = log.request(job(1), T0 + 2 * S)
    validator("decision.json").validate(moved)
    assert moved["outcome"] == "updated" and moved["job_id"] == first["job_id"]
    assert moved["debounce"] == {
        "run_at": format_rfc3339(T0 + 7 * S), "burst_start": format_rfc3339(T0),
        "capped": False, "lock_restarted": False,
    }  # fmt: skip
    assert moved["updated_fields"] == [
        {"field": "args", "from": [{"doc": "d1", "rev": 0}], "to": [{"doc": "d1", "rev": 1}]},
        {"field": "meta", "from": {"n": 0}, "to": {"n": 1}},
        {"field": "scheduled_at", "from": format_rfc3339(T0 + 5 * S),
         "to": format_rfc3339(T0 + 7 * S)},
    ]  # fmt: skip
    published = [payload(o.value) for o in log.outputs("jobs")]
    states = [payload(o.value) for o in log.outputs("job_states")]
    assert [j["id"] for j in published] == [first["job_id"]] * 2
    assert published[1]["args"] == [{"doc": "d1", "rev": 1}] and published[1]["meta"] == {"n": 1}
    assert states[-1]["scheduled_at"] == format_rfc3339(T0 + 7 * S)
    assert states[-1]["created_at"] == format_rfc3339(T0)  # the same job, its stamps kept
    assert states[-1]["state"] == "scheduled" and states[-1]["args"] == published[1]["args"]
    for record in (*published, *states):
        jsonschema.validate({k: v for k, v in record.items() if k not in ("route", "partition")},
                            schema("job.json"))  # fmt: skip
    assert log.outputs("rejections") == [] and log.outputs("cancellations") == []


def test_replay_reproduces_a_burst_and_explain_tells_the_debounce() -> None:
    log = Log()
    first = log.request(job(0), T0)
    for i, at in enumerate((1, 3, 50, 59, 70), start=1):
        log.request(job(i), T0 + at * S)
    log.event(first["job_id"], first["unique_key"], T0 + 71 * S, type="job.started")
    log.request(job(9, on_conflict="ignore"), T0 + 72 * S)  # active: a duplicate
    bq = {"dialect": "bullmq", "queue": "paint", "name": "house", "data": {"c": 1},
          "opts": {"deduplication": {"id": "c", "ttl": 5000, "extend": True, "replace": True},
                   "delay": 5000}}  # fmt: skip
    log.request(bq, T0)
    log.request({**bq, "data": {"c": 2}}, T0 + 1 * S)
    records = [r for r in log.recorded().values() if r["kind"] == "request"]
    assert [r["outcome"] for r in records] == ["accepted", *["updated"] * 5, "ignored",
                                               "accepted", "updated"]  # fmt: skip
    assert [r["debounce"]["capped"] for r in records[1:6]] == [False, False, False, True, True]
    for record in records:
        validator("decision.json").validate(record)
    log.replays_identically()
    text = log.explained()
    assert (
        f"updated (debounced): job {first['job_id']} is `scheduled`, in the states [scheduled, "
        "available, pending, active, retryable], and there is no period; it is still waiting, "
        "so the request joins its burst (begun 2026-02-02T02:40:00.000Z) and no second job is "
        "made: its run time moves to 2026-02-02T02:40:06.000Z (the request's time + delay PT5S)"
        "; its args and meta become the request's; changes: args"
    ) in text
    assert (
        "its run time moves to 2026-02-02T02:41:00.000Z, capped by max_wait (PT1M from the "
        "burst's first request at 2026-02-02T02:40:00.000Z)"
    ) in text
    assert f"ignored: job {first['job_id']} is `active`" in text
    assert "debounce a job in [scheduled, available] delay PT5S max_wait PT1M replace" in text
    assert (
        "debounce a job in [scheduled] delay (the request's own) replace restarting the "
        "holder's lock" in text
    )
    assert (
        "(the request's own run time); its args and meta become the request's; its lock "
        'restarts from now; changes: args {"c":1} → {"c":2}' in text
    )


def test_the_processor_s_records_of_a_burst_decide_identically_after_a_crash() -> None:
    """Deciding the same log twice from the start (a successor after a crash re-decides
    from the committed state) writes the same bytes: the rule reads event time only."""

    def run() -> list[bytes]:
        log = Log()
        for i, at in enumerate((0, 1, 3, 8, 20)):
            log.request(job(i), T0 + at * S)
        return [o.value or b"" for o in log.outputs("decisions")] + [
            o.value or b"" for o in log.outputs("job_states")
        ]

    first, second = run(), run()
    assert first == second and len({orjson.loads(v)["id"] for v in first[5:]}) == 1


# --- answers and the worked example in docs/rules.md ----------------------------------------


def test_a_debounce_is_answered_200_with_the_moved_job_and_deduplicated() -> None:
    from gateway.http.answers import Answer, batch_item, for_result
    from tests.unit.test_dialect_answers import results

    new, moved = results(job(0), job(1))
    answer = for_result(moved)
    assert isinstance(answer, Answer) and answer.status == 200
    assert answer.body == {"job": moved.job, "deduplicated": True}
    assert moved.job is not None and moved.job["id"] == new.job_id
    assert moved.job["args"] == [{"doc": "d1", "rev": 1}]
    assert batch_item(moved, "r")["deduplicated"] is True
    assert batch_item(new, "r")["deduplicated"] is False
    bq = {"dialect": "bullmq", "queue": "paint", "name": "house", "data": {"c": 1},
          "opts": {"deduplication": {"id": "c", "replace": True}, "delay": 5000}}  # fmt: skip
    _, replaced = results(bq, {**bq, "data": {"c": 2}})
    assert replaced.answer == {"job": replaced.job, "deduplicated": True}


def test_the_worked_example_of_the_rules_page() -> None:
    story = Story()
    at = {n: T0 + n * S for n in (0, 2, 6, 58, 61, 62, 63, 70, 71)}
    first = story.submit(job(1), at[0])
    steps = [story.submit(job(n), at[t]) for n, t in ((2, 2), (3, 6), (4, 58), (5, 61))]
    assert [s.outcome for s in steps] == [Outcome.UPDATED] * 4
    assert [s.job["scheduled_at"] for s in steps] == [  # type: ignore[index]
        format_rfc3339(T0 + n * S) for n in (7, 11, 60, 60)
    ]
    assert [s.debounced.capped for s in steps] == [False, False, True, True]  # type: ignore[union-attr]
    assert steps[-1].job["state"] == "available"  # type: ignore[index]
    story.event(ids(first), at[62], type="job.started")
    assert story.submit(job(6), at[63]).outcome is Outcome.REJECTED
    story.event(ids(first), at[70], type="job.completed")
    again = story.submit(job(7), at[71])
    assert again.outcome is Outcome.ACCEPTED and ids(again) != ids(first)
    assert again.job["scheduled_at"] == format_rfc3339(T0 + 76 * S)  # type: ignore[index]


def test_what_if_a_debounce_policy_turns_a_burst_s_duplicates_into_updates() -> None:
    from gateway.audit import replay_under_policy
    from gateway.core import parse_policy
    from gateway.stage.parsing import Limits
    from tests.unit.test_replay import JOB, REQ, beside, key_of, rec, recorded_by_core

    key = key_of(JOB)
    requests = [rec(REQ, i, T0 + i * S, JOB, key) for i in range(4)]
    recorded = recorded_by_core(requests)
    assert [r["outcome"] for r in recorded.values()] == ["accepted"] + ["rejected"] * 3
    debounce = parse_policy({"keys": ["type", "args"], "debounce": {"delay": "PT5S"}})
    assert isinstance(debounce, UniquePolicy)
    report = replay_under_policy([beside(requests, recorded)], debounce, Limits())
    assert report.transitions == {("rejected", "updated"): 3}
    assert {f.replayed_job_id for f in report.flips} == {recorded[(REQ, 0, 0)]["job_id"]}
