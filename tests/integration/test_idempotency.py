"""Idempotency keys over HTTP, against a broker: two serve workers, and the processor killed
outright between the first attempt and its retries. A retry gets the first answer's bytes,
whichever worker takes it, and never makes a second job."""

from __future__ import annotations

import os
import signal
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.harness import Processor, Reader, apply_topics
from tests.integration.test_serve_workers import _children, _wait_health, start_serve
from tests.support import free_port_block

pytestmark = pytest.mark.kafka

WORKERS = 2
RETRIES = 4


def _post(base: str, path: str, body: Any, headers: dict[str, str]) -> httpx.Response:
    """On a new connection each time: the kernel hands it to either worker."""
    return httpx.post(f"{base}{path}", json=body, headers=headers, timeout=60)


@pytest.mark.parametrize("runtimes", ["1", "2"])
def test_a_retry_after_a_kill_gets_the_original_bytes_on_any_worker_and_no_second_job(
    kafka_bootstrap: str, tmp_path: Path, runtimes: str
) -> None:
    """With two processor runtimes, a key's home and its requests' routes are partitions
    of either: the retry crosses from one to the other through the log."""
    namespace = f"t{uuid.uuid4().hex[:10]}"
    cat = apply_topics(kafka_bootstrap, namespace)
    # Transactions of seconds: the kill lands before the first answers' commit, so the
    # successor decides them again from the log, then answers the retries.
    proc = Processor(kafka_bootstrap, namespace, tmp_path, "1", "--commit-interval", "5",
                     "--processes", runtimes).start()  # fmt: skip
    port = free_port_block()
    base = f"http://127.0.0.1:{port}"
    log = tmp_path / "serve.log"
    serve = start_serve(kafka_bootstrap, namespace, port, tmp_path, "--workers", str(WORKERS))
    tag = uuid.uuid4().hex
    unique = {"keys": ["type", "args"]}
    keyed = {"type": "idem.keyed", "args": [tag, 1], "unique": unique}
    plain = {"type": "idem.plain", "args": [tag, 2]}
    cases = [
        ("/ojs/v1/jobs", keyed, {"Idempotency-Key": f"{tag}-keyed"}),
        ("/ojs/v1/jobs", plain, {"Idempotency-Key": f"{tag}-plain"}),
        ("/ojs/v1/jobs", keyed, {"Idempotency-Key": f"{tag}-duplicate"}),  # a 409, kept too
        ("/ojs/v1/jobs/batch", {"jobs": [{**keyed, "args": [tag, 3]}, {**plain, "args": [tag, 4]}],
                                "idempotency_key": f"{tag}-batch"}, {}),
    ]  # fmt: skip
    try:
        _wait_health(base, serve, log)
        assert len(_children(serve.pid)) == WORKERS
        first = []
        for path, body, headers in cases:
            answer = _post(base, path, body, headers)
            first.append((answer.status_code, answer.content))
        assert [status for status, _ in first] == [201, 201, 409, 201], first

        proc.kill()
        proc.start()

        # Every retry at once: each answer waits on its key's hop through the log, which
        # the slow commits make seconds long, and the log orders them all the same.
        with ThreadPoolExecutor(RETRIES * len(cases)) as pool:
            answers = list(pool.map(lambda case: _post(base, *case), cases * RETRIES))
        again = [(a.status_code, a.content) for a in answers]
        assert again == first * RETRIES

        # The same key with another body: 422, naming the key, and no job.
        other = _post(base, "/ojs/v1/jobs", {**plain, "args": [tag, 9]},
                      {"Idempotency-Key": f"{tag}-keyed"})  # fmt: skip
        assert other.status_code == 422, other.text
        error = other.json()["error"]
        assert error["code"] == "idempotency_key_reused"
        assert error["details"] == {"idempotency_key": f"{tag}-keyed"}
        batch = _post(base, "/ojs/v1/jobs/batch",
                      {"jobs": [keyed], "idempotency_key": f"{tag}-batch"}, {})  # fmt: skip
        assert batch.status_code == 422, batch.text
        bad = _post(base, "/ojs/v1/jobs", plain, {"Idempotency-Key": "x" * 257})
        assert bad.status_code == 400 and "Idempotency-Key" in bad.json()["error"]["message"]
    finally:
        os.killpg(serve.pid, signal.SIGTERM)
        serve.wait(timeout=60)
        proc.stop()

    # Committed: one job per job asked for, whatever the kill aborted and the retries asked.
    reader = Reader(kafka_bootstrap, [cat.name("jobs")])
    try:
        reader.settle()
        jobs = [r["value"] for r in reader.records.get(cat.name("jobs"), [])
                if r["value"]["args"][0] == tag]  # fmt: skip
    finally:
        reader.close()
    assert sorted(j["args"][1] for j in jobs) == [1, 2, 3, 4]
