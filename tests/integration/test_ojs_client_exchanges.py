"""The HTTP exchanges the official OJS Python SDK (0.4) makes, as it makes them: its
headers (httpx's User-Agent among them), its bodies, and the fields it reads back,
against a binding run as `gateway up` runs it (the SDK parses only bodies typed
application/json, which the binding gives httpx callers: http/responses.py)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from gateway.http.binding import HttpSettings
from tests.integration.harness import Processor, apply_topics
from tests.integration.test_http import Served

pytestmark = pytest.mark.kafka

# What the SDK's transport sends with every request.
SDK_HEADERS = {
    "Content-Type": "application/openjobspec+json",
    "Accept": "application/openjobspec+json",
    "OJS-Version": "1.0",
}


@pytest.fixture(scope="module")
def http(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    namespace = f"t{uuid.uuid4().hex[:10]}"
    apply_topics(kafka_bootstrap, namespace)
    proc = Processor(
        kafka_bootstrap, namespace, tmp_path_factory.mktemp("sdkx"), "1",
        "--commit-interval", "0.02",
    ).start()  # fmt: skip
    settings = HttpSettings(kafka_bootstrap, namespace, decision_timeout=60)
    try:
        with (
            Served(settings) as served,
            httpx.Client(base_url=served.url, timeout=90, headers=SDK_HEADERS) as client,
        ):
            deadline = time.monotonic() + 90
            while client.get("/ojs/v1/health").status_code != 200:
                assert time.monotonic() < deadline, "the binding never became ready"
                time.sleep(0.5)
            yield client
    finally:
        proc.stop()


def read(response: httpx.Response) -> Any:
    """As the SDK reads a body: only one typed application/json."""
    assert "application/json" in response.headers["content-type"], response.headers
    return response.json()


def test_enqueue_unique_reject_ignore_replace_batch_get_and_cancel(http: httpx.Client):
    tag = uuid.uuid4().hex
    plain = read(http.post("/ojs/v1/jobs", json={"type": "sdk.plain", "args": [tag],
                                                   "options": {"queue": "sdk-q"}}))  # fmt: skip
    job_id = plain["job"]["id"]

    def unique(kind: str, on_conflict: str) -> dict[str, Any]:
        return {"type": f"sdk.uniq_{kind}", "args": [tag], "options": {"queue": "sdk-q",
                "unique": {"on_conflict": on_conflict, "key": ["type", "args"],
                           "states": ["available", "active", "scheduled"]}}}  # fmt: skip

    assert http.post("/ojs/v1/jobs", json=unique("reject", "reject")).status_code == 201
    duplicate = http.post("/ojs/v1/jobs", json=unique("reject", "reject"))
    assert duplicate.status_code == 409 and read(duplicate)["error"]["code"] == "duplicate"

    first = read(http.post("/ojs/v1/jobs", json=unique("ignore", "ignore")))["job"]
    again = read(http.post("/ojs/v1/jobs", json=unique("ignore", "ignore")))["job"]
    assert again["id"] == first["id"] and again["args"] == [tag]

    old = read(http.post("/ojs/v1/jobs", json=unique("replace", "replace")))["job"]
    new = read(http.post("/ojs/v1/jobs", json=unique("replace", "replace")))["job"]
    assert new["id"] != old["id"]
    assert read(http.get(f"/ojs/v1/jobs/{old['id']}"))["job"]["state"] == "cancelled"

    batch = read(http.post("/ojs/v1/jobs/batch", json={"jobs": [
        {"type": "sdk.batch", "args": [tag, i], "options": {"queue": "sdk-q"}} for i in (1, 2)
    ]}))  # fmt: skip
    assert [j["args"] for j in batch["jobs"]] == [[tag, 1], [tag, 2]]
    assert all(j["id"] and j["state"] == "available" for j in batch["jobs"])

    got = read(http.get(f"/ojs/v1/jobs/{job_id}"))["job"]
    assert got["id"] == job_id and got["type"] == "sdk.plain"
    assert read(http.delete(f"/ojs/v1/jobs/{job_id}"))["job"]["state"] == "cancelled"
    assert http.delete(f"/ojs/v1/jobs/{job_id}").status_code == 409
    missing = http.get("/ojs/v1/jobs/019539a4-0000-7000-8000-ffffffffffff")
    assert missing.status_code == 404 and read(missing)["error"]["code"] == "not_found"


def test_a_worker_fetches_heartbeats_acks_and_nacks(http: httpx.Client):
    tag, worker = uuid.uuid4().hex, f"worker_{uuid.uuid4().hex[:16]}"
    queue = f"sdk-w-{tag[:8]}"
    work = read(http.post("/ojs/v1/jobs", json={"type": "sdk.work", "args": [tag],
                                                  "options": {"queue": queue}}))["job"]  # fmt: skip
    fail = read(http.post("/ojs/v1/jobs", json={"type": "sdk.fail", "args": [tag], "options": {
        "queue": queue, "retry": {"max_attempts": 1}}}))["job"]  # fmt: skip

    def fetch() -> list[dict[str, Any]]:
        body = {"queues": [queue], "count": 1, "visibility_timeout_ms": 30000, "worker_id": worker}
        return list(read(http.post("/ojs/v1/workers/fetch", json=body))["jobs"])

    [first] = fetch()
    [second] = fetch()
    assert {first["id"], second["id"]} == {work["id"], fail["id"]}
    assert first["state"] == "active" and first["lease_expires_at"]
    lease = {"worker_id": worker, "active_jobs": [work["id"]], "visibility_timeout_ms": 30000}
    beat = read(http.post("/ojs/v1/workers/heartbeat", json=lease))
    assert beat["state"] == "running" and beat["jobs_extended"] == [work["id"]]

    acked = read(http.post("/ojs/v1/workers/ack", json={"job_id": work["id"],
                                                          "result": {"ok": True}}))  # fmt: skip
    assert acked["state"] == "completed"
    nacked = read(http.post("/ojs/v1/workers/nack", json={"job_id": fail["id"], "error": {
        "code": "handler_error", "message": "boom from handler", "retryable": True}}))  # fmt: skip
    assert nacked["state"] == "discarded"
    assert fetch() == []
    done = read(http.get(f"/ojs/v1/jobs/{fail['id']}"))["job"]
    assert done["errors"][-1]["message"] == "boom from handler"
