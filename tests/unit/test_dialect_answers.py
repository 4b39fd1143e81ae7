"""Answers per dialect (SDK `EnqueueResult.answer`, HTTP status and body), the Zizq key helper."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.core import Decision, GatewayError, Request, decide, parse_request
from gateway.core.updates import updated_record
from gateway.http.answers import Answer, for_client_error, for_result
from gateway.http.errors import ApiError
from gateway.sdk import EnqueueResult, InvalidJob, zizq_unique_key
from gateway.sdk.prepare import prepare
from gateway.stage.records import Source, decision_record

T0 = 1_770_000_000_000


def decisions(*jobs: dict[str, Any]) -> list[tuple[Decision, EnqueueResult]]:
    """The decisions of `jobs`, sent one after another on one key, and the SDK's results."""
    entries: tuple[Any, ...] = ()
    out = []
    for i, job in enumerate(jobs):
        request = parse_request(job)
        assert isinstance(request, Request)
        decision = decide(entries, request, T0 + i, seed=b"%d" % i)
        entries = decision.entries
        source = Source("requests", 0, i, T0 + i, {})
        record = decision_record(decision, source, f"r{i}", request.dialect)
        out.append((decision, EnqueueResult.from_record(record)))
    return out


def results(*jobs: dict[str, Any]) -> list[EnqueueResult]:
    """The results the SDK would return for `jobs`, sent one after another on one key."""
    return [result for _, result in decisions(*jobs)]


OBAN = {"dialect": "oban", "worker": "W", "args": {"id": 1}, "unique": True}
ZIZQ = {"dialect": "zizq", "type": "send_email", "payload": {"userId": 42}, "uniqueKey": "k"}
FAKTORY = {"dialect": "faktory", "jobtype": "T", "args": [1], "custom": {"unique_for": 600}}


@pytest.mark.parametrize("dialect", ["oban", "oban-py"])
def test_oban_answers_conflicted_false_then_true_never_an_error(dialect: str) -> None:
    new, again = results({**OBAN, "dialect": dialect}, {**OBAN, "dialect": dialect})
    assert new.answer == {"job": new.job, "conflicted": False} and not new.conflicted
    assert again.answer == {"job": again.job, "conflicted": True} and again.conflicted
    assert again.job is not None and again.job["id"] == new.job_id
    assert again.job["args"] == {"id": 1}  # the whole existing job
    first, second = for_result(new), for_result(again)
    assert isinstance(first, Answer) and first.status == 201
    assert first.headers["Location"] == f"/ojs/v1/jobs/{new.job_id}"
    assert isinstance(second, Answer) and second.status == 200
    assert second.body["conflicted"] is True


def test_oban_an_update_answers_the_updated_job_conflicted() -> None:
    at = "2026-03-01T00:00:00Z"
    (_, new), (decision, updated) = decisions(
        {**OBAN, "scheduled_at": at, "priority": 5},
        {**OBAN, "scheduled_at": at, "priority": 0, "replace": {"scheduled": ["priority"]}},
    )
    assert updated.outcome == "updated" and updated.job_id == new.job_id
    answer = for_result(updated)
    assert isinstance(answer, Answer) and answer.status == 200
    assert answer.body["conflicted"] is True and answer.body["job"]["priority"] == 0
    # The record job_states carries (so GET shows it): the stored job, its fields updated,
    # what the update does not touch kept.
    assert new.job is not None
    stored = {**new.job, "route": "k", "attempt": 0}
    shown = updated_record(stored, decision)
    assert shown["priority"] == 0 and shown["state"] == "scheduled"
    assert shown["route"] == "k" and shown["id"] == new.job_id


def test_zizq_answers_201_duplicate_false_then_200_duplicate_true() -> None:
    new, again = results(ZIZQ, ZIZQ)
    first, second = for_result(new), for_result(again)
    assert isinstance(first, Answer) and first.status == 201
    assert first.body == {"job": new.job, "duplicate": False}
    assert isinstance(second, Answer) and second.status == 200
    assert second.body["duplicate"] is True and second.body["job"]["id"] == new.job_id


def test_faktory_answers_409_notunique_naming_the_existing_job() -> None:
    new, again = results(FAKTORY, FAKTORY)
    first, second = for_result(new), for_result(again)
    assert isinstance(first, Answer) and first.status == 201 and first.body == {"job": new.job}
    assert isinstance(second, ApiError) and second.status == 409
    assert second.code == "NOTUNIQUE" and second.details["existing_job_id"] == new.job_id
    assert again.answer["error"]["code"] == "NOTUNIQUE"


def test_ojs_answers_are_unchanged() -> None:
    job = {"type": "email.send", "args": [1], "unique": {"on_conflict": "ignore"}}
    new, again = results(job, job)
    assert new.answer == {"job": new.job}
    assert again.answer == {"job": again.job, "deduplicated": True}
    rejected = results({**job, "unique": {}}, {**job, "unique": {}})[1]
    answer = for_result(rejected)
    assert isinstance(answer, ApiError) and (answer.status, answer.code) == (409, "duplicate")


def test_zizq_unique_key_is_independent_of_payload_key_order() -> None:
    a = zizq_unique_key("example_job", {"to": "test@test.com", "subject": "Example"})
    b = zizq_unique_key("example_job", {"subject": "Example", "to": "test@test.com"})
    c = zizq_unique_key("example_job", {"to": "other@test.com", "subject": "Example"})
    assert a == b != c
    assert a.startswith("example_job:") and len(a) == len("example_job:") + 64
    assert zizq_unique_key("other_job", {"to": "test@test.com", "subject": "Example"}) != a


def test_zizq_unique_key_from_a_subset_of_fields() -> None:
    one = zizq_unique_key("example_job", {"to": "test@test.com", "subject": "Example"}, "to")
    two = zizq_unique_key("example_job", {"to": "test@test.com", "subject": "Other"}, "to")
    three = zizq_unique_key("example_job", {"to": "other@test.com", "subject": "Example"}, "to")
    assert one == two != three
    # The same as hashing the subset itself: the page's "sugar" equivalence.
    assert one == zizq_unique_key("example_job", {"to": "test@test.com"})
    with pytest.raises(KeyError, match="userId"):
        zizq_unique_key("example_job", {"to": "x"}, "userId")
    with pytest.raises(ValueError):
        zizq_unique_key("example_job", {"n": 2**60})


def test_a_helper_key_makes_zizq_requests_collide_whatever_the_order() -> None:
    payload = {"userId": 42, "action": "welcome"}
    reordered = {"action": "welcome", "userId": 42}
    key = zizq_unique_key("send_email", payload, "userId", "action")
    first, second = results(
        {**ZIZQ, "payload": payload, "uniqueKey": key},
        {**ZIZQ, "payload": reordered, "uniqueKey": zizq_unique_key("send_email", reordered)},
    )
    assert first.answer["duplicate"] is False and second.answer["duplicate"] is True


BULLMQ = {"dialect": "bullmq", "queue": "paint", "name": "house", "data": {"color": "white"},
          "opts": {"deduplication": {"id": "house"}}}  # fmt: skip
SIDEKIQ = {"dialect": "sidekiq", "class": "W", "args": [1], "lock": "until_executed"}
RIVER = {"dialect": "river", "kind": "sort", "args": {"n": 1}, "unique_opts": {"by_args": True}}


@pytest.mark.parametrize(
    ("job", "flag"), [(BULLMQ, "deduplicated"), (RIVER, "unique_skipped_as_duplicate")]
)
def test_bullmq_and_river_answer_the_job_and_a_flag_never_an_error(
    job: dict[str, Any], flag: str
) -> None:
    new, again = results(job, job)
    assert new.answer == {"job": new.job, flag: False}
    assert again.answer == {"job": again.job, flag: True}
    assert again.job is not None and again.job["id"] == new.job_id
    first, second = for_result(new), for_result(again)
    assert isinstance(first, Answer) and first.status == 201
    assert isinstance(second, Answer) and second.status == 200 and second.body[flag] is True


def test_sidekiq_answers_the_jid_or_null_when_the_job_was_not_pushed() -> None:
    new, again = results(SIDEKIQ, SIDEKIQ)
    assert new.answer == {"jid": new.job_id, "job": new.job}
    assert again.answer == {"jid": None, "job": again.job}
    assert again.job is not None and again.job["id"] == new.job_id
    first, second = for_result(new), for_result(again)
    assert isinstance(first, Answer) and first.status == 201 and first.body["jid"] == new.job_id
    assert isinstance(second, Answer) and second.status == 200 and second.body["jid"] is None


def test_sidekiq_raise_answers_409_with_the_gem_s_conflict() -> None:
    raising = {**SIDEKIQ, "on_conflict": "raise"}
    new, again = results(raising, raising)
    answer = for_result(again)
    assert isinstance(answer, ApiError) and answer.status == 409
    assert answer.code == "SidekiqUniqueJobs::Conflict"
    assert answer.details["existing_job_id"] == new.job_id
    assert again.answer["error"]["code"] == "SidekiqUniqueJobs::Conflict"


def test_sidekiq_replace_answers_the_new_jid() -> None:
    replacing = {**SIDEKIQ, "lock": "until_executing", "on_conflict": "replace"}
    new, replaced = results(replacing, replacing)
    assert replaced.outcome == "replaced" and replaced.job_id != new.job_id
    assert replaced.answer == {"jid": replaced.job_id, "job": replaced.job}
    answer = for_result(replaced)
    assert isinstance(answer, Answer) and answer.status == 201


def test_an_option_the_gateway_lacks_answers_400_naming_it() -> None:
    job = {**BULLMQ, "opts": {"deduplication": {"id": "house"}, "jobId": "house-1"}}
    decision = decide((), parse_request(job), T0, seed=b"0")
    record = decision_record(decision, Source("requests", 0, 0, T0, {}), "r0", "bullmq")
    refused = EnqueueResult.from_record(record)
    answer = for_result(refused)
    assert isinstance(answer, ApiError) and (answer.status, answer.code) == (
        400, "unsupported_option",
    )  # fmt: skip
    assert answer.message.startswith("opts.jobId with opts.deduplication is not supported yet")
    assert refused.answer["error"]["code"] == "unsupported_option"


@pytest.mark.parametrize(
    "job",
    [
        {**BULLMQ, "opts": {"deduplication": {"id": "h"}, "jobId": "h-1"}},
        {**SIDEKIQ, "lock_limit": 2},
        {**RIVER, "unique_opts": {"by_args": True, "by_state": ["available", "pending",
                                                                  "running", "scheduled"]}},
    ],
)  # fmt: skip
def test_the_sdk_refuses_an_option_the_gateway_lacks_before_sending_it(
    job: dict[str, Any],
) -> None:
    refused = prepare(job)
    assert isinstance(refused, GatewayError) and refused.code == "unsupported_option"
    answer = for_client_error(InvalidJob(refused))
    assert (answer.status, answer.code, answer.message) == (400, refused.code, refused.message)
    assert "is not supported yet" in answer.message
