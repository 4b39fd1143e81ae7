"""Issue 16's HTTP side against a real broker and processor: the view is part of
readiness, heartbeat, fetch's lease, dead letters, queues, events, plain JSON."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from gateway.http.binding import HttpSettings
from tests.integration.harness import Processor, Reader, apply_topics
from tests.integration.test_http import Served, running

pytestmark = pytest.mark.kafka


def test_health_is_503_until_the_view_is_live_then_a_new_job_is_found_at_once(
    kafka_bootstrap: str, tmp_path: Path
):
    """Fresh namespaces, the app started right after the topics: the view may find no
    partitions in the first metadata; it must wait, and health must say so."""
    for round_ in range(3):
        namespace = f"t{uuid.uuid4().hex[:10]}"
        apply_topics(kafka_bootstrap, namespace)
        (tmp_path / f"p{round_}").mkdir()
        proc = Processor(
            kafka_bootstrap, namespace, tmp_path / f"p{round_}", "1", "--commit-interval", "0.02"
        ).start(wait=False)
        settings = HttpSettings(kafka_bootstrap, namespace, decision_timeout=60)
        try:
            with Served(settings) as served, httpx.Client(base_url=served.url, timeout=90) as http:
                follower = served.app_state().follower
                deadline = time.monotonic() + 120
                while True:
                    health = http.get("/ojs/v1/health")
                    if health.status_code == 200:
                        break
                    assert health.status_code == 503, health.text
                    assert health.json()["status"] == "starting" and health.json()["reason"]
                    if not follower.live.is_set():
                        assert "job view" in health.json()["reason"], health.text
                    assert time.monotonic() < deadline, health.text
                    time.sleep(0.1)
                assert follower.live.is_set()
                created = http.post("/ojs/v1/jobs", json={"type": "ready.check", "args": [round_]})
                assert created.status_code == 201, created.text
                found = http.get(f"/ojs/v1/jobs/{created.json()['job']['id']}")
                assert found.status_code == 200, found.text
                assert found.json()["job"]["state"] == "available"
        finally:
            proc.stop()


@dataclass
class Stack:
    bootstrap: str
    requests: str
    http: httpx.Client


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running(kafka_bootstrap, tmp_path_factory.mktemp("http-edge")) as (_, cat, _, _, http):
        yield Stack(kafka_bootstrap, cat.name("requests"), http)


def until(read: Any, done: Any, bound_s: float = 30) -> Any:
    """`read()` again until `done` says yes of it, within a generous bound (not a measure)."""
    deadline = time.monotonic() + bound_s
    found = read()
    while not done(found) and time.monotonic() < deadline:
        time.sleep(0.1)
        found = read()
    return found


def a_queue() -> str:
    return f"q{uuid.uuid4().hex[:12]}"


def enqueue(stack: Stack, queue: str, **fields: Any) -> dict[str, Any]:
    body = {"type": "edge.work", "args": [uuid.uuid4().hex], "queue": queue, **fields}
    created = stack.http.post("/ojs/v1/jobs", json=body)
    assert created.status_code == 201, created.text
    return dict(created.json()["job"])


def fetch(stack: Stack, queue: str, **fields: Any) -> list[dict[str, Any]]:
    answer = stack.http.post("/ojs/v1/workers/fetch", json={"queues": [queue], **fields})
    assert answer.status_code == 200, answer.text
    return list(answer.json()["jobs"])


def discarded(stack: Stack, queue: str) -> dict[str, Any]:
    """A job of `queue` that failed its only attempt: a dead letter."""
    job = enqueue(stack, queue, max_attempts=1)
    [claimed] = fetch(stack, queue)
    assert claimed["id"] == job["id"]
    failed = stack.http.post(
        "/ojs/v1/workers/nack",
        json={"job_id": job["id"], "error": {"code": "boom", "message": "it broke"}},
    )
    assert failed.status_code == 200 and failed.json()["state"] == "discarded", failed.text
    return job


def test_fetch_passes_visibility_timeout_ms_on_each_claim(stack: Stack):
    queue = a_queue()
    job = enqueue(stack, queue)
    answer = stack.http.post(
        "/ojs/v1/workers/fetch",
        json={"queues": [queue], "worker_id": "w1", "visibility_timeout_ms": 12345},
    )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert [j["id"] for j in body["jobs"]] == [job["id"]] and body["job"]["id"] == job["id"]
    assert body["jobs"][0]["state"] == "active"
    assert "route" not in body["jobs"][0] and "partition" not in body["jobs"][0]
    reader = Reader(stack.bootstrap, [stack.requests])
    try:
        deadline = time.monotonic() + 60
        while True:
            claims = [
                r["value"] for r in reader.records.get(stack.requests, [])
                if isinstance(r["value"], dict) and r["value"].get("job_id") == job["id"]
                and r["value"].get("type") == "job.started"
            ]  # fmt: skip
            if claims or time.monotonic() > deadline:
                break
            reader.drain(0.5)
    finally:
        reader.close()
    assert [c.get("visibility_timeout_ms") for c in claims] == [12345]
    bad = stack.http.post(
        "/ojs/v1/workers/fetch", json={"queues": [queue], "visibility_timeout_ms": -1}
    )
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_request"


def test_a_claim_sets_the_lease_it_asked_for(stack: Stack):
    queue = a_queue()
    enqueue(stack, queue)
    [claimed] = fetch(stack, queue, visibility_timeout_ms=60_000)
    lease = claimed.get("lease_expires_at")
    assert isinstance(lease, str), claimed
    shown = stack.http.get(f"/ojs/v1/jobs/{claimed['id']}").json()["job"]
    assert shown["lease_expires_at"] == lease


def test_heartbeat_answers_running_and_what_happened_to_each_job(stack: Stack):
    queue = a_queue()
    waiting = enqueue(stack, queue)
    unknown = str(uuid.uuid4())
    answer = stack.http.post(
        "/ojs/v1/workers/heartbeat",
        json={"worker_id": "w1", "active_jobs": [unknown], "visibility_timeout_ms": 30000},
    )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["state"] == "running" and body["directive"] == ""
    assert body["jobs_extended"] == [] and body["server_time"]
    [result] = body["jobs"]
    assert result["job_id"] == unknown and result["extended"] is False
    assert result["error"]["code"] == "not_found"
    # The worker protocol's shape: active_jobs a count, active_job_ids the list.
    counted = stack.http.post(
        "/ojs/v1/workers/heartbeat",
        json={"worker_id": "w1", "state": "running", "active_jobs": 0, "active_job_ids": []},
    )
    assert counted.status_code == 200 and counted.json()["jobs"] == [], counted.text
    missing = stack.http.post("/ojs/v1/workers/heartbeat", json={"active_jobs": []})
    assert missing.status_code == 400, missing.text
    assert stack.http.get(f"/ojs/v1/jobs/{waiting['id']}").json()["job"]["state"] == "available"


def test_heartbeat_extends_an_active_jobs_lease_and_refuses_another(stack: Stack):
    queue = a_queue()
    enqueue(stack, queue)
    waiting = enqueue(stack, queue)
    [active] = fetch(stack, queue, visibility_timeout_ms=5_000)
    answer = stack.http.post(
        "/ojs/v1/workers/heartbeat",
        json={
            "worker_id": "w1", "active_jobs": [active["id"], waiting["id"]],
            "visibility_timeout_ms": 600_000,
        },
    )  # fmt: skip
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["jobs_extended"] == [active["id"]]
    extended, refused = body["jobs"]
    assert (
        extended["state"] == "active" and extended["lease_expires_at"] > active["lease_expires_at"]
    )
    assert refused["extended"] is False and refused["error"]["details"]["current_state"]
    shown = stack.http.get(f"/ojs/v1/jobs/{active['id']}").json()["job"]
    assert shown["lease_expires_at"] == extended["lease_expires_at"]


def test_dead_letter_lists_discarded_jobs_paginated(stack: Stack):
    queue = a_queue()
    first, second = discarded(stack, queue), discarded(stack, queue)
    listed = stack.http.get("/ojs/v1/dead-letter", params={"queue": queue})
    assert listed.status_code == 200, listed.text
    body = listed.json()
    assert sorted(j["id"] for j in body["jobs"]) == sorted([first["id"], second["id"]])
    assert all(j["state"] == "discarded" for j in body["jobs"])
    assert body["pagination"] == {"total": 2, "limit": 50, "offset": 0, "has_more": False}
    dead = body["jobs"][0]
    assert dead["errors"] and dead["errors"][-1]["message"] == "it broke"
    assert dead["retry"]["initial_interval"] == "PT1S" and dead["retry"]["max_attempts"] == 1
    page = stack.http.get("/ojs/v1/dead-letter", params={"queue": queue, "limit": 1, "offset": 1})
    assert len(page.json()["jobs"]) == 1 and page.json()["pagination"]["has_more"] is False
    everywhere = stack.http.get("/ojs/v1/dead-letter", params={"limit": 1000}).json()
    assert {first["id"], second["id"]} <= {j["id"] for j in everywhere["jobs"]}
    assert stack.http.get("/ojs/v1/dead-letter", params={"limit": 0}).status_code == 400
    live = enqueue(stack, queue)
    not_dead = stack.http.post(f"/ojs/v1/dead-letter/{live['id']}/retry")
    assert not_dead.status_code == 404, not_dead.text
    assert not_dead.json()["error"]["details"]["current_state"] == "available"


def test_a_dead_letter_retry_makes_the_job_available_with_its_attempts_reset(stack: Stack):
    queue = a_queue()
    job = discarded(stack, queue)
    retried = stack.http.post(f"/ojs/v1/dead-letter/{job['id']}/retry")
    assert retried.status_code == 200, retried.text
    assert retried.json()["job"]["state"] == "available"
    assert retried.json()["job"]["attempt"] == 0
    assert stack.http.get(f"/ojs/v1/jobs/{job['id']}").json()["job"]["state"] == "available"
    listed = stack.http.get("/ojs/v1/dead-letter", params={"queue": queue}).json()
    assert listed["jobs"] == []


def test_a_dead_letter_delete_removes_the_job_for_good(stack: Stack):
    queue = a_queue()
    job = discarded(stack, queue)
    deleted = stack.http.delete(f"/ojs/v1/dead-letter/{job['id']}")
    assert deleted.status_code == 200, deleted.text
    assert deleted.json() == {"deleted": True, "job_id": job["id"]}
    assert stack.http.get(f"/ojs/v1/jobs/{job['id']}").status_code == 404


def test_queues_list_counts_the_jobs_of_each_queue_by_state(stack: Stack):
    queue = a_queue()
    enqueue(stack, queue)
    enqueue(stack, queue)
    fetch(stack, queue)

    def mine() -> list[dict[str, Any]]:
        listed = stack.http.get("/ojs/v1/queues", params={"limit": 1000})
        assert listed.status_code == 200, listed.text
        return [q for q in listed.json()["queues"] if q["name"] == queue]

    # Counts come from committed records; answers come before the commit (early answers).
    [found] = until(mine, lambda q: bool(q) and q[0]["counts"] == {"available": 1, "active": 1})
    assert found["status"] == "active" and found["created_at"]
    assert found["counts"] == {"available": 1, "active": 1}


def test_events_are_listed_and_streamed_from_job_states(stack: Stack):
    queue = a_queue()
    job = enqueue(stack, queue)
    [claimed] = fetch(stack, queue)
    done = stack.http.post("/ojs/v1/workers/ack", json={"job_id": claimed["id"], "result": 1})
    assert done.status_code == 200, done.text

    def listed() -> list[dict[str, Any]]:
        answer = stack.http.get("/ojs/v1/events", params={"queues": queue})
        assert answer.status_code == 200, answer.text
        return list(answer.json()["events"])

    # Events come from committed records; answers come before the commit (early answers).
    events = until(listed, lambda found: len(found) >= 3)
    assert [e["type"] for e in events] == ["job.enqueued", "job.started", "job.completed"]
    assert all(e["subject"] == job["id"] and e["data"]["queue"] == queue for e in events)
    completed = events[-1]["data"]
    assert completed["job_type"] == "edge.work" and completed["attempt"] == 1
    assert completed["duration_ms"] >= 0 and completed["result"] == 1
    only = stack.http.get("/ojs/v1/events", params={"queues": queue, "types": "job.completed"})
    assert [e["type"] for e in only.json()["events"]] == ["job.completed"]

    frames: list[dict[str, Any]] = []
    headers = {"Accept": "text/event-stream", "Last-Event-ID": "0:0"}
    with stack.http.stream(
        "GET", "/ojs/v1/events", params={"queues": queue}, headers=headers, timeout=30
    ) as stream:
        assert stream.status_code == 200
        assert stream.headers["content-type"].startswith("text/event-stream")
        lines = stream.iter_lines()
        assert next(lines) == "retry: 3000"
        for line in lines:
            if line.startswith("data: "):
                frames.append(orjson.loads(line.removeprefix("data: ")))
            if len(frames) == 3:
                break
    assert [f["type"] for f in frames] == ["job.enqueued", "job.started", "job.completed"]


def test_a_caller_asking_for_plain_json_gets_plain_json(stack: Stack):
    job = enqueue(stack, a_queue())
    plain = stack.http.get(f"/ojs/v1/jobs/{job['id']}", headers={"Accept": "application/json"})
    assert plain.status_code == 200 and plain.headers["content-type"] == "application/json"
    missing = stack.http.get("/ojs/v1/jobs/nope", headers={"Accept": "application/json"})
    assert missing.status_code == 404 and missing.headers["content-type"] == "application/json"
    ojs = stack.http.get(
        f"/ojs/v1/jobs/{job['id']}", headers={"Accept": "application/openjobspec+json"}
    )
    assert ojs.headers["content-type"] == "application/openjobspec+json"
    assert stack.http.get(f"/ojs/v1/jobs/{job['id']}").headers["content-type"] == (
        "application/openjobspec+json"
    )
