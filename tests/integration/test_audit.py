"""`gateway replay` and `gateway explain` against a log a real processor wrote."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any

import pytest

from gateway.sdk import Client, EventAck
from tests.integration.cli import gateway
from tests.integration.harness import (
    Processor,
    Reader,
    apply_topics,
    fingerprint_of,
    producer,
    send,
    send_request,
)

pytestmark = pytest.mark.kafka


def job(on_conflict: str) -> dict[str, Any]:
    return {
        "type": "audit.job",
        "args": {"user_id": uuid.uuid4().hex, "locale": "en"},
        "unique": {"keys": ["type", "args"], "args_keys": ["user_id"], "on_conflict": on_conflict},
    }


def test_replay_reproduces_every_decision_and_explain_tells_why(
    kafka_bootstrap: str, namespace: str, tmp_path: Path
):
    cat = apply_topics(kafka_bootstrap, namespace)
    proc = Processor(kafka_bootstrap, namespace, tmp_path, "1", "--max-request-bytes", "4096")
    proc.start()
    reader = Reader(kafka_bootstrap, [cat.name("decisions")])
    prod = producer(kafka_bootstrap)
    client = Client(kafka_bootstrap, namespace)
    sent = 0

    def request(body: dict[str, Any]) -> dict[str, Any]:
        nonlocal sent
        request_id = uuid.uuid4().hex
        send_request(prod, cat, body, request_id=request_id)
        prod.flush()
        sent += 1
        for _ in range(60):
            found = [r for r in decisions() if r["request_id"] == request_id]
            if found:
                return found[0]
            reader.drain(0.5)
        raise AssertionError(f"no decision for {request_id}:\n{proc.log()}")

    def decisions() -> list[dict[str, Any]]:
        """The decisions (the trail's other audit records left out)."""
        trail = [r["value"] for r in reader.records.get(cat.name("decisions"), [])]
        return [r for r in trail if r.get("kind", "request") == "request"]

    def event(body: dict[str, Any], key: str, **fields: Any) -> None:
        # Answered once applied: the next request finds it.
        ack = client.publish_event({"job_id": body["id"], "unique_key": key, **fields}, timeout=60)
        assert isinstance(ack, EventAck) and str(ack.outcome) == "applied", ack

    try:
        rejecting, replacing, ignoring = job("reject"), job("replace"), job("ignore")
        key_a = fingerprint_of(rejecting)
        first_a = request(rejecting)
        assert request(rejecting)["outcome"] == "rejected"
        first_b = request(replacing)
        event(first_b["job"], fingerprint_of(replacing), type="job.started")
        replaced = request(replacing)
        assert replaced["outcome"] == "replaced"
        first_c = request(ignoring)
        assert request(ignoring)["outcome"] == "ignored"
        event(first_a["job"], key_a, type="job.started")
        event(first_a["job"], key_a, type="job.completed")
        second_a = request(rejecting)
        assert second_a["outcome"] == "accepted"  # completed released the key
        key_c = fingerprint_of(ignoring)
        event(first_c["job"], key_c, type="job.started")  # a job fails only while it runs
        event(first_c["job"], key_c, type="job.failed", attempt=3, max_attempts=3)
        assert request(ignoring)["outcome"] == "accepted"  # discarded released it
        for bad in (b"not json", json.dumps({"type": 5}).encode(), b"x" * 5000):
            send(prod, cat.name("intake"), bad)
            sent += 1
        via_intake = job("reject")
        for _ in range(2):
            send(prod, cat.name("intake"), via_intake)
            sent += 1
        prod.flush()
        reader.poll_until(cat.name("decisions"), sent, timeout=60)
        reader.settle(quiet=2)
        assert len(decisions()) == sent
        outcomes = sorted(d["outcome"] for d in decisions())
        assert outcomes.count("invalid") == 3 and "replaced" in outcomes
    finally:
        client.close()
        reader.close()
        proc.stop()

    where = ["--bootstrap", kafka_bootstrap, "--namespace", namespace]
    replayed = gateway("replay", *where, "--max-request-bytes", "4096")
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    # Every decision, and every event (its own audit record), decided again: none differs.
    verified = re.search(r"decided (\d+) again: (\d+) verified identical \(100.0%\), 0 different",
                         replayed.stdout)  # fmt: skip
    assert verified is not None, replayed.stdout
    assert int(verified[1]) == sent + 5  # five events
    assert "could not verify" not in replayed.stdout and "problems" not in replayed.stdout

    policy = tmp_path / "ignore.json"
    policy.write_text(json.dumps({"keys": ["type", "args"], "args_keys": ["user_id"],
                                  "on_conflict": "ignore"}))  # fmt: skip
    flipped = gateway("replay", *where, "--max-request-bytes", "4096", "--policy", str(policy))
    assert flipped.returncode == 0, flipped.stdout + flipped.stderr
    assert "rejected -> ignored: 2" in flipped.stdout  # key A's duplicate and intake's
    assert "replaced -> ignored: 1" in flipped.stdout
    assert "3 decisions would flip" in flipped.stdout

    by_job = gateway("explain", first_a["job_id"], *where)
    assert by_job.returncode == 0, by_job.stdout + by_job.stderr
    by_key = gateway("explain", key_a, *where)
    assert by_key.stdout == by_job.stdout
    lines = by_key.stdout.splitlines()
    heads = [line.split("  ")[1] for line in lines[1:] if not line.startswith(" ")]
    assert lines[0] == f"unique_key {key_a}: {len(heads)} audit records"
    assert [h.split()[:2] for h in heads] == [
        ["decision", "accepted"], ["decision", "rejected"], ["event", "applied"],
        ["event", "applied"], ["decision", "accepted"],
    ]  # fmt: skip
    text = by_key.stdout
    assert f"rejected: job {first_a['job_id']} is `available`, in the states" in text
    assert f"job {first_a['job_id']}: available → active" in text
    assert f"job {first_a['job_id']} is `completed`, not one of the states" in text
    assert "on_conflict reject" in text

    by_replaced = gateway("explain", first_b["job_id"], *where)
    assert f"replaced: cancelled job {first_b['job_id']} (active)" in by_replaced.stdout
    by_failed = gateway("explain", first_c["job_id"], *where)
    # Told from the job as the event left it: the attempt the failure reported.
    assert f"job {first_c['job_id']}: active → discarded (attempt 3 of 3 failed, attempts " in (
        by_failed.stdout
    )

    missing = gateway("explain", str(uuid.uuid4()), *where)
    assert missing.returncode == 1
    assert missing.stderr.strip().startswith("gateway: no audit record mentions")
