"""Every example of the Oban, Zizq and Faktory pages against a real broker and processor,
through HTTP and through the SDK.

Lifecycle steps go through the worker endpoints (fetch, ack, nack, DELETE) over HTTP,
and as job-state events (`publish_event`, which waits for the processor) with the SDK.
Decision time is the broker's clock, so the pages' periods (60 s, 10 minutes, an
hour) are scaled down to seconds; the rules are the same.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from gateway.http.binding import HttpSettings
from gateway.sdk import Client, EnqueueResult, zizq_unique_key
from tests.integration.harness import Processor, apply_topics
from tests.integration.test_http import Served, assert_ojs_headers

pytestmark = pytest.mark.kafka


@dataclass
class Stack:
    http: httpx.Client
    sdk: Client


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    namespace = f"t{uuid.uuid4().hex[:10]}"
    apply_topics(kafka_bootstrap, namespace)
    proc = Processor(
        kafka_bootstrap,
        namespace,
        tmp_path_factory.mktemp("dialects"),
        "1",
        "--commit-interval",
        "0.02",
    ).start()
    settings = HttpSettings(kafka_bootstrap, namespace, decision_timeout=60)
    try:
        with (
            Served(settings) as served,
            httpx.Client(base_url=served.url, timeout=90) as http,
            Client(kafka_bootstrap, namespace) as sdk,
        ):
            warm = http.post("/ojs/v1/jobs", json={"type": "warm.up", "args": []})
            assert warm.status_code == 201, warm.text
            yield Stack(http, sdk)
    finally:
        proc.stop()


class Gateway:
    """One way in: HTTP (status and body) or the SDK (the dialect's answer, no status)."""

    def __init__(self, stack: Stack, via: str) -> None:
        self.stack, self.via = stack, via
        self.keys: dict[str, str] = {}  # job id -> unique key, for the SDK's events

    def send(self, job: dict[str, Any]) -> tuple[int | None, dict[str, Any]]:
        if self.via == "http":
            response = self.stack.http.post("/ojs/v1/jobs", json=job)
            assert_ojs_headers(response)
            body = response.json()
            status: int | None = response.status_code
        else:
            result = self.stack.sdk.enqueue(job, wait=True, timeout=60)
            assert isinstance(result, EnqueueResult)
            body, status = result.answer, None
            if result.unique_key and result.job_id:
                self.keys[result.job_id] = result.unique_key
        if "job" in body and body["job"].get("unique_key"):
            self.keys[body["job"]["id"]] = body["job"]["unique_key"]
        return status, body

    def new(self, job: dict[str, Any], flag: str | None = None) -> dict[str, Any]:
        """Send a job that must be accepted; return it."""
        status, body = self.send(job)
        assert status in (None, 201), body
        if flag is not None:
            assert body[flag] is False, body
        return dict(body["job"])

    def same(self, job: dict[str, Any], flag: str, existing: dict[str, Any]) -> dict[str, Any]:
        """Send a job that must come back as the existing one, flagged."""
        status, body = self.send(job)
        assert status in (None, 200), body
        assert body[flag] is True and body["job"]["id"] == existing["id"], body
        return dict(body["job"])

    def notunique(self, job: dict[str, Any], existing: dict[str, Any]) -> None:
        status, body = self.send(job)
        assert status in (None, 409), body
        assert body["error"]["code"] == "NOTUNIQUE", body
        assert body["error"]["details"]["existing_job_id"] == existing["id"]

    # -- lifecycle: worker endpoints over HTTP, job-state events with the SDK -------

    def start(self, job: dict[str, Any]) -> None:
        """A worker takes the job, polling as workers do: a retry is due after its backoff."""
        deadline = time.monotonic() + 15
        while True:
            if self.via == "http":
                got = self.stack.http.post(
                    "/ojs/v1/workers/fetch", json={"queues": [job["queue"]], "count": 1}
                )
                assert got.status_code == 200, got.text
                taken = [j["id"] for j in got.json()["jobs"]]
                if taken or time.monotonic() > deadline:
                    assert taken == [job["id"]]
                    return
            else:
                ack = self._publish(job, "job.started")
                if str(ack.outcome) != "refused" or time.monotonic() > deadline:
                    assert str(ack.outcome) == "applied", ack
                    return
            time.sleep(0.2)

    def complete(self, job: dict[str, Any]) -> None:
        self._finish(job, "ack", "job.completed")

    def fail(self, job: dict[str, Any]) -> None:
        self._finish(job, "nack", "job.failed", attempt=1)

    def cancel(self, job: dict[str, Any]) -> None:
        if self.via == "http":
            response = self.stack.http.delete(f"/ojs/v1/jobs/{job['id']}")
            assert response.status_code == 200, response.text
        else:
            self._event(job, "job.cancelled")

    def _finish(self, job: dict[str, Any], route: str, event: str, **fields: Any) -> None:
        if self.via == "http":
            response = self.stack.http.post(f"/ojs/v1/workers/{route}", json={"job_id": job["id"]})
            assert response.status_code == 200, response.text
        else:
            self._event(job, event, **fields)

    def _event(self, job: dict[str, Any], event_type: str, **fields: Any) -> None:
        ack = self._publish(job, event_type, **fields)
        assert str(ack.outcome) == "applied", ack

    def _publish(self, job: dict[str, Any], event_type: str, **fields: Any) -> Any:
        return self.stack.sdk.publish_event(
            {"job_id": job["id"], "unique_key": self.keys[job["id"]], "type": event_type, **fields},
            wait=True,
            timeout=60,
        )


@pytest.fixture(params=["http", "sdk"])
def gw(request: pytest.FixtureRequest, stack: Stack) -> Gateway:
    return Gateway(stack, request.param)


def queue() -> str:
    return f"q{uuid.uuid4().hex[:12]}"


def tag() -> str:
    return uuid.uuid4().hex


def at(seconds: float) -> str:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


def past(instant: str, seconds: float) -> None:
    """Until the clock (the broker's too: it runs here) is `seconds` past `instant`: a
    request sent after it is decided after it; how much after does not matter."""
    time.sleep(max(0.0, datetime.fromisoformat(instant).timestamp() + seconds - time.time()))


# --- Oban (Elixir) -------------------------------------------------------------------------


def elixir(q: str, args: dict[str, Any], unique: Any = True, **fields: Any) -> dict[str, Any]:
    return {
        "dialect": "oban",
        "worker": "MyApp.Business",
        "queue": q,
        "args": args,
        "unique": unique,
        **fields,
    }


def test_oban_unique_true_conflicts_even_after_completion(gw: Gateway) -> None:
    q, args = queue(), {"id": tag()}
    first = gw.new(elixir(q, args), "conflicted")
    gw.same(elixir(q, args), "conflicted", first)
    gw.start(first)
    gw.complete(first)
    gw.same(elixir(q, args), "conflicted", first)  # completed is in the default states


def test_oban_the_period_ends_the_conflict(gw: Gateway) -> None:
    q, args = queue(), {"id": tag()}
    first = gw.new(elixir(q, args, {"period": 2}), "conflicted")
    gw.same(elixir(q, args, {"period": 2}), "conflicted", first)
    time.sleep(2.2)
    gw.new(elixir(q, args, {"period": 2}), "conflicted")


def test_oban_cancelled_and_discarded_do_not_count_by_default(gw: Gateway) -> None:
    q, args = queue(), {"id": tag()}
    first = gw.new(elixir(q, args, {"period": "infinity"}), "conflicted")
    gw.cancel(first)
    gw.new(elixir(q, args, {"period": "infinity"}), "conflicted")


def test_oban_the_complex_example(gw: Gateway) -> None:
    url = f"https://example.com/{tag()}"
    unique = {
        "period": [2, "seconds"],
        "timestamp": "scheduled_at",
        "keys": ["url"],
        "states": [
            "scheduled",
            "available",
            "executing",
            "retryable",
            "completed",
            "discarded",
            "cancelled",
        ],
        "fields": ["worker", "args"],
    }
    first = gw.new(elixir(queue(), {"url": url, "user": 1}, unique, scheduled_at=at(3)))
    # Across queues, only the url counts; cancelled still counts.
    other = elixir(queue(), {"url": url, "user": 2}, unique)
    gw.same(other, "conflicted", first)
    gw.cancel(first)
    gw.same(other, "conflicted", first)
    # Two seconds after the scheduled time (not the insertion), the conflict ends.
    time.sleep(5.2)
    gw.new(other, "conflicted")


def test_oban_replace_max_attempts_and_priority_in_scheduled(gw: Gateway) -> None:
    q, args, when = queue(), {"id": tag()}, at(3600)
    first = gw.new(elixir(q, args, scheduled_at=when, max_attempts=3, priority=3))
    replace = {"scheduled": ["max_attempts", "priority"]}
    updated = gw.same(
        elixir(q, args, scheduled_at=when, max_attempts=5, priority=0, replace=replace),
        "conflicted",
        first,
    )
    assert (updated["max_attempts"], updated["priority"]) == (5, 0)
    assert updated["state"] == "scheduled" and updated["args"] == args
    if gw.via == "http":
        shown = gw.stack.http.get(f"/ojs/v1/jobs/{first['id']}").json()["job"]
        assert (shown["max_attempts"], shown["priority"]) == (5, 0)


def test_oban_replace_bumps_the_scheduled_time(gw: Gateway) -> None:
    q, args = queue(), {"id": tag()}
    first = gw.new(elixir(q, args, scheduled_at=at(3600)))
    soon = at(1)
    bumped = gw.same(
        elixir(q, args, scheduled_at=soon, replace={"scheduled": ["scheduled_at"]}),
        "conflicted",
        first,
    )
    assert bumped["scheduled_at"][:19] == soon[:19]
    time.sleep(1.5)
    if gw.via == "http":
        gw.start(first)  # now fetchable


def test_oban_replace_args_while_executing(gw: Gateway) -> None:
    q, key = queue(), tag()
    first = gw.new(elixir(q, {"id": key, "v": "old"}, {"keys": ["id"]}))
    gw.start(first)
    updated = gw.same(
        elixir(q, {"id": key, "v": "new"}, {"keys": ["id"]}, replace={"executing": ["args"]}),
        "conflicted",
        first,
    )
    assert updated["args"] == {"id": key, "v": "new"} and updated["state"] == "active"


# --- Oban (Python) -------------------------------------------------------------------------


def python(q: str, args: dict[str, Any], unique: Any = True, **fields: Any) -> dict[str, Any]:
    return {
        "dialect": "oban-py",
        "worker": "MyWorker",
        "queue": q,
        "args": args,
        "unique": unique,
        **fields,
    }


def test_oban_py_unique_true_holds_while_retained_whatever_the_state(gw: Gateway) -> None:
    q, args = queue(), {"id": tag()}
    first = gw.new(python(q, args), "conflicted")
    gw.start(first)
    gw.fail(first)
    gw.same(python(q, args), "conflicted", first)
    gw.cancel(first)
    gw.same(python(q, args), "conflicted", first)


def test_oban_py_period_from_the_scheduled_time(gw: Gateway) -> None:
    q, held, freed, soon = queue(), {"id": tag()}, {"id": tag()}, at(2)
    first = gw.new(python(q, held, {"period": 1}, scheduled_at=at(3600)))
    gw.new(python(q, freed, {"period": 1}, scheduled_at=soon))
    past(soon, 1)  # past both insertions + 1 s
    # Within its scheduled time + 1 s (an hour away): conflicts.
    gw.same(python(q, held, {"period": 1}), "conflicted", first)
    # Past its scheduled time + 1 s: free.
    gw.new(python(q, freed, {"period": 1}))


def test_oban_py_keys_and_fields_example(gw: Gateway) -> None:
    q, url = queue(), f"https://example.com/{tag()}"
    whole = {"fields": ["worker", "queue", "args"]}
    gw.new(python(q, {"url": url, "user_id": 1}, whole))
    gw.new(python(q, {"url": url, "user_id": 2}, whole))
    by_url = {"keys": ["url"], "fields": ["worker", "queue", "args"]}
    first = gw.new(python(q, {"url": url, "user_id": 1}, by_url))
    gw.same(python(q, {"url": url, "user_id": 2}, by_url), "conflicted", first)


def test_oban_py_group_scheduled_debounces(gw: Gateway) -> None:
    q, args = queue(), {"id": tag()}
    first = gw.new(python(q, args, {"group": "scheduled"}, scheduled_at=at(1.5)))
    gw.same(python(q, args, {"group": "scheduled"}), "conflicted", first)
    time.sleep(2)  # no longer scheduled: available
    gw.new(python(q, args, {"group": "scheduled"}))


def test_oban_py_ten_unique_email_jobs(gw: Gateway) -> None:
    q, run = queue(), tag()
    for i in range(1, 11):
        gw.new(python(q, {"user_id": f"{run}-{i}"}, True, worker="EmailWorker"), "conflicted")


# --- Zizq ----------------------------------------------------------------------------------


def zizq(q: str, key: str, scope: str | None = None, **fields: Any) -> dict[str, Any]:
    job = {
        "dialect": "zizq",
        "type": "send_email",
        "queue": q,
        "payload": {"userId": 42, "template": "welcome"},
        "uniqueKey": key,
        **fields,
    }
    if scope is not None:
        job["uniqueWhile"] = scope
    return job


def test_zizq_the_enqueue_example(gw: Gateway) -> None:
    q, key = queue(), f"send_email:welcome:{tag()}"
    result1 = gw.new(zizq(q, key, "active"), "duplicate")
    result2 = gw.same(zizq(q, key, "active"), "duplicate", result1)
    assert result2["id"] == result1["id"]


def test_zizq_queued_releases_when_taken_and_a_retry_does_not_retake(gw: Gateway) -> None:
    q, key = queue(), tag()
    first = gw.new(zizq(q, key), "duplicate")
    gw.same(zizq(q, key), "duplicate", first)
    gw.start(first)
    second = gw.new(zizq(queue(), key), "duplicate")
    gw.fail(first)  # back to the queue for a retry
    gw.same(zizq(q, key), "duplicate", second)
    gw.start(second)
    gw.new(zizq(queue(), key), "duplicate")


def test_zizq_active_holds_until_completion(gw: Gateway) -> None:
    q, key = queue(), tag()
    first = gw.new(zizq(q, key, "active"), "duplicate")
    gw.start(first)
    gw.same(zizq(q, key, "active"), "duplicate", first)
    gw.complete(first)
    gw.new(zizq(q, key, "active"), "duplicate")


def test_zizq_exists_holds_after_completion(gw: Gateway) -> None:
    q, key = queue(), tag()
    first = gw.new(zizq(q, key, "exists"), "duplicate")
    gw.start(first)
    gw.complete(first)
    gw.same(zizq(q, key, "queued"), "duplicate", first)


def test_zizq_the_first_job_is_retained_then_its_own_scope_rules(gw: Gateway) -> None:
    q, key = queue(), tag()
    first = gw.new(zizq(q, key, "queued"), "duplicate")
    gw.same(zizq(q, key, "active"), "duplicate", first)
    gw.start(first)
    gw.new(zizq(queue(), key, "active"), "duplicate")


def test_zizq_keys_are_global_and_the_helper_ignores_payload_order(gw: Gateway) -> None:
    run = tag()
    payload = {"to": f"{run}@test.com", "subject": "Example"}
    key = zizq_unique_key("example_job", payload)
    first = gw.new(
        {
            "dialect": "zizq",
            "type": "example_job",
            "queue": queue(),
            "payload": payload,
            "uniqueKey": key,
        },
        "duplicate",
    )
    reordered = {"subject": "Example", "to": f"{run}@test.com"}
    other = {
        "dialect": "zizq",
        "type": "push_notification",
        "queue": queue(),
        "payload": reordered,
        "uniqueKey": zizq_unique_key("example_job", reordered),
    }
    gw.same(other, "duplicate", first)


# --- Faktory -------------------------------------------------------------------------------


def faktory(q: str, args: list[Any], unique_for: Any = 2.0, **custom: Any) -> dict[str, Any]:
    extra = {k: custom.pop(k) for k in list(custom) if k == "at"}
    return {
        "dialect": "faktory",
        "jobtype": "sometype",
        "queue": q,
        "args": args,
        "custom": {"unique_for": unique_for, **custom},
        **extra,
    }


def test_faktory_unique_for_then_free(gw: Gateway) -> None:
    q, args = queue(), [1, tag()]
    first = gw.new(faktory(q, args, 2.0))
    gw.notunique(faktory(q, args, 2.0), first)
    gw.new(faktory(queue(), args, 2.0))  # another queue is another job
    time.sleep(2.2)
    gw.new(faktory(q, args, 2.0))


def test_faktory_success_releases_and_a_retry_keeps_the_lock(gw: Gateway) -> None:
    q, args = queue(), [2, tag()]
    first = gw.new(faktory(q, args, 600))
    gw.start(first)
    gw.fail(first)
    gw.notunique(faktory(q, args, 600), first)  # pending retry: still locked
    gw.start(first)  # the retry, once its backoff has passed
    gw.complete(first)
    gw.new(faktory(q, args, 600))


def test_faktory_a_scheduled_delay_extends_the_lock(gw: Gateway) -> None:
    q, held, freed, soon = queue(), [3, tag()], [3, tag()], at(2)
    first = gw.new(faktory(q, held, 1.0, at=at(3600)))
    gw.new(faktory(q, freed, 1.0, at=soon))
    past(soon, 1.0)  # past both enqueues + unique_for
    # Within at + unique_for (an hour away): still locked.
    gw.notunique(faktory(q, held, 1.0), first)
    # Past at + unique_for: free.
    gw.new(faktory(q, freed, 1.0))


def test_faktory_unique_until_start(gw: Gateway) -> None:
    q, args = queue(), [4, tag()]
    first = gw.new(faktory(q, args, 600, unique_until="start"))
    gw.notunique(faktory(q, args, 600), first)
    gw.start(first)
    gw.new(faktory(queue(), args, 600))  # another queue: unrelated
    gw.new(faktory(q, args, 600, unique_until="start"))


def test_faktory_without_unique_for_there_is_no_check(gw: Gateway) -> None:
    q, args = queue(), [5, tag()]
    bypass = {
        "dialect": "faktory",
        "jobtype": "sometype",
        "queue": q,
        "args": args,
        "custom": {"unique_for": None},
    }
    gw.new(bypass)
    gw.new(bypass)


def test_faktory_and_ojs_share_the_fingerprint_space(gw: Gateway) -> None:
    q, args = queue(), [6, tag()]
    ojs = {
        "type": "sometype",
        "queue": q,
        "args": args,
        "unique": {"keys": ["type", "queue", "args"]},
    }
    status, body = gw.send(ojs)
    assert status in (None, 201), body
    gw.notunique(faktory(q, args, 600), body["job"])


# --- the batch endpoint --------------------------------------------------------------------


def test_batch_answers_each_item_in_its_dialect(stack: Stack) -> None:
    q, run = queue(), tag()
    jobs = [
        elixir(q, {"id": run}),
        elixir(q, {"id": run}),
        zizq(q, run),
        zizq(q, run),
        faktory(q, [run]),
        faktory(q, [run]),
    ]
    response = stack.http.post("/ojs/v1/jobs/batch", json={"jobs": jobs})
    # The batch is OJS's (201, jobs and count); each dialect item says what its POST would.
    assert response.status_code == 201, response.text
    assert response.json()["count"] == len(jobs)
    items = response.json()["jobs"]
    assert [i["status"] for i in items] == [201, 200, 201, 200, 201, 409]
    assert [items[0]["conflicted"], items[1]["conflicted"]] == [False, True]
    assert [items[2]["duplicate"], items[3]["duplicate"]] == [False, True]
    assert items[5]["error"]["code"] == "NOTUNIQUE"
    assert items[1]["job"]["id"] == items[0]["job"]["id"]


def test_a_bad_dialect_request_is_refused_with_a_code_and_a_message(gw: Gateway) -> None:
    bad = {"dialect": "oban", "worker": "W", "unique": {"states": ["active"]}}
    if gw.via == "http":
        response = gw.stack.http.post("/ojs/v1/jobs", json=bad)
        assert response.status_code == 400
        error = response.json()["error"]
    else:
        from gateway.sdk import InvalidJob

        with pytest.raises(InvalidJob) as caught:
            gw.stack.sdk.enqueue(bad, wait=True)
        error = {"code": caught.value.code, "message": caught.value.message}
    assert error["code"] == "invalid_request"
    assert 'unique.states has "active" (Oban calls it "executing")' in error["message"]
