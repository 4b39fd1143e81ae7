"""A worker that claims a job and goes silent: ticks end its lease on an idle partition."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from gateway.wire import JOB_EVENT, KIND_HEADER
from tests.integration.cli import gateway
from tests.integration.harness import Processor, Reader, apply_topics, producer, send, send_request

pytestmark = pytest.mark.kafka

LEASE_MS = 2_000


def test_a_silent_workers_lease_ends_on_an_idle_partition_and_replay_agrees(
    kafka_bootstrap: str, namespace: str, tmp_path: Path
) -> None:
    cat = apply_topics(kafka_bootstrap, namespace)
    proc = Processor(kafka_bootstrap, namespace, tmp_path, "1").start()
    reader = Reader(kafka_bootstrap, [cat.name("decisions"), cat.name("job_states")])
    prod = producer(kafka_bootstrap)
    # The key is held while the job waits or runs, not while it waits for a retry.
    body = {
        "type": "lease.job", "args": [uuid.uuid4().hex],
        "unique": {"keys": ["type", "args"], "states": ["available", "active"]},
    }  # fmt: skip

    def decide(request_id: str) -> dict[str, Any]:
        key = send_request(prod, cat, body, request_id=request_id)
        prod.flush()
        for _ in range(60):
            for record in reader.records.get(cat.name("decisions"), []):
                if record["value"].get("request_id") == request_id:
                    assert record["value"]["unique_key"] == key
                    return dict(record["value"])
            reader.drain(0.5)
        raise AssertionError(f"no decision for {request_id}:\n{proc.log()}")

    def latest(job_id: str) -> dict[str, Any] | None:
        records = [
            r["value"] for r in reader.records.get(cat.name("job_states"), [])
            if r["key"] == job_id.encode() and isinstance(r["value"], dict)
        ]  # fmt: skip
        return records[-1] if records else None

    try:
        first = decide("first")
        assert first["outcome"] == "accepted"
        job_id, key = first["job_id"], first["unique_key"]
        assert decide("duplicate")["outcome"] == "rejected"
        # The worker claims the job, and then is never heard of again. Nothing else is sent.
        event = {"job_id": job_id, "unique_key": key, "type": "job.started",
                 "visibility_timeout_ms": LEASE_MS}  # fmt: skip
        send(prod, cat.name("requests"), event, key, {KIND_HEADER: JOB_EVENT.decode()})
        prod.flush()
        deadline = time.monotonic() + 60  # a generous bound, not a measurement
        state = None
        while time.monotonic() < deadline:
            reader.drain(0.5)
            current = latest(job_id)
            state = None if current is None else current["state"]
            if state == "retryable":
                break
        current = latest(job_id)
        assert current is not None and state == "retryable", (current, proc.log())
        assert current["next_attempt_at"] == current["error"]["occurred_at"]  # no backoff
        assert current["error"]["type"] == "visibility_timeout" and current["attempt"] == 1
        assert current["errors"] == [current["error"]]
        # The key followed the job: retryable is not in the policy's states.
        assert decide("after the lease")["outcome"] == "accepted"
    finally:
        reader.close()
        proc.stop()

    where = ["--bootstrap", kafka_bootstrap, "--namespace", namespace]
    replayed = gateway("replay", *where)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    # The three decisions and every event and expiry, decided again: none differs.
    assert "verified identical (100.0%), 0 different" in replayed.stdout, replayed.stdout
    assert "could not verify" not in replayed.stdout
    explained = gateway("explain", job_id, *where)
    assert explained.returncode == 0, explained.stdout + explained.stderr
    assert f"visibility_timeout job {job_id}" in explained.stdout, explained.stdout
