"""Keep the last while running, over HTTP, under kill -9: requests that arrive while the
key's job runs leave one pending successor with the newest payload; the processor killed
with the successor kept and restarted from its committed state; the successor is offered
to a worker only after the running job is acked, and runs exactly once."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from gateway.http.binding import HttpSettings
from tests.integration.harness import Processor, Reader, apply_topics
from tests.integration.test_http import Served
from tests.integration.test_http_admin import eventually

pytestmark = pytest.mark.kafka


def deploy(site: str, commit: int) -> dict[str, Any]:
    return {"type": "site.deploy", "queue": "deploys", "args": [{"site": site, "commit": commit}],
            "unique": {"keys": ["type", "args"], "args_keys": ["site"],
                       "keep_last_if_active": True}}  # fmt: skip


def fetch(http: httpx.Client) -> list[dict[str, Any]]:
    answer = http.post("/ojs/v1/workers/fetch", json={"queues": ["deploys"], "count": 5})
    assert answer.status_code == 200, answer.text
    return list(answer.json().get("jobs", []))


def test_the_newest_request_while_a_job_runs_runs_once_after_it_across_a_kill_9(
    kafka_bootstrap: str, tmp_path: Any
) -> None:
    namespace = f"t{uuid.uuid4().hex[:10]}"
    cat = apply_topics(kafka_bootstrap, namespace)
    proc = Processor(kafka_bootstrap, namespace, tmp_path, "1", "--commit-interval", "1").start()
    site = uuid.uuid4().hex
    settings = HttpSettings(kafka_bootstrap, namespace, decision_timeout=90)
    try:
        with Served(settings) as served, httpx.Client(base_url=served.url, timeout=120) as http:
            first = http.post("/ojs/v1/jobs", json=deploy(site, 0))
            assert first.status_code == 201, first.text
            running = first.json()["job"]["id"]
            assert [j["id"] for j in eventually(lambda: fetch(http), bool, seconds=90)] == [running]
            kept = http.post("/ojs/v1/jobs", json=deploy(site, 1)).json()["job"]
            newer = http.post("/ojs/v1/jobs", json=deploy(site, 2)).json()["job"]
            assert kept["state"] == newer["state"] == "pending"
            assert newer["successor_of"] == running
            proc.kill()  # the successor kept, perhaps inside an open transaction
            proc.start()
            newest = http.post("/ojs/v1/jobs", json=deploy(site, 3))
            assert newest.status_code == 201, newest.text
            successor = newest.json()["job"]
            assert successor["state"] == "pending"
            assert fetch(http) == []  # pending: nothing to offer while the job runs
            held = eventually(
                lambda: http.get("/ojs/v1/unique-jobs?per_page=1000").json()["items"],
                lambda items: any(i["job_id"] == successor["id"] for i in items), seconds=30,
            )  # fmt: skip
            [shown] = [i for i in held if i["job_id"] == successor["id"]]
            assert (shown["state"], shown["successor_of"]) == ("pending", running)
            acked = http.post("/ojs/v1/workers/ack", json={"job_id": running})
            assert acked.status_code == 200, acked.text
            taken = eventually(lambda: fetch(http), bool, seconds=90)
            assert [j["id"] for j in taken] == [successor["id"]]
            assert taken[0]["args"] == [{"site": site, "commit": 3}]
            assert http.post("/ojs/v1/workers/ack", json={"job_id": successor["id"]}).is_success
            assert fetch(http) == []
            for job_id, state in ((kept["id"], "cancelled"), (newer["id"], "cancelled"),
                                  (running, "completed")):  # fmt: skip
                shown = http.get(f"/ojs/v1/jobs/{job_id}").json()["job"]
                assert shown["state"] == state, (job_id, shown)
    finally:
        proc.stop()

    reader = Reader(kafka_bootstrap, [cat.name("job_states"), cat.name("jobs")])
    try:
        reader.settle(quiet=3)
        states = [r["value"] for r in reader.records.get(cat.name("job_states"), [])
                  if isinstance(r["value"], dict)
                  and r["value"].get("args", [{}])[0].get("site") == site]  # fmt: skip
        published = [r["value"] for r in reader.records.get(cat.name("jobs"), [])
                     if isinstance(r["value"], dict)
                     and r["value"].get("args", [{}])[0].get("site") == site]  # fmt: skip
    finally:
        reader.close()
    # The successor ran exactly once, after the job it followed completed.
    started = [s["id"] for s in states if s["state"] == "active"]
    assert started == [running, successor["id"]], started
    # `jobs` saw the first job and the released successor, never one that was pending.
    assert [(j["id"], j["state"]) for j in published] == [
        (running, "available"), (successor["id"], "available"),
    ]  # fmt: skip
