"""Idempotency keys at the HTTP binding: the key is taken from `Idempotency-Key` (and a
batch's `idempotency_key`), checked before anything is sent, passed to the SDK, and what
the processor answers under it is shown the same way every time."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.core.times import format_rfc3339
from gateway.http import jobs
from gateway.http.answers import for_result
from gateway.http.errors import ApiError
from gateway.sdk import EnqueueResult
from tests.http_requests import bound, call, refusal, request

JOB = {"type": "email.send", "args": [1]}
JOB_ID = "01900000-0000-7000-8000-000000000001"
REUSED = {"code": "idempotency_key_reused", "message": "idempotency key 'k' was used ..."}


def result(outcome: str, request_id: str = "first", **fields: Any) -> EnqueueResult:
    return EnqueueResult.from_record(
        {"outcome": outcome, "request_id": request_id, "unique_key": None, **fields}
    )


class Client:
    """Answers every job with `answers` (in turn), and records the keys it was given."""

    def __init__(self, *answers: EnqueueResult) -> None:
        self.answers = list(answers)
        self.keys: list[str | None] = []

    async def enqueue(self, job: Any, **options: Any) -> EnqueueResult:
        self.keys.append(options.get("idempotency_key"))
        return self.answers[0]

    async def enqueue_many(self, jobs: Any, **options: Any) -> list[EnqueueResult]:
        self.keys.append(options.get("idempotency_key"))
        return self.answers[: len(jobs)]


class View:
    def provisional(self, *_: Any) -> None:
        pass


@pytest.mark.parametrize("key", ["", "x" * 257, "bad\u0007key"])
def test_a_bad_header_is_400_naming_it_before_anything_is_sent(key: str) -> None:
    for handler, body in ((jobs.enqueue, JOB), (jobs.enqueue_batch, {"jobs": [JOB]})):
        answer = refusal(handler, request(body, headers={"Idempotency-Key": key}))
        assert "Idempotency-Key" in answer.message


@pytest.mark.parametrize("key", ["", "x" * 257, 12, "tab\t"])
def test_a_bad_batch_key_is_400_naming_it(key: object) -> None:
    answer = refusal(jobs.enqueue_batch, request({"jobs": [JOB], "idempotency_key": key}))
    assert "idempotency_key" in answer.message


def test_a_batch_key_and_header_that_differ_are_400() -> None:
    req = request({"jobs": [JOB], "idempotency_key": "a"}, headers={"Idempotency-Key": "b"})
    assert "differ" in refusal(jobs.enqueue_batch, req).message


@pytest.mark.parametrize(
    ("headers", "body_key", "sent"),
    [({"Idempotency-Key": "h"}, None, "h"), ({}, "b", "b"),
     ({"Idempotency-Key": "s"}, "s", "s"), ({}, None, None)],
)  # fmt: skip
def test_the_batch_key_is_the_headers_or_the_bodys(headers, body_key, sent) -> None:
    client = Client(result("invalid", error={"code": "invalid_request", "message": "m"}))
    body: dict[str, Any] = {"jobs": [JOB]}
    if body_key is not None:
        body["idempotency_key"] = body_key
    call(jobs.enqueue_batch, request(body, headers=headers), bound(client=client, view=View()))
    assert client.keys == [sent]


def test_a_reused_key_is_422_naming_it() -> None:
    assert for_result(result("invalid", error=REUSED)) == ApiError(
        422, "idempotency_key_reused", REUSED["message"]
    )
    client = Client(result("invalid", error=REUSED))
    req = request(JOB, headers={"Idempotency-Key": "k"})
    answer = call(jobs.enqueue, req, bound(client=client))
    assert isinstance(answer, ApiError) and answer.status == 422
    assert answer.details == {"idempotency_key": "k"}


def test_a_batch_under_a_reused_key_is_422_naming_the_key_and_the_items() -> None:
    ok = result("accepted", job_id=JOB_ID, job={**JOB, "id": JOB_ID, "state": "available"})
    client = Client(ok, result("invalid", error=REUSED))
    req = request({"jobs": [JOB, JOB], "idempotency_key": "k"})
    answer = call(jobs.enqueue_batch, req, bound(client=client, view=View()))
    assert isinstance(answer, ApiError) and answer.status == 422
    assert answer.code == "idempotency_key_reused" and "'k'" in answer.message
    assert answer.details["idempotency_key"] == "k"
    assert [e["index"] for e in answer.details["errors"]] == [1]


def test_a_refusal_given_again_names_the_first_request() -> None:
    rejected = result("rejected", request_id="first", error={"code": "duplicate", "message": "d"})
    req = request(JOB, headers={"Idempotency-Key": "k"})
    answer = call(jobs.enqueue, req, bound(client=Client(rejected)))
    assert isinstance(answer, ApiError) and answer.envelope("second")["error"]["request_id"] == (
        "first"
    )
    # Without a key, the call's own request id, as before.
    answer = call(jobs.enqueue, request(JOB), bound(client=Client(rejected)))
    assert isinstance(answer, ApiError) and answer.envelope("second")["error"]["request_id"] == (
        "second"
    )


def test_under_a_key_a_batch_item_shows_the_state_it_had_when_decided() -> None:
    """A job scheduled a minute after its decision, asked about again later: still
    scheduled in the answer, as it was the first time."""
    decided = 1_700_000_000_000
    job = {**JOB, "id": JOB_ID, "state": "scheduled",
           "scheduled_at": format_rfc3339(decided + 60_000)}  # fmt: skip
    record: dict[str, Any] = {"job_id": JOB_ID, "job": job, "source": {"partition": 0},
                              "decided_at": format_rfc3339(decided)}  # fmt: skip
    client = Client(result("accepted", **record))
    req = request({"jobs": [JOB], "idempotency_key": "k"})
    answer = call(jobs.enqueue_batch, req, bound(client=client, view=View()))
    assert not isinstance(answer, ApiError)
    assert answer.body["jobs"][0]["state"] == "scheduled"
    # Without a key, as now: due, so available.
    answer = call(jobs.enqueue_batch, request({"jobs": [JOB]}), bound(client=client, view=View()))
    assert not isinstance(answer, ApiError) and answer.body["jobs"][0]["state"] == "available"


@pytest.mark.parametrize("header", ["sp-1", "sp-1  ", "  sp-1", "\tsp-1 \t"])
def test_blanks_around_the_header_are_no_part_of_the_key(header: str) -> None:
    """RFC 9110 §5.5: one key however many blanks a client or proxy leaves around it."""
    client = Client(result("accepted", job_id=JOB_ID))
    call(jobs.enqueue, request(JOB, headers={"Idempotency-Key": header}),
         bound(client=client, view=View()))  # fmt: skip
    assert client.keys == ["sp-1"]


def test_a_header_of_blanks_alone_is_400() -> None:
    answer = refusal(jobs.enqueue, request(JOB, headers={"Idempotency-Key": "   "}))
    assert "Idempotency-Key" in answer.message
