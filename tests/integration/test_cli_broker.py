"""The CLI asks the broker of the running `gateway up`, and names the broker it asked
whenever an answer does not come or nothing is found."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import orjson
import pytest

from gateway.broker.ports import free_port_block
from tests.integration.harness import apply_topics
from tests.integration.running import Up

pytestmark = pytest.mark.kafka


def _gateway(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gateway", *args], env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip


def _env(home: Path, namespace: str) -> dict[str, str]:
    """A new user's shell: no $KAFKA_BOOTSTRAP, a gateway home of its own."""
    env = {k: v for k, v in os.environ.items() if k != "KAFKA_BOOTSTRAP"}
    return env | {"GATEWAY_HOME": str(home), "GATEWAY_NAMESPACE": namespace}


def test_enqueue_and_explain_ask_the_running_gateway_up(
    kafka_bootstrap: str, namespace: str, tmp_path: Path
):
    apply_topics(kafka_bootstrap, namespace)
    env = _env(tmp_path / "home", namespace)
    http = free_port_block()
    up = Up(
        tmp_path / "up", "--bootstrap", kafka_bootstrap, "--http-port", str(http),
        "--processes", "1", env=env,
    )  # fmt: skip
    try:
        up.wait_ready(f"http://127.0.0.1:{http}/ojs/v1/health")
        unique = ["--unique", '{"keys": ["type"]}']
        enqueued = _gateway(env, "enqueue", "--type", "cli.broker", *unique)
        assert enqueued.returncode == 0, enqueued.stderr
        job_id = orjson.loads(enqueued.stdout)["job_id"]
        explained = _gateway(env, "explain", job_id)
        assert explained.returncode == 0, explained.stderr
        assert ": 1 audit record\n" in explained.stdout
        # Under an idempotency key: the first decision again, then a reused key refused.
        keyed = ("enqueue", "--type", "cli.idem", "--idempotency-key", "cli-1")
        first, again = _gateway(env, *keyed), _gateway(env, *keyed)
        assert first.returncode == again.returncode == 0, first.stderr + again.stderr
        assert again.stdout == first.stdout
        other = _gateway(env, "enqueue", "--type", "cli.other", "--idempotency-key", "cli-1")
        assert other.returncode == 2 and "idempotency_key_reused" in other.stdout, other
    finally:
        up.interrupt()
    assert not (tmp_path / "home" / "up.json").exists()


def test_a_missing_answer_or_record_names_the_broker_asked(
    kafka_bootstrap: str, namespace: str, tmp_path: Path
):
    apply_topics(kafka_bootstrap, namespace)  # and no processor
    env = _env(tmp_path / "home", namespace) | {"KAFKA_BOOTSTRAP": kafka_bootstrap}
    asked = f"Kafka at {kafka_bootstrap} (from $KAFKA_BOOTSTRAP)"
    waited = _gateway(env, "enqueue", "--type", "cli.broker", "--timeout", "1")
    assert waited.returncode == 3 and waited.stderr.count("\n") == 1, waited.stderr
    assert waited.stderr.startswith("gateway: timeout: 1 of 1 replies missing after 1s")
    assert f"{asked}, namespace {namespace}" in waited.stderr
    missing = _gateway(env, "explain", str(uuid.uuid4()))
    assert missing.returncode == 1 and missing.stderr.count("\n") == 1, missing.stderr
    assert asked in missing.stderr
