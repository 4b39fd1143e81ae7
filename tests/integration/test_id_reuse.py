"""A job id used again after its dead letter is deleted, over HTTP against a broker, with a
retention of seconds: the keyed job that takes the id stays visible and is handed out after
the first job's retention ends, and an idempotency key's refusal stays its answer."""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from gateway.core.jobs import uuid7
from tests.integration.harness import Processor, apply_topics
from tests.integration.test_serve_workers import _wait_health, start_serve
from tests.support import free_port_block

pytestmark = pytest.mark.kafka

RETENTION = "5"
SWEPT_BY_S = 5 + 10 + 5  # retention, the tombstones' bucket, and slack for a loaded machine


def _discard_and_delete(http: httpx.Client, job_id: str, queue: str) -> None:
    fetched = http.post("/ojs/v1/workers/fetch", json={"queues": [queue]}).json()["jobs"]
    assert [j["id"] for j in fetched] == [job_id]
    # Its one attempt failed: discarded.
    nack = http.post("/ojs/v1/workers/nack", json={"job_id": job_id, "error": {"message": "b"}})
    assert nack.status_code == 200 and nack.json()["state"] == "discarded", nack.text
    deleted = http.delete(f"/ojs/v1/dead-letter/{job_id}")
    assert deleted.status_code == 200, deleted.text


def test_a_keyed_job_taking_a_deleted_dead_letters_id_outlives_its_retention(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    namespace = f"t{uuid.uuid4().hex[:10]}"
    apply_topics(kafka_bootstrap, namespace)
    proc = Processor(kafka_bootstrap, namespace, tmp_path, "1",
                     "--retention-seconds", RETENTION).start()  # fmt: skip
    port = free_port_block()
    serve = start_serve(kafka_bootstrap, namespace, port, tmp_path,
                        "--retention-seconds", RETENTION)  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    tag = uuid.uuid4().hex
    job_id, queue = uuid7(int(time.time() * 1000), None, os.urandom(8)), f"reuse-{tag[:8]}"
    plain = {"id": job_id, "type": "reuse.plain", "args": [tag], "queue": queue,
             "max_attempts": 1}  # fmt: skip
    keyed: dict[str, Any] = {"id": job_id, "type": "reuse.keyed", "args": [tag],
                             "queue": queue, "unique": {"keys": ["type", "args"]}}  # fmt: skip
    idem = {"Idempotency-Key": f"{tag}-refused"}
    try:
        _wait_health(base, serve, tmp_path / "serve.log")
        with httpx.Client(base_url=base, timeout=60) as http:
            assert http.post("/ojs/v1/jobs", json=plain).status_code == 201
            # Under an idempotency key, a keyed job naming the taken id: refused, and that
            # refusal is the answer to every retry, even once the id is free.
            refused = http.post("/ojs/v1/jobs", json={**keyed, "args": [tag, 0]}, headers=idem)
            assert refused.status_code == 409, refused.text
            _discard_and_delete(http, job_id, queue)
            discarded = time.monotonic()
            again = http.post("/ojs/v1/jobs", json={**keyed, "args": [tag, 0]}, headers=idem)
            assert (again.status_code, again.content) == (409, refused.content)

            taken = http.post("/ojs/v1/jobs", json=keyed)
            assert taken.status_code == 201, taken.text
            # The first job's tombstone falls due 5 s after it ended and is swept at the end
            # of its 10 s bucket, by the next tick (twice a second): writing nothing, it leaves
            # no audit record to wait for, so the test waits past it.
            time.sleep(max(0.0, discarded + SWEPT_BY_S - time.monotonic()))
            # The view, which follows job_states, keeps showing the keyed job all the while.
            for _ in range(15):
                shown = http.get(f"/ojs/v1/jobs/{job_id}")
                assert shown.status_code == 200, shown.text
                assert shown.json()["job"]["type"] == "reuse.keyed"
                time.sleep(0.2)
            fetched = http.post("/ojs/v1/workers/fetch", json={"queues": [queue]}).json()
            assert [j["id"] for j in fetched["jobs"]] == [job_id]
    finally:
        os.killpg(serve.pid, signal.SIGTERM)
        serve.wait(timeout=60)
        proc.stop()
    assert orjson.loads(refused.content)["error"]["code"] == "duplicate"
