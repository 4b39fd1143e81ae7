"""A rate key's limits hold exactly under load and through a crash: two `gateway serve`
processes of two workers each (four views, none knowing the others' claims until it reads
them), two processor runtimes under one supervisor, twenty fetching workers, one key limited
to 5 starts a second and 2 at once, and one runtime killed with SIGKILL mid-run (the
supervisor starts it again; the group hands its partitions round meanwhile).

Read back from the log: no one-second window of the home's grants (less the permits given
back unused) holds more than 5, the home never holds more than 2 permits, the jobs' own
transitions never show more than 2 running at once, and every job completed exactly once."""

from __future__ import annotations

import os
import random
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.core.times import parse_rfc3339
from tests.integration.harness import Processor, Reader, apply_topics
from tests.integration.test_processes import runtimes, wait_until_all_ready
from tests.integration.test_serve_workers import _wait_health, start_serve
from tests.integration.workers import Threads
from tests.support import free_port_block

pytestmark = pytest.mark.kafka
JOBS = 60
WORKERS = 20
RATE, CONCURRENCY = 5, 2


class Fetchers(Threads):
    """Worker threads spread over the serve processes: fetch one job, work a moment, ack."""

    def __init__(self, urls: list[str], queue: str) -> None:
        super().__init__([(f"w{i}", urls[i % len(urls)]) for i in range(WORKERS)])
        self.queue = queue
        self.fetched: list[str] = []

    def _run(self, name: str, url: str) -> None:
        with httpx.Client(base_url=url, timeout=60) as http:
            while not self.stop.is_set():
                body = {"queues": [self.queue], "count": 1, "worker_id": name,
                        "visibility_timeout_ms": 15_000}  # fmt: skip
                try:
                    fetched = http.post("/ojs/v1/workers/fetch", json=body)
                except httpx.HTTPError:
                    time.sleep(0.1)
                    continue
                jobs = fetched.json().get("jobs") if fetched.status_code == 200 else None
                if not jobs:
                    time.sleep(0.05)
                    continue
                with self.lock:
                    self.fetched.append(jobs[0]["id"])
                time.sleep(random.uniform(0.02, 0.1))  # the work
                self._ack(http, jobs[0]["id"])

    def _ack(self, http: httpx.Client, job_id: str) -> None:
        while not self.stop.is_set():
            try:
                answer = http.post("/ojs/v1/workers/ack", json={"job_id": job_id})
                if answer.status_code in (200, 409, 404):  # done, or no longer ours to ack
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)


def _states(http: httpx.Client, ids: list[str]) -> dict[str, str]:
    shown: dict[str, str] = {}
    for job_id in ids:
        try:
            answer = http.get(f"/ojs/v1/jobs/{job_id}")
        except httpx.HTTPError:
            continue
        if answer.status_code == 200:
            shown[job_id] = answer.json()["job"]["state"]
    return shown


def max_in_window(starts: list[int], period_ms: int) -> int:
    """The most starts any window (t - period, t] holds."""
    most, first = 0, 0
    for last, at in enumerate(starts):
        while starts[first] <= at - period_ms:
            first += 1
        most = max(most, last - first + 1)
    return most


def test_a_rate_key_holds_exactly_through_load_and_a_killed_runtime(
    kafka_bootstrap: str, namespace: str, tmp_path: Path
) -> None:
    cat = apply_topics(kafka_bootstrap, namespace)
    metrics = free_port_block()
    proc = Processor(
        kafka_bootstrap, namespace, tmp_path, "m", "--processes", "2",
        "--metrics-port", str(metrics),
    ).start(wait=False)  # fmt: skip
    serves: list[Any] = []
    queue, key = f"q{uuid.uuid4().hex[:8]}", f"rl-{uuid.uuid4().hex[:8]}"
    limit = {"key": key, "concurrency": CONCURRENCY, "rate": {"limit": RATE, "period": "PT1S"}}
    ids: list[str] = []
    killed_at = None
    began = time.monotonic()
    try:
        assert all(n > 0 for n in wait_until_all_ready(proc, metrics))
        urls = []
        for name in ("a", "b"):
            workdir = tmp_path / name
            workdir.mkdir()
            port = free_port_block()
            serves.append(start_serve(kafka_bootstrap, namespace, port, workdir,
                                      "--workers", "2", "--timeout", "10"))  # fmt: skip
            urls.append(f"http://127.0.0.1:{port}")
        for url, serve, name in zip(urls, serves, ("a", "b"), strict=True):
            _wait_health(url, serve, tmp_path / name / "serve.log")
        with httpx.Client(base_url=urls[0], timeout=60) as http:
            for n in range(JOBS):
                body = {"type": "mail.send", "args": [n], "queue": queue, "rate_limit": limit}
                posted = http.post("/ojs/v1/jobs", json=body)
                assert posted.status_code == 201, posted.text
                ids.append(posted.json()["job"]["id"])
            started = time.monotonic()
            with Fetchers(urls, queue) as fetchers:
                deadline = started + 100
                while time.monotonic() < deadline:
                    if killed_at is None and time.monotonic() - started > 5:
                        assert proc.proc is not None
                        os.kill(runtimes(proc.proc.pid)[-1], signal.SIGKILL)
                        killed_at = time.monotonic() - started
                    if set(_states(http, ids).values()) == {"completed"}:
                        break
                    time.sleep(1)
                ran_s = time.monotonic() - started
                shown = _states(http, ids)
            assert set(shown.values()) == {"completed"} and len(shown) == JOBS, shown
            inspected = http.get(f"/ojs/v1/rate-limits/{key}").json()
    finally:
        for serve in serves:
            serve.send_signal(signal.SIGTERM)
        for serve in serves:
            serve.wait(timeout=60)
        proc.stop()
    assert (
        killed_at is not None
        and b"processor runtime exited; restarting" in proc.log_path.read_bytes()
    )

    reader = Reader(kafka_bootstrap, [cat.name("decisions")])
    try:
        reader.settle(quiet=3)
        audit = [r["value"] for r in reader.records.get(cat.name("decisions"), [])]
    finally:
        reader.close()
    # The home's decisions: grants, refusals, permits given back.
    told = [
        r["what"]["rate"] for r in audit
        if r.get("kind") == "rate" and (r.get("what") or {}).get("rate", {}).get("key") == key
    ]  # fmt: skip
    unused = {t["released"] for t in told if t.get("unused")}
    granted = [t for t in told if t.get("outcome") == "granted"]
    starts = sorted(t["permit_at"] for t in granted if t["permit"] not in unused)
    refused = sum(1 for t in told if t.get("outcome") == "refused")
    most = max_in_window(starts, 1000)
    held = max((t.get("held", 0) for t in told), default=0)
    # The jobs' own transitions at their routes, by record time: a claim opens a run, leaving
    # active ends it.
    wanted = set(ids)
    moves = [
        (parse_rfc3339(r["at"]) or 0, r["what"]) for r in audit
        if (r.get("what") or {}).get("job_id") in wanted and r["what"].get("outcome") == "applied"
    ]  # fmt: skip
    spans: list[tuple[int, int]] = []
    completions: dict[str, int] = {}
    for at, what in moves:
        state, before = what.get("state"), what.get("previous_state")
        if state == "active" and before != "active":
            spans.append((at, 1))
        elif before == "active" and state != "active":
            spans.append((at, -1))
        if state == "completed" and before != "completed":
            completions[what["job_id"]] = completions.get(what["job_id"], 0) + 1
    at_once = running = 0
    for _, delta in sorted(spans):  # an end sorts before a start of the same millisecond
        running += delta
        at_once = max(at_once, running)
    attempts = sum(1 for _, delta in spans if delta == 1)
    print(
        f"{JOBS} jobs, {WORKERS} workers on 2 serve processes x 2 workers, 2 runtimes, one "
        f"killed at {killed_at:.1f}s; done in {ran_s:.1f}s ({time.monotonic() - began:.0f}s "
        f"in all): {len(granted)} grants, {len(unused)} given back unused, {refused} refused, "
        f"{len(starts)} starts, {attempts} runs, {len(fetchers.fetched)} handed out; "
        f"most starts in a second {most} (limit {RATE}), "
        f"most permits held {held}, most running at once {at_once} (limit {CONCURRENCY}); "
        f"home shows {inspected}"
    )
    assert most <= RATE and held <= CONCURRENCY and at_once <= CONCURRENCY
    assert len(starts) >= JOBS and refused > 0
    assert completions == dict.fromkeys(ids, 1), "a job completed other than once"
