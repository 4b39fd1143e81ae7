"""Cancel and the worker routes against a real processor: uniqueness follows each transition."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from gateway.core.times import parse_rfc3339
from gateway.http.binding import HttpSettings
from tests.integration.harness import Processor, Reader, apply_topics
from tests.integration.test_http import Served, assert_ojs_headers
from tests.integration.test_http_admin import eventually

pytestmark = pytest.mark.kafka


@dataclass
class Where:
    bootstrap: str
    namespace: str
    cancellations: str


@pytest.fixture(scope="module")
def where(kafka_bootstrap: str) -> Where:
    """The module's topics, in a namespace of their own."""
    namespace = f"t{uuid.uuid4().hex[:10]}"
    cat = apply_topics(kafka_bootstrap, namespace)
    return Where(kafka_bootstrap, namespace, cat.name("cancellations"))


@pytest.fixture(scope="module")
def http(where: Where, tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    proc = Processor(
        where.bootstrap, where.namespace, tmp_path_factory.mktemp("http-workers"), "1",
        "--commit-interval", "0.02",
    ).start()  # fmt: skip
    settings = HttpSettings(where.bootstrap, where.namespace, decision_timeout=60)
    try:
        with Served(settings) as served, httpx.Client(base_url=served.url, timeout=90) as client:
            warm = client.post("/ojs/v1/jobs", json={"type": "warm.up", "args": []})
            assert warm.status_code == 201, warm.text
            yield client
    finally:
        proc.stop()


def job(queue: str, states: list[str] | None = None, max_attempts: int = 3) -> dict[str, Any]:
    unique: dict[str, Any] = {"keys": ["type", "args"]}
    if states is not None:
        unique["states"] = states
    return {
        "type": "work.item", "queue": queue, "args": {"n": uuid.uuid4().hex},
        "max_attempts": max_attempts, "unique": unique,
    }  # fmt: skip


def a_queue() -> str:
    return f"q{uuid.uuid4().hex[:12]}"


def fetch(http: httpx.Client, queue: str, count: int = 1) -> list[dict[str, Any]]:
    response = http.post("/ojs/v1/workers/fetch", json={"queues": [queue], "count": count})
    assert response.status_code == 200, response.text
    return list(response.json()["jobs"])


def post(http: httpx.Client, body: dict[str, Any]) -> httpx.Response:
    """Enqueue right after a worker call: its transition must already count."""
    return http.post("/ojs/v1/jobs", json=body)


def test_under_states_available_a_fetched_job_admits_a_new_one(http: httpx.Client):
    queue = a_queue()
    first = job(queue, states=["available"])
    created = http.post("/ojs/v1/jobs", json=first).json()["job"]
    assert http.post("/ojs/v1/jobs", json=first).status_code == 409
    [fetched] = fetch(http, queue)
    assert fetched["id"] == created["id"] and fetched["state"] == "active"
    assert fetched["attempt"] == 1
    assert http.get(f"/ojs/v1/jobs/{created['id']}").json()["job"]["state"] == "active"
    second = post(http, first)
    assert second.status_code == 201 and second.json()["job"]["id"] != created["id"]


def test_default_states_hold_through_retryable_and_release_on_discard(http: httpx.Client):
    queue = a_queue()
    first = job(queue, max_attempts=2)
    first["retry"] = {"initial_interval": "PT1S", "jitter": False}
    created = http.post("/ojs/v1/jobs", json=first).json()["job"]
    boom = {"code": "handler_error", "message": "boom"}

    [fetched] = fetch(http, queue)
    failed = http.post("/ojs/v1/workers/nack", json={"job_id": fetched["id"], "error": boom})
    assert failed.status_code == 200
    assert_ojs_headers(failed)
    body = failed.json()
    assert (body["job_id"], body["state"], body["attempt"], body["max_attempts"]) == (
        created["id"], "retryable", 1, 2,
    )  # fmt: skip
    retry_at = parse_rfc3339(body["next_attempt_at"])
    shown = http.get(f"/ojs/v1/jobs/{created['id']}").json()["job"]
    assert shown["state"] == "retryable" and shown["error"]["message"] == "boom"
    held = http.post("/ojs/v1/jobs", json=first)
    assert held.status_code == 409
    assert held.json()["error"]["details"]["existing_job_id"] == created["id"]

    # Handed out again once its backoff has passed, by event time, never before.
    [again] = eventually(lambda: fetch(http, queue), bool)
    assert again["id"] == created["id"] and again["attempt"] == 2
    assert retry_at is not None and (parse_rfc3339(again["started_at"]) or 0) >= retry_at
    discarded = http.post("/ojs/v1/workers/nack", json={"job_id": again["id"], "error": boom})
    body = discarded.json()
    assert body["state"] == "discarded" and body["discarded_at"] == body["completed_at"]
    assert post(http, first).status_code == 201


def test_ack_completes_and_releases_the_key(http: httpx.Client):
    queue = a_queue()
    first = job(queue)
    created = http.post("/ojs/v1/jobs", json=first).json()["job"]
    [fetched] = fetch(http, queue)
    done = http.post("/ojs/v1/workers/ack", json={"job_id": fetched["id"], "result": {"ok": 1}})
    assert done.status_code == 200 and done.json()["job"]["state"] == "completed"
    assert http.get(f"/ojs/v1/jobs/{created['id']}").json()["job"]["state"] == "completed"
    again = http.post("/ojs/v1/workers/ack", json={"job_id": fetched["id"]})
    assert again.status_code == 409 and again.json()["error"]["code"] == "invalid_request"
    assert fetch(http, queue) == []
    assert post(http, first).status_code == 201


def test_delete_cancels_publishes_a_cancellation_and_releases_the_key(
    http: httpx.Client, where: Where
):
    queue = a_queue()
    first = job(queue)
    created = http.post("/ojs/v1/jobs", json=first).json()["job"]
    cancelled = http.delete(f"/ojs/v1/jobs/{created['id']}")
    assert cancelled.status_code == 200
    assert_ojs_headers(cancelled)
    assert cancelled.json()["job"]["state"] == "cancelled"
    assert http.get(f"/ojs/v1/jobs/{created['id']}").json()["job"]["state"] == "cancelled"
    assert fetch(http, queue) == []
    assert http.delete(f"/ojs/v1/jobs/{created['id']}").status_code == 409
    assert http.delete(f"/ojs/v1/jobs/{uuid.uuid4()}").status_code == 404
    assert post(http, first).status_code == 201

    topic = where.cancellations
    reader = Reader(where.bootstrap, [topic])
    try:
        deadline = time.monotonic() + 30
        ours: list[dict[str, Any]] = []
        while not ours and time.monotonic() < deadline:
            reader.drain(0.5)
            ours = [
                r for r in reader.records.get(topic, []) if r["value"]["job_id"] == created["id"]
            ]
    finally:
        reader.close()
    [record] = ours
    assert record["key"] == created["unique_key"].encode()
    assert record["value"]["reason"] == "cancelled"
    assert record["value"]["previous_state"] == "available"


def test_parallel_fetches_never_hand_one_job_to_two_workers(http: httpx.Client):
    queue = a_queue()
    ids = {http.post("/ojs/v1/jobs", json=job(queue)).json()["job"]["id"] for _ in range(10)}
    url = str(http.base_url)

    async def fetch_all() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            return await asyncio.gather(
                *(
                    client.post("/ojs/v1/workers/fetch", json={"queues": [queue], "count": 1})
                    for _ in range(25)
                )
            )

    handed = [j["id"] for r in asyncio.run(fetch_all()) for j in r.json()["jobs"]]
    assert sorted(handed) == sorted(ids)


def test_worker_requests_are_validated(http: httpx.Client):
    assert http.post("/ojs/v1/workers/fetch", json={"count": 1}).status_code == 400
    assert http.post("/ojs/v1/workers/fetch", json={"queues": ["a"], "count": 0}).status_code == 400
    missing = http.post("/ojs/v1/workers/nack", json={"job_id": str(uuid.uuid4())})
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    assert http.post("/ojs/v1/workers/ack", json={}).status_code == 400
