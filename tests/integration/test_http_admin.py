"""The admin API as the official OJS Admin UI reads it: every route its core pages call,
with the shapes and paging it dereferences, on a namespace of the test's own."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from gateway.http.admin_jobs import BULK_MAX
from gateway.http.binding import HttpSettings
from tests.integration.harness import Processor, apply_topics
from tests.integration.test_http import Served

pytestmark = pytest.mark.kafka

STATES = {"scheduled", "available", "pending", "active", "completed", "retryable",
          "cancelled", "discarded"}  # fmt: skip


@pytest.fixture(scope="module")
def http(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    namespace = f"t{uuid.uuid4().hex[:10]}"
    apply_topics(kafka_bootstrap, namespace)
    proc = Processor(
        kafka_bootstrap, namespace, tmp_path_factory.mktemp("admin"), "1",
        "--commit-interval", "0.02",
    ).start()  # fmt: skip
    settings = HttpSettings(kafka_bootstrap, namespace, decision_timeout=60)
    try:
        with Served(settings) as served, httpx.Client(base_url=served.url, timeout=90) as client:
            yield client
    finally:
        proc.stop()


def eventually(read: Callable[[], Any], until: Callable[[Any], bool], seconds: float = 20) -> Any:
    """What `read` gives once `until` holds of it: the view follows committed records."""
    deadline = time.monotonic() + seconds
    while not until(seen := read()):
        assert time.monotonic() < deadline, seen
        time.sleep(0.1)
    return seen


def test_the_admin_ui_core_pages_read_what_happened(http: httpx.Client):
    enqueue = http.post("/ojs/v1/jobs/batch", json={"jobs": [
        *({"type": "mail.send", "args": [n], "queue": "mail",
           "unique": {"keys": ["type", "args"]}} for n in range(3)),
        {"type": "report.build", "args": [], "queue": "reports", "max_attempts": 1},
    ]})  # fmt: skip
    assert enqueue.status_code == 201, enqueue.text
    mail = http.post("/ojs/v1/workers/fetch", json={"queues": ["mail"], "worker_id": "w-1"})
    report = http.post(
        "/ojs/v1/workers/fetch", json={"queues": ["reports"], "worker_id": "w-2"}
    ).json()["jobs"][0]
    done = mail.json()["jobs"][0]
    assert done["worker_id"] == "w-1"
    failure = {"job_id": report["id"], "error": {"code": "boom", "message": "x"}}
    nacked = http.post("/ojs/v1/workers/nack", json=failure)
    assert nacked.json()["state"] == "discarded"
    # The dashboard: one worker still runs a job (the acked one's ran to its end).
    assert http.post("/ojs/v1/workers/fetch",
                     json={"queues": ["mail"], "worker_id": "w-1"}).json()["jobs"]  # fmt: skip
    assert http.post("/ojs/v1/workers/ack", json={"job_id": done["id"]}).status_code == 200

    def stats() -> dict[str, Any]:
        answer = http.get("/ojs/v1/admin/stats")
        assert answer.status_code == 200, answer.text
        return answer.json()

    seen = eventually(stats, lambda s: s["jobs"]["completed"] == 1 and s["jobs"]["discarded"] == 1)
    assert set(seen["jobs"]) == STATES and seen["queues"] == 2 and seen["workers"] == 1
    assert (seen["jobs"]["active"], seen["jobs"]["available"]) == (1, 1)
    assert seen["throughput"]["processed_per_minute"] == 0.2
    history = http.get("/ojs/v1/admin/stats/history?period=1m").json()
    assert history["period"] == "1m" and len(history["data"]) == 120
    totals = {k: sum(p[k] for p in history["data"]) for k in ("processed", "failed", "enqueued")}
    assert totals == {"processed": 1, "failed": 1, "enqueued": 4}
    assert http.get("/ojs/v1/admin/stats/history?period=2m").status_code == 400

    queues = http.get("/ojs/v1/admin/queues?page=1&per_page=50").json()
    assert queues["pagination"] == {"total": 2, "page": 1, "per_page": 50}
    [mail_queue, reports] = queues["items"]
    assert (mail_queue["name"], mail_queue["paused"]) == ("mail", False)
    assert set(mail_queue["counts"]) == STATES and mail_queue["counts"]["completed"] == 1
    assert http.get("/ojs/v1/admin/queues/reports").json()["counts"]["discarded"] == 1

    page = http.get("/ojs/v1/admin/jobs?queue=mail&page=1&per_page=2").json()
    assert page["pagination"] == {"total": 3, "page": 1, "per_page": 2}
    assert len(page["items"]) == 2 and {j["queue"] for j in page["items"]} == {"mail"}
    completed = http.get("/ojs/v1/admin/jobs?state=completed").json()["items"]
    assert [j["id"] for j in completed] == [done["id"]]
    by_type = http.get("/ojs/v1/admin/jobs?type=report.build").json()
    assert [j["id"] for j in by_type["items"]] == [report["id"]]

    detail = http.get(f"/ojs/v1/admin/jobs/{report['id']}").json()
    assert (detail["id"], detail["type"], detail["queue"]) == (
        report["id"],
        "report.build",
        "reports",
    )
    assert detail["meta"] == {} and detail["errors"][0]["code"] == "boom"
    assert set(detail["metadata"]) >= {"created_at", "started_at", "discarded_at"}

    workers = http.get("/ojs/v1/admin/workers").json()
    assert workers["summary"]["total"] == 1 and workers["pagination"]["total"] == 1
    assert workers["items"][0]["id"] == "w-1" and workers["items"][0]["queues"] == ["mail"]

    dead = http.get("/ojs/v1/admin/dead-letter?page=1&per_page=25").json()
    assert [j["id"] for j in dead["items"]] == [report["id"]] and dead["pagination"]["total"] == 1
    dead_stats = http.get("/ojs/v1/admin/dead-letter/stats").json()
    assert dead_stats["total"] == 1 and dead_stats["by_queue"] == {"reports": 1}
    assert dead_stats["by_error_type"] == {"boom": 1}

    keys = http.get("/ojs/v1/unique-jobs?page=1&per_page=25").json()
    assert keys["pagination"]["total"] == 2  # the completed one's key is free
    assert {k["state"] for k in keys["items"]} == {"active", "available"}

    refused = http.post("/ojs/v1/admin/jobs/bulk/retry",
                        json={"filter": {"state": "discarded"}, "confirm": False})  # fmt: skip
    assert refused.status_code == 400
    bulk = http.post("/ojs/v1/admin/jobs/bulk/retry", json={"filter": {}, "confirm": True}).json()
    assert (bulk["matched"], bulk["succeeded"]) == (1, 1)
    assert http.get(f"/ojs/v1/jobs/{report['id']}").json()["job"]["state"] == "available"
    cancel = http.post(f"/ojs/v1/admin/jobs/{report['id']}/cancel")
    assert cancel.status_code == 200 and cancel.json()["job"]["state"] == "cancelled"

    events = http.get("/ojs/v1/events?page=1&per_page=50").json()
    assert events["pagination"]["page"] == 1 and events["pagination"]["total"] >= 8
    newest = events["items"][0]
    assert {"id", "type", "timestamp", "data"} <= set(newest) and newest["data"]
    done_events = http.get("/ojs/v1/events?type=job.completed&page=1&per_page=50").json()
    assert [e["data"]["job_id"] for e in done_events["items"]] == [done["id"]]
    assert "events" in http.get("/ojs/v1/events").json()  # without paging: the OJS shape


def test_a_due_retry_is_listed_counted_and_shown_available_on_every_route(http: httpx.Client):
    queue = f"due-{uuid.uuid4().hex[:8]}"
    retry = {"max_attempts": 3, "initial_interval_ms": 1, "backoff_coefficient": 1.0}
    posted = http.post("/ojs/v1/jobs", json={"type": "due.retry", "args": [], "queue": queue,
                                             "retry": retry})  # fmt: skip
    assert posted.status_code == 201, posted.text
    [job] = http.post("/ojs/v1/workers/fetch", json={"queues": [queue]}).json()["jobs"]
    failure = {"job_id": job["id"], "error": {"code": "again", "message": "x"}}
    assert http.post("/ojs/v1/workers/nack", json=failure).json()["state"] == "retryable"
    time.sleep(0.1)  # its retry is due: the record says retryable, every route available
    assert http.get(f"/ojs/v1/jobs/{job['id']}").json()["job"]["state"] == "available"
    listed = eventually(
        lambda: http.get(f"/ojs/v1/admin/jobs?queue={queue}&state=available").json(),
        lambda page: page["pagination"]["total"] == 1,
    )
    assert [j["state"] for j in listed["items"]] == ["available"]
    retryable = http.get(f"/ojs/v1/admin/jobs?queue={queue}&state=retryable").json()
    assert retryable["pagination"]["total"] == 0
    assert http.get(f"/ojs/v1/admin/jobs/{job['id']}").json()["state"] == "available"
    counts = http.get(f"/ojs/v1/admin/queues/{queue}").json()["counts"]
    assert (counts["retryable"], counts["available"]) == (0, 1)


def test_a_client_sees_its_own_enqueue_in_the_admin_lists_at_once(http: httpx.Client):
    queue = f"mine-{uuid.uuid4().hex[:8]}"
    posted = http.post("/ojs/v1/jobs", json={"type": "mine.job", "args": [], "queue": queue})
    assert posted.status_code == 201
    names = [q["name"] for q in http.get("/ojs/v1/admin/queues?per_page=1000").json()["items"]]
    assert queue in names
    listed = http.get(f"/ojs/v1/admin/jobs?queue={queue}").json()
    assert listed["pagination"]["total"] == 1
    assert listed["items"][0]["id"] == posted.json()["job"]["id"]


def test_a_bulk_cancel_asks_for_a_thousand_jobs_a_call_and_counts_the_rest(http: httpx.Client):
    queue = f"cap-{uuid.uuid4().hex[:8]}"
    jobs = [{"type": "cap.job", "args": [n], "queue": queue} for n in range(BULK_MAX + 5)]
    posted = http.post("/ojs/v1/jobs/batch", json={"jobs": jobs})
    assert posted.status_code == 201, posted.text
    ids = sorted(j["id"] for j in posted.json()["jobs"])
    cancel = {"filter": {"queue": queue}, "confirm": True}
    first = http.post("/ojs/v1/admin/jobs/bulk/cancel", json=cancel).json()
    assert first == {"action": "cancel", "matched": BULK_MAX + 5, "succeeded": BULK_MAX,
                     "failed": 0, "errors": [], "remaining": 5}  # fmt: skip
    # The first thousand in the lists' order (state, queue, id): the newest five are left.
    live = http.get(f"/ojs/v1/admin/jobs?queue={queue}&state=available").json()["items"]
    assert sorted(j["id"] for j in live) == ids[-5:]
    second = http.post("/ojs/v1/admin/jobs/bulk/cancel", json=cancel).json()
    assert (second["matched"], second["succeeded"], second["remaining"]) == (5, 5, 0)
    assert http.post("/ojs/v1/admin/jobs/bulk/cancel", json=cancel).json()["matched"] == 0
    counts = eventually(
        lambda: http.get(f"/ojs/v1/admin/queues/{queue}").json()["counts"],
        lambda c: c["cancelled"] == BULK_MAX + 5,
    )
    assert counts["available"] == 0
