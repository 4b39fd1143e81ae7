"""Keep the last while running (`unique.keep_last_if_active`, BullMQ's
`deduplication.keepLastIfActive`): a request whose key a running job holds becomes the
key's one pending successor, the newest winning, enqueued when the job finishes however
it finishes. Through the processor's own code: records, `jobs` and `job_states`, the
property over any story of requests and job events, replay and explain."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core import GatewayError, parse_request
from gateway.core.times import format_rfc3339
from tests.support import payload, validator
from tests.unit.test_dialect_records import Log, schema

T0 = 1_770_000_000_000
S = 1000


def job(n: int, **unique: Any) -> dict[str, Any]:
    return {"type": "site.deploy", "args": [{"commit": n}],
            "unique": {"keys": ["type"], "keep_last_if_active": True, **unique}}  # fmt: skip


def bullmq(n: int, **dedup: Any) -> dict[str, Any]:
    dedup = {"id": "site", "keepLastIfActive": True, **dedup}
    return {"dialect": "bullmq", "queue": "deploy", "name": "deploy", "data": {"commit": n},
            "opts": {"deduplication": dedup}}  # fmt: skip


class Deploys(Log):
    """One key's log, with what `jobs` and `job_states` say of each job."""

    def states(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for o in self.outputs("job_states"):
            if o.value is not None:
                record = payload(o.value)
                out[record["id"]] = record["state"]
        return out

    def published(self) -> list[dict[str, Any]]:
        return [payload(o.value) for o in self.outputs("jobs")]

    def running(self) -> dict[str, Any]:
        """The key's first job, accepted at T0 and taken by a worker at T0 + 1 s."""
        first = self.request(job(1), T0)
        self.event(first["job_id"], first["unique_key"], T0 + S, type="job.started")
        return first

    def finish(self, decision: dict[str, Any], at: int, how: str) -> None:
        key = decision["unique_key"]
        if how == "completed":
            self.event(decision["job_id"], key, at, type="job.completed")
        elif how == "discarded":
            self.event(decision["job_id"], key, at, type="job.failed",
                       error={"message": "boom", "retryable": False})  # fmt: skip
        else:
            self.event(decision["job_id"], key, at, type="job.cancelled")


@pytest.mark.parametrize("how", ["completed", "discarded", "cancelled"])
def test_the_last_request_while_the_job_runs_is_enqueued_when_it_finishes(how: str) -> None:
    log = Deploys()
    first = log.running()
    kept = log.request(job(2), T0 + 2 * S)
    newer = log.request(job(3), T0 + 3 * S)
    assert (kept["outcome"], newer["outcome"]) == ("accepted", "replaced")
    assert newer["cancelled_job_ids"] == [kept["job_id"]]
    assert newer["existing_job_id"] == kept["existing_job_id"] == first["job_id"]
    assert newer["existing_job_state"] == "active"
    states = log.states()
    assert (states[first["job_id"]], states[kept["job_id"]]) == ("active", "cancelled")
    assert states[newer["job_id"]] == "pending"
    # Off `jobs` while pending: no worker reading `jobs` may take it.
    assert [j["id"] for j in log.published()] == [first["job_id"]]
    log.finish(first, T0 + 10 * S, how)
    states = log.states()
    assert states[first["job_id"]] == how and states[newer["job_id"]] == "available"
    released = log.published()[-1]
    assert released["id"] == newer["job_id"] and released["state"] == "available"
    assert released["args"] == [{"commit": 3}] and released["successor_of"] == first["job_id"]
    assert "route" not in released and "partition" not in released
    jsonschema.validate(released, schema("job.json"))
    for decision in (kept, newer):
        validator("decision.json").validate(decision)


def test_a_retrying_job_keeps_its_successor_waiting_and_a_newer_request_still_replaces_it() -> None:
    log = Deploys()
    first = log.running()
    key = first["unique_key"]
    kept = log.request(job(2), T0 + 2 * S)
    log.event(first["job_id"], key, T0 + 3 * S, type="job.failed", error={"message": "x"})
    assert log.states()[first["job_id"]] == "retryable"
    assert log.states()[kept["job_id"]] == "pending"
    newer = log.request(job(3), T0 + 4 * S)  # the job has not finished: still a successor
    assert newer["outcome"] == "replaced" and log.states()[newer["job_id"]] == "pending"
    log.event(first["job_id"], key, T0 + 60 * S, type="job.started")
    log.event(first["job_id"], key, T0 + 61 * S, type="job.completed")
    assert log.states()[newer["job_id"]] == "available"


def test_a_waiting_job_is_a_duplicate_as_before_and_the_released_one_holds_the_key() -> None:
    log = Deploys()
    first = log.request(job(1), T0)
    again = log.request(job(2), T0 + S)
    assert again["outcome"] == "rejected" and again["existing_job_id"] == first["job_id"]
    log.event(first["job_id"], first["unique_key"], T0 + 2 * S, type="job.started")
    kept = log.request(job(3), T0 + 3 * S)
    log.finish(first, T0 + 4 * S, "completed")
    refused = log.request(job(4), T0 + 5 * S)  # the released successor waits: on_conflict
    assert refused["outcome"] == "rejected" and refused["existing_job_id"] == kept["job_id"]


def test_a_pending_successor_may_only_be_cancelled() -> None:
    log = Deploys()
    first = log.running()
    key = first["unique_key"]
    kept = log.request(job(2), T0 + 2 * S)
    log.event(kept["job_id"], key, T0 + 3 * S, type="job.enqueued")
    assert log.states()[kept["job_id"]] == "pending"
    audit = payload(log.outputs("decisions")[-1].value)
    assert "pending successor" in audit["what"]["error"]["message"]
    log.event(kept["job_id"], key, T0 + 4 * S, type="job.cancelled")
    assert log.states()[kept["job_id"]] == "cancelled"
    log.finish(first, T0 + 5 * S, "completed")  # nothing left to release
    assert [j["id"] for j in log.published()] == [first["job_id"]]


def test_a_successor_s_relative_run_time_counts_from_its_release() -> None:
    log = Deploys()
    first = log.running()
    later = log.request({**job(2), "scheduled_at": "+PT1H"}, T0 + 2 * S)
    assert "scheduled_at" not in later["job"] and later["job"]["successor_delay_ms"] == 3_600_000
    log.finish(first, T0 + 3 * S, "completed")
    [released] = [payload(o.value) for o in log.outputs("jobs")][-1:]
    assert released["state"] == "scheduled" and "successor_delay_ms" not in released
    assert released["scheduled_at"] == format_rfc3339(T0 + 3 * S + 3_600_000)
    fixed = Deploys()
    first = fixed.running()
    at = format_rfc3339(T0 + 10 * S)
    kept = fixed.request({**job(2), "scheduled_at": at}, T0 + 2 * S)  # an instant stays one
    fixed.finish(first, T0 + 3 * S, "completed")
    assert fixed.states()[kept["job_id"]] == "scheduled"
    assert fixed.published()[-1]["scheduled_at"] == at


def test_bullmq_continuous_debounce_runs_the_newest_data_a_delay_after_the_job_finishes() -> None:
    """keepLastIfActive with delay and replace: bursts while the job waits collapse into it,
    bursts while it runs into its successor, which runs the delay after it finishes."""
    log = Deploys()
    opts = {"replace": True, "extend": True, "ttl": 5000}
    first = log.request({**bullmq(1, **opts), "opts": {**bullmq(1, **opts)["opts"],
                                                      "delay": 5000}}, T0)  # fmt: skip
    delayed = {**bullmq(2, **opts), "opts": {**bullmq(2, **opts)["opts"], "delay": 5000}}
    moved = log.request(delayed, T0 + S)
    assert moved["outcome"] == "updated" and moved["job_id"] == first["job_id"]
    log.event(first["job_id"], first["unique_key"], T0 + 7 * S, type="job.started")
    kept = log.request({**delayed, "data": {"commit": 3}}, T0 + 8 * S)
    assert kept["outcome"] == "accepted" and kept["job"]["state"] == "pending"
    log.finish(first, T0 + 20 * S, "completed")
    released = log.published()[-1]
    assert released["id"] == kept["job_id"] and released["state"] == "scheduled"
    assert released["scheduled_at"] == format_rfc3339(T0 + 25 * S)
    again = log.request({**delayed, "data": {"commit": 4}}, T0 + 21 * S)
    assert again["outcome"] == "updated" and again["job_id"] == kept["job_id"]
    assert log.states()[kept["job_id"]] == "scheduled"


def test_the_option_is_refused_unless_true_or_false_and_beside_a_concurrency_limit() -> None:
    error = parse_request(job(1, keep_last_if_active="yes"))
    assert isinstance(error, GatewayError) and error.code == "invalid_request"
    assert error.message == 'unique.keep_last_if_active must be true or false, not "yes"'
    error = parse_request(job(1, concurrency=2))
    assert isinstance(error, GatewayError) and error.code == "invalid_request"
    assert error.message.startswith("unique.keep_last_if_active with unique.concurrency")


def test_bullmq_keep_last_if_active_follows_its_running_job() -> None:
    log = Deploys()
    first = log.request(bullmq(1, ttl=5000), T0)
    assert first["policy"]["keep_last_if_active"] is True
    assert first["policy"]["period_ms"] is None  # BullMQ ignores the ttl then
    log.event(first["job_id"], first["unique_key"], T0 + S, type="job.started")
    log.request(bullmq(2), T0 + 2 * S)
    last = log.request(bullmq(3), T0 + 3 * S)
    log.finish(first, T0 + 4 * S, "completed")
    released = log.published()[-1]
    assert released["id"] == last["job_id"] and released["args"] == {"commit": 3}


def test_a_kept_successor_is_answered_201_with_it_and_in_bullmq_deduplicated() -> None:
    from gateway.http.answers import Answer, for_result
    from gateway.sdk import EnqueueResult

    for raw in (job, bullmq):
        log = Deploys()
        first = log.request(raw(1), T0)
        log.event(first["job_id"], first["unique_key"], T0 + S, type="job.started")
        kept = EnqueueResult.from_record(log.request(raw(2), T0 + 2 * S))
        answer = for_result(kept)
        assert isinstance(answer, Answer) and answer.status == 201
        assert answer.body["job"]["id"] == kept.job_id and answer.body["job"]["state"] == "pending"
        assert kept.existing_job_id == first["job_id"]
        if raw is bullmq:  # BullMQ answers a duplicate of its active job as deduplicated
            assert answer.body["deduplicated"] is True
        else:
            assert "deduplicated" not in answer.body


# --- any story: at most one runs, the newest request is never lost ---------------------------

STEPS = st.lists(
    st.sampled_from(["request", "start", "complete", "fail", "discard", "cancel"]),
    min_size=1, max_size=30,
)  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(steps=STEPS)
def test_any_story_runs_one_job_at_a_time_and_never_loses_the_newest_request(
    steps: list[str],
) -> None:
    log = Deploys()
    at, n, key = T0, 0, None
    newest: str | None = None  # the newest request's job, if it was kept or accepted
    for step in steps:
        at += S
        states = log.states()
        live = [j for j, s in states.items() if s not in ("completed", "cancelled", "discarded")]
        if step == "request":
            n += 1
            decided = log.request(job(n), at)
            key = decided["unique_key"]
            if decided["outcome"] in ("accepted", "replaced"):
                newest = decided["job_id"]
            continue
        target = next((j for j in live if states[j] in ("available", "active")), None)
        if key is None or target is None:
            continue
        if step == "start" and states[target] == "available":
            log.event(target, key, at, type="job.started")
        elif step == "complete":
            log.event(target, key, at, type="job.completed")
        elif step == "fail":
            log.event(target, key, at, type="job.failed", error={"message": "x"})
        elif step == "discard":
            log.event(target, key, at, type="job.failed",
                      error={"message": "x", "retryable": False})  # fmt: skip
        elif step == "cancel":
            log.event(target, key, at, type="job.cancelled")
        states = log.states()
        assert sum(s == "active" for s in states.values()) <= 1
        assert sum(s == "pending" for s in states.values()) <= 1
        assert not any(s == "pending" for s in states.values()) or any(
            s in ("active", "retryable", "available") for s in states.values()
        ), states  # a successor always waits for a live job
    if newest is not None:
        # The newest kept request is a job that ran, runs, waits, or was cancelled by hand.
        assert log.states()[newest] in (
            "pending",
            "available",
            "active",
            "retryable",
            "completed",
            "discarded",
            "cancelled",
        )
    log.replays_identically()


def test_replay_reproduces_it_and_explain_tells_each_step() -> None:
    log = Deploys()
    first = log.running()
    kept = log.request(job(2), T0 + 2 * S)
    newer = log.request(job(3), T0 + 3 * S)
    log.finish(first, T0 + 4 * S, "completed")
    log.replays_identically()
    text = log.explained()
    assert (
        f"accepted (kept as the successor): job {first['job_id']} (active) holds the key and "
        f"has not finished, so the request is kept as job {kept['job_id']}, pending"
    ) in text
    assert f"it replaces the older successor {kept['job_id']}, cancelled" in text
    assert f"successor {newer['job_id']} is enqueued" in text
    assert "keep the last request while the job runs" in text


def test_what_if_follows_the_successor_as_the_processor_does() -> None:
    from gateway.audit import replay_under_policy
    from gateway.audit.whatif import paired
    from gateway.core import UniquePolicy, parse_policy
    from gateway.stage.parsing import Limits

    log = Deploys()
    first = log.running()
    log.request(job(2), T0 + 2 * S)
    log.finish(first, T0 + 3 * S, "completed")
    log.request(job(3), T0 + 4 * S)  # the released successor waits: rejected
    trail = log.trail()

    def what_if(**unique: Any) -> Any:
        policy = parse_policy({"keys": ["type"], **unique})
        assert isinstance(policy, UniquePolicy)
        return replay_under_policy([paired(log.log, trail)], policy, Limits())

    assert what_if(keep_last_if_active=True).flips == []
    # Without it the request while the job runs is refused, and the next one takes the key.
    assert what_if().transitions == {("accepted", "rejected"): 1, ("rejected", "accepted"): 1}


def test_a_log_with_every_unique_behaviour_replays_identically_and_explain_tells_each() -> None:
    """Debounce, keep the last, per-key concurrency and the dialects' forms of them in one
    log: replay verifies every record, and explain gives each behaviour its own reason."""
    log = Deploys()
    first = log.running()
    log.request(job(2), T0 + 2 * S)  # kept as the successor
    reindex = {"type": "search.reindex", "args": [1],
               "unique": {"keys": ["type"], "debounce": {"delay": "PT5S"}}}  # fmt: skip
    log.request(reindex, T0 + 2 * S)
    log.request({**reindex, "args": [2]}, T0 + 3 * S)  # debounced
    report = {"type": "report.build", "args": [], "unique": {"concurrency": 1}}
    a, b = log.request(report, T0 + 3 * S), log.request(report, T0 + 3 * S)
    log.event(a["job_id"], a["unique_key"], T0 + 4 * S, type="job.started")
    log.event(b["job_id"], b["unique_key"], T0 + 4 * S, type="job.started")  # refused
    log.request(bullmq(7), T0 + 5 * S)
    sidekiq = {"dialect": "sidekiq", "class": "Sync", "queue": "default", "args": [1],
               "lock": "while_executing", "lock_limit": 2}  # fmt: skip
    log.request(sidekiq, T0 + 5 * S)
    log.finish(first, T0 + 6 * S, "completed")  # releases the successor
    log.replays_identically()
    text = log.explained()
    for reason in ("kept as the successor", "updated (debounced)",
                   "refused (concurrency limit)", "successor", "is enqueued"):  # fmt: skip
        assert reason in text, reason
