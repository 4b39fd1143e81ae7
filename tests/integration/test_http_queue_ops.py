"""Queue pause and resume, and crons, over HTTP against a real processor: the processor
is the one authority for both, and a cron's slot is decided exactly once, kill -9 or not."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.core.decision_records import job_shown
from gateway.core.times import parse_rfc3339
from gateway.http.binding import HttpSettings
from gateway.sdk import Client, EventAck
from tests.integration.cli import gateway
from tests.integration.harness import Processor, Reader, apply_topics
from tests.integration.test_http import Served
from tests.integration.test_http_admin import eventually

pytestmark = pytest.mark.kafka


@pytest.fixture(scope="module")
def served(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    namespace = f"t{uuid.uuid4().hex[:10]}"
    cat = apply_topics(kafka_bootstrap, namespace)
    workdir = tmp_path_factory.mktemp("queue-ops")
    proc = Processor(kafka_bootstrap, namespace, workdir, "1", "--commit-interval", "0.05").start()
    settings = HttpSettings(kafka_bootstrap, namespace, decision_timeout=60)
    try:
        with Served(settings) as server, httpx.Client(base_url=server.url, timeout=90) as http:
            yield http, proc, cat, kafka_bootstrap, namespace
    finally:
        proc.stop()


def test_a_paused_queue_hands_out_nothing_and_takes_enqueues(served: Any):
    http = served[0]
    paused = http.post("/ojs/v1/queues/held/pause", json={})
    assert paused.status_code == 200, paused.text
    body = paused.json()
    assert body["queue"] == {**body["queue"], "name": "held", "paused": True, "status": "paused"}
    job = http.post("/ojs/v1/jobs", json={"type": "q.job", "args": [1], "queue": "held"})
    assert job.status_code == 201 and job.json()["job"]["state"] == "available"
    other = http.post("/ojs/v1/jobs", json={"type": "q.job", "args": [2], "queue": "open"})
    assert other.status_code == 201
    fetched = http.post("/ojs/v1/workers/fetch", json={"queues": ["held", "open"], "count": 5})
    assert [j["queue"] for j in fetched.json()["jobs"]] == ["open"]
    listed = http.get("/ojs/v1/queues").json()["queues"]  # this process's own pause, at once
    assert {q["name"]: q["status"] for q in listed}["held"] == "paused"
    stats = http.get("/ojs/v1/queues/held/stats").json()
    assert stats["queue"]["paused"] is True and stats["queue"]["available"] == 1
    admin = http.get("/ojs/v1/admin/queues/held").json()
    assert admin["paused"] is True and admin["state"] == "paused"

    resumed = http.post("/ojs/v1/admin/queues/held/resume")
    assert resumed.status_code == 200 and resumed.json()["paused"] is False
    again = http.post("/ojs/v1/workers/fetch", json={"queues": ["held"]}).json()["jobs"]
    assert [j["id"] for j in again] == [job.json()["job"]["id"]]


def test_the_processor_refuses_a_claim_on_a_paused_queue_whoever_sends_it(served: Any):
    http, _, _, bootstrap, namespace = served
    job = http.post("/ojs/v1/jobs", json={"type": "q.job", "args": [3], "queue": "direct"})
    job_id = job.json()["job"]["id"]
    assert http.post("/ojs/v1/queues/direct/pause", json={}).status_code == 200
    with Client(bootstrap, namespace) as client:  # past the binding's fetch: a raw claim
        ack = client.publish_event({"job_id": job_id, "type": "job.started"}, timeout=60)
    assert isinstance(ack, EventAck)
    assert str(ack.outcome) == "refused" and ack.error is not None
    assert ack.error.code == "queue_paused"
    assert http.get(f"/ojs/v1/jobs/{job_id}").json()["job"]["state"] == "available"
    assert http.post("/ojs/v1/queues/direct/resume", json={}).status_code == 200
    with Client(bootstrap, namespace) as client:
        ack = client.publish_event({"job_id": job_id, "type": "job.started"}, timeout=60)
    assert isinstance(ack, EventAck) and str(ack.outcome) == "applied"


def test_queue_routes_refuse_bad_names(served: Any):
    answer = served[0].post("/ojs/v1/queues/Bad Name!/pause", json={})
    assert answer.status_code == 400 and answer.json()["error"]["code"] == "invalid_request"


def test_a_cron_is_registered_listed_toggled_and_deleted(served: Any):
    http = served[0]
    template = {"type": "report.build", "args": [], "options": {"queue": "r"}}
    body = {"name": "nightly", "expression": "0 3 * * *", "timezone": "Europe/Paris",
            "job_template": template}  # fmt: skip
    created = http.post("/ojs/v1/cron", json=body)
    assert created.status_code == 201, created.text
    cron = created.json()["cron"]
    assert created.json()["cron_job"] == cron
    assert (cron["expression"], cron["cron"], cron["timezone"]) == ("0 3 * * *",) * 2 + (
        "Europe/Paris",
    )  # fmt: skip
    assert cron["enabled"] is True and cron["overlap_policy"] == "skip" and cron["run_count"] == 0
    assert cron["next_run_at"].endswith(("T02:00:00.000Z", "T01:00:00.000Z"))  # 03:00 in Paris
    again = http.post("/ojs/v1/cron", json={**body, "description": "the nightly report"})
    assert again.status_code == 200 and again.json()["cron"]["created_at"] == cron["created_at"]
    assert [c["name"] for c in http.get("/ojs/v1/cron").json()["crons"]] == ["nightly"]
    assert http.get("/ojs/v1/cron/nightly").json()["cron"]["description"] == "the nightly report"
    off = http.patch("/ojs/v1/cron/nightly", json={"enabled": False}).json()["cron"]
    assert (off["enabled"], off["next_run_at"], off["status"]) == (False, None, "disabled")
    on = http.patch("/ojs/v1/cron/nightly", json={"enabled": True}).json()["cron"]
    assert on["next_run_at"] == cron["next_run_at"]
    deleted = http.delete("/ojs/v1/cron/nightly")
    assert deleted.status_code == 200 and deleted.json()["deleted"] is True
    assert http.get("/ojs/v1/cron").json()["crons"] == []
    assert http.get("/ojs/v1/cron/nightly").status_code == 404
    assert http.delete("/ojs/v1/cron/nightly").status_code == 404
    for bad in ({**body, "expression": "61 * * * *"}, {**body, "timezone": "EST"},
                {**body, "name": "Upper"}, {**body, "overlap_policy": "sometimes"},
                {**body, "job_template": {**template, "options": {"unique": {}}}}):  # fmt: skip
        refused = http.post("/ojs/v1/cron", json=bad)
        assert refused.status_code == 400, bad
        assert refused.json()["error"]["code"] == "invalid_request" and refused.json()["error"][
            "message"
        ]  # fmt: skip


def test_skip_refuses_a_slot_while_the_last_run_is_active(served: Any):
    http, _, cat, bootstrap, _ = served
    reader = Reader(bootstrap, [cat.name("decisions")])
    template = {"type": "cron.skip", "args": [], "options": {"queue": "skipq"}}
    body = {"name": "tick-skip", "expression": "*/2 * * * * *", "job_template": template}
    assert http.post("/ojs/v1/cron", json=body).status_code == 201

    def decided() -> list[dict[str, Any]]:
        """The audit's decisions on the cron's slots (a refused one names the run it met)."""
        reader.drain(0.5)
        return [
            r["value"]
            for r in reader.records.get(cat.name("decisions"), [])
            if (job_shown(r["value"]) or {}).get("meta", {}).get("cron_name") == "tick-skip"
        ]

    def slot(job: dict[str, Any]) -> int:
        return parse_rfc3339(job["meta"]["cron_slot"]) or 0

    try:
        first = eventually(
            lambda: http.post("/ojs/v1/workers/fetch", json={"queues": ["skipq"]}).json()["jobs"],
            bool,
        )[0]  # fmt: skip
        started = parse_rfc3339(first["started_at"]) or 0
        # A slot that came while the first run was active: refused as its duplicate.
        seen = eventually(decided, lambda ds: any(
            (d["outcome"], d["existing_job_id"], d["existing_job_state"])
            == ("rejected", first["id"], "active") for d in ds
        ), seconds=30)  # fmt: skip
        later = [d for d in seen if d["outcome"] == "accepted" and slot(d["job"]) > started]
        assert later == []
        assert http.post("/ojs/v1/workers/ack", json={"job_id": first["id"]}).status_code == 200
        eventually(decided, lambda ds: any(
            d["outcome"] == "accepted" and slot(d["job"]) > started for d in ds
        ), seconds=30)  # fmt: skip
    finally:
        http.delete("/ojs/v1/cron/tick-skip")
        reader.close()


def test_each_slot_is_decided_once_across_a_kill(served: Any, tmp_path: Path):
    http, proc, cat, _, _ = served
    reader = Reader(served[3], [cat.name("decisions")])
    template = {"type": "cron.each", "args": [], "options": {"queue": "eachq"}}
    body = {"name": "every-second", "expression": "* * * * * *", "overlap_policy": "allow",
            "job_template": template}  # fmt: skip
    assert http.post("/ojs/v1/cron", json=body).status_code == 201

    def slots() -> list[str]:
        reader.drain(0.5)
        return [
            job_shown(r["value"])["meta"]["cron_slot"]
            for r in reader.records.get(cat.name("decisions"), [])
            if (job_shown(r["value"]) or {}).get("meta", {}).get("cron_name") == "every-second"
        ]

    try:
        eventually(slots, lambda s: len(s) >= 3, seconds=30)
        eventually(  # OJS cron's event, from each fired job's first record
            lambda: http.get("/ojs/v1/events?types=cron.triggered").json()["events"],
            lambda events: any(e["data"]["cron_name"] == "every-second" for e in events),
        )
        proc.kill()  # slots fall due while it is down and while it starts again
        proc.start()
        before = len(slots())
        eventually(slots, lambda s: len(s) >= before + 3, seconds=60)
    finally:
        assert http.delete("/ojs/v1/cron/every-second").status_code == 200
    reader.settle(quiet=2)
    seen = Counter(slots())
    reader.close()
    assert len(seen) >= 6 and max(seen.values()) == 1, [s for s, n in seen.items() if n > 1]


def test_replay_reproduces_the_claims_a_pause_refused_and_the_slots_crons_fired(served: Any):
    """Last in this module: the log now holds pauses, refused claims and cron firings."""
    http, _, _, bootstrap, namespace = served
    job = http.post("/ojs/v1/jobs", json={"type": "q.job", "args": [9], "queue": "replayed",
                                          "unique": {"keys": ["type", "args"]}})  # fmt: skip
    job_id, key = job.json()["job"]["id"], job.json()["job"]["unique_key"]
    assert http.post("/ojs/v1/queues/replayed/pause", json={}).status_code == 200
    with Client(bootstrap, namespace) as client:
        claim = {"job_id": job_id, "unique_key": key, "type": "job.started"}
        refused = client.publish_event(claim, timeout=60)
    assert isinstance(refused, EventAck) and str(refused.outcome) == "refused"
    replayed = gateway("replay", "--bootstrap", bootstrap, "--namespace", namespace)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert "0 different" in replayed.stdout, replayed.stdout
    explained = gateway("explain", job_id, "--bootstrap", bootstrap, "--namespace", namespace)
    assert explained.returncode == 0, explained.stdout + explained.stderr
    assert f"queue replayed is paused: job {job_id} is not handed out" in explained.stdout
