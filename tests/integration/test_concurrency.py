"""Per-key concurrency under kill -9: many jobs of one key with `unique.concurrency` 2,
workers fetching and acking over HTTP through two serve processes (two views, neither
knowing the other's claims until it reads them) and a worker that claims every job of the
key straight through the SDK, so the processor's rule is what holds; each of two processor
runtimes is killed with SIGKILL mid-load and restarted. The committed
log never shows more than two of the key's jobs active at once, and every job completes
exactly once."""

from __future__ import annotations

import random
import time
import uuid
from typing import Any

import httpx
import pytest

from gateway import Client
from gateway.core import EventOutcome
from gateway.core.times import parse_rfc3339
from gateway.http.binding import HttpSettings
from tests.integration.harness import Processor, Reader, apply_topics
from tests.integration.test_http import Served
from tests.integration.workers import Claimer, Threads

pytestmark = pytest.mark.kafka
JOBS = 30
LIMIT = 2
WORKERS = 6


def job(n: int, tenant: str, queue: str) -> dict[str, Any]:
    return {"type": "report.build", "queue": queue, "args": [{"tenant": tenant, "n": n}],
            "unique": {"keys": ["type", "args"], "args_keys": ["tenant"],
                       "concurrency": LIMIT}}  # fmt: skip


class Workers(Threads):
    """Threads that fetch one job at a time, run it a little while and ack it (again until
    the job shows completed, when an ack finds no processor)."""

    def __init__(self, urls: list[str], queue: str) -> None:
        super().__init__([(f"w{i}", urls[i % len(urls)]) for i in range(WORKERS)])
        self.urls, self.queue = urls, queue
        self.acked: list[str] = []

    def done(self) -> int:
        with self.lock:
            return len(self.acked)

    def _run(self, name: str, url: str) -> None:
        with httpx.Client(base_url=url, timeout=90) as http:
            while not self.stop.is_set():
                body = {"queues": [self.queue], "count": 1, "worker_id": name,
                        "visibility_timeout_ms": 120_000}  # fmt: skip
                try:
                    fetched = http.post("/ojs/v1/workers/fetch", json=body)
                except httpx.HTTPError:
                    continue
                jobs = fetched.json().get("jobs") if fetched.status_code == 200 else None
                if not jobs:
                    time.sleep(0.05)
                    continue
                time.sleep(random.uniform(0.05, 0.2))  # the work
                self._ack(http, jobs[0]["id"])

    def _ack(self, http: httpx.Client, job_id: str) -> None:
        while True:
            try:
                if http.post("/ojs/v1/workers/ack", json={"job_id": job_id}).status_code == 200:
                    with self.lock:
                        self.acked.append(job_id)
                    return
                shown = http.get(f"/ojs/v1/jobs/{job_id}")
                if shown.status_code == 200 and shown.json()["job"]["state"] == "completed":
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)


def _held_back_at_the_limit(client: Client, ids: list[str], key: str) -> None:
    """The rule once, before the load (which may or may not meet the limit while the SDK
    worker asks): LIMIT claims start, the next is refused, then the LIMIT complete."""

    def event(job_id: str, kind: str, **fields: Any) -> Any:
        return client.publish_event(
            {"job_id": job_id, "unique_key": key, "type": kind, **fields}, timeout=30
        )

    for job_id in ids[:LIMIT]:
        started = event(job_id, "job.started", worker_id="first", visibility_timeout_ms=120_000)
        assert started.outcome is EventOutcome.APPLIED, started
    refused = event(ids[LIMIT], "job.started", worker_id="first")
    assert refused.error is not None and refused.error.code == "concurrency_limit", refused
    for job_id in ids[:LIMIT]:
        assert event(job_id, "job.completed").outcome is EventOutcome.APPLIED


def state(http: httpx.Client, job_id: str) -> str:
    return str(http.get(f"/ojs/v1/jobs/{job_id}").json()["job"]["state"])


def wait_for(what: Any, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not what():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_a_key_never_runs_more_than_its_limit_through_kill_9_and_every_job_completes_once(
    kafka_bootstrap: str, namespace: str, tmp_path: Any
) -> None:
    cat = apply_topics(kafka_bootstrap, namespace)
    # Transactions of a second: a kill lands inside an open one, answered early.
    runtimes = [
        Processor(kafka_bootstrap, namespace, tmp_path, name, "--commit-interval", "1")
        for name in ("a", "b")
    ]
    for runtime in runtimes:
        runtime.start()
    queue, tenant = f"q{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    settings = HttpSettings(kafka_bootstrap, namespace, decision_timeout=20)
    ids: list[str] = []
    try:
        with (
            Served(settings) as served,
            Served(settings) as other,
            httpx.Client(base_url=served.url, timeout=120) as http,
        ):
            for n in range(JOBS):
                posted = http.post("/ojs/v1/jobs", json=job(n, tenant, queue))
                assert posted.status_code == 201, posted.text  # jobs of a key wait freely
                assert posted.json()["job"]["unique_concurrency"] == LIMIT
                ids.append(posted.json()["job"]["id"])
            shown = http.get(f"/ojs/v1/jobs/{ids[0]}").json()["job"]
            assert (shown["unique_concurrency"], shown["state"]) == (LIMIT, "available")
            client = Client(kafka_bootstrap, namespace)
            key = str(shown["unique_key"])
            try:
                _held_back_at_the_limit(client, ids, key)
                with (
                    Claimer(
                        client, ids, "concurrency_limit", "greedy", {"unique_key": key}, undo=True
                    ) as greedy,
                    Workers([served.url, other.url], queue) as workers,
                ):
                    for runtime, after in zip(runtimes, (JOBS // 4, JOBS // 2), strict=True):
                        wait_for(lambda n=after: workers.done() + greedy.done >= n, 180)
                        runtime.kill()  # mid-load: claims and acks in flight
                        time.sleep(2)
                        runtime.start()
                    wait_for(lambda: all(state(http, i) == "completed" for i in ids), 240)
            finally:
                client.close()
            print(f"the SDK worker ran {greedy.done} jobs, refused {greedy.refused} times")
    finally:
        for runtime in runtimes:
            runtime.stop()

    reader = Reader(kafka_bootstrap, [cat.name("decisions"), cat.name("job_states")])
    try:
        reader.settle(quiet=3)
        audit = [r["value"] for r in reader.records.get(cat.name("decisions"), [])]
        states = [r["value"] for r in reader.records.get(cat.name("job_states"), [])]
    finally:
        reader.close()
    events = [r for r in audit if r.get("kind") == "event" and r.get("key") == key]
    # The key's events, in its partition's log order: the running jobs at every step.
    running: set[str] = set()
    most, completed = 0, {i: 0 for i in ids}
    for record in events:
        what = record["what"]
        if what["outcome"] != "applied":
            continue
        if what["state"] == "active":
            running.add(what["job_id"])
        else:
            running.discard(what["job_id"])
        if what["state"] == "completed":
            completed[what["job_id"]] += 1
        most = max(most, len(running))
    refused = [r for r in events if (r["what"].get("error") or {}).get("code")
               == "concurrency_limit"]  # fmt: skip
    print(f"{len(events)} events, {len(refused)} claims refused at the limit, at most {most} ran")
    assert most == LIMIT and not running
    assert completed == {i: 1 for i in ids}
    # By the jobs' own records: each one's last record completed, its active spans (one
    # attempt each, or the last one's) never more than the limit at once in event time.
    final = {s["id"]: s for s in states if isinstance(s, dict) and s.get("id") in completed}
    assert {s["state"] for s in final.values()} == {"completed"} and len(final) == JOBS
    spans = sorted(
        (parse_rfc3339(s[stamp]), delta)
        for s in final.values()
        for stamp, delta in (("started_at", 1), ("completed_at", -1))
    )  # an end sorts before a start of the same millisecond
    at_once = 0
    for _, delta in spans:
        at_once += delta
        assert at_once <= LIMIT
