"""What a user meets around the quick start: health, failures, logs, Ctrl-C."""

from __future__ import annotations

import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import time

import httpx
import pytest

from gateway.auth import credentials, keys
from gateway.sdk import Client
from tests.integration.cli import gateway
from tests.integration.harness import Processor, apply_topics, fingerprint_of
from tests.integration.running import Up, _group_alive
from tests.support import free_port_block

# Ctrl-C rounds in CI; GATEWAY_SHUTDOWN_ROUNDS=150 runs more by hand.
SHUTDOWN_ROUNDS = int(os.environ.get("GATEWAY_SHUTDOWN_ROUNDS", "12"))

JOB = {"type": "email.send", "args": {"user_id": 7}, "unique": {"keys": ["type", "args"]}}


def _unreachable() -> str:
    return f"127.0.0.1:{free_port_block()}"  # nothing listens there


@pytest.mark.parametrize(
    "argv",
    [
        ("topics", "apply"),
        ("enqueue", "--type", "t"),
        ("explain", "0" * 64),
        ("replay",),
        ("process",),
        ("serve",),
        ("up",),
    ],
    ids=lambda argv: argv[0],
)
def test_without_a_broker_every_command_fails_in_one_line(argv):
    address = _unreachable()
    started = time.monotonic()
    result = gateway(*argv, "--bootstrap", address, input="", timeout=60)
    took = time.monotonic() - started
    print(f"gateway {argv[0]} without a broker: exit {result.returncode} in {took:.1f}s")
    assert result.returncode == 3, result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"gateway: no Kafka broker answered at {address} within 5s")
    assert "start one with: gateway kafka up" in result.stderr


@pytest.mark.kafka
def test_explain_into_head_ends_without_a_traceback(kafka_bootstrap, namespace, tmp_path):
    apply_topics(kafka_bootstrap, namespace)
    proc = Processor(kafka_bootstrap, namespace, tmp_path, "1").start()
    try:
        with Client(kafka_bootstrap, namespace) as client:
            # Far more than a pipe holds (64 KiB), so the writer meets the closed pipe.
            answers = client.enqueue_many([JOB] * 600, wait=True, timeout=120)
        assert sum(a.outcome == "rejected" for a in answers) == 599
    finally:
        proc.stop()
    command = (
        f"set -o pipefail; {sys.executable} -m gateway explain {fingerprint_of(JOB)} "
        f"--bootstrap {kafka_bootstrap} --namespace {namespace} | head -3"
    )
    result = subprocess.run(
        ["bash", "-c", command], capture_output=True, text=True, timeout=120
    )  # fmt: skip
    assert result.stdout.count("\n") == 3
    assert result.stdout.startswith("unique_key ")
    assert result.stderr == ""
    assert result.returncode == 141  # the writer's documented exit when its reader left


@pytest.mark.kafka
def test_health_is_503_until_this_runs_processor_owns_its_partitions(
    kafka_bootstrap, namespace, tmp_path
):
    http_port, status_port = free_port_block(), free_port_block()
    base = f"http://127.0.0.1:{http_port}"
    args = ("--bootstrap", kafka_bootstrap, "--namespace", namespace)
    args += ("--http-port", str(http_port), "--state-dir", str(tmp_path / "state"))
    args += ("--metrics-port", str(status_port))
    for round_ in ("first", "restarted"):
        # The restarted round begins while the first run's static member is
        # still listed in the group: only this run's processor may make it ready.
        up = Up(tmp_path / round_, *args)
        try:
            seen = up.wait_ready(f"{base}/ojs/v1/health")
            # Serve usually answers before the processor owns its partitions, and a fast
            # processor may beat it (then 200 is right at once): each 503 says why.
            # test_http.py holds the 503 of a serve without a processor.
            for answer in seen[:-1]:
                assert answer.status_code == 503, answer.text
                body = answer.json()
                assert body["status"] == "starting" and body["reason"], body
            assert seen[-1].json() == {"status": "ok"}
            # Ready because this run's processor says so, at its own status port.
            assert httpx.get(f"http://127.0.0.1:{status_port}/ready").status_code == 200
            live = httpx.get(f"{base}/ojs/v1/health/live")
            assert live.status_code == 200 and live.json() == {"status": "ok"}
            posted = httpx.post(f"{base}/ojs/v1/jobs", json=JOB, timeout=60)
            assert posted.status_code == (201 if round_ == "first" else 409), posted.text
        finally:
            took = up.interrupt()
        reasons = sorted({a.json()["reason"] for a in seen if a.status_code == 503})
        print(f"{round_}: {len(seen) - 1} answers of 503 before 200: {reasons}; stop {took:.2f}s")
        _assert_logs(up, fingerprint_of(JOB))


@pytest.mark.kafka
def test_with_credentials_up_guards_the_processors_metrics_and_health_still_asks_it(
    kafka_bootstrap, namespace, tmp_path
):
    """`up --credentials` hands its file to the processor: /metrics, on the supervisor's
    port and each runtime's, is 401 without a key, 403 to a producer's, and the metrics to
    a read-only key; /ready stays open, so serve's health, which asks it, turns ready."""
    path, given, made = tmp_path / "credentials.toml", {}, ()
    for role in ("read-only", "producer"):
        given[role] = keys.new_key()
        new = credentials.principal(role, role, None, ["*"])
        made = credentials.with_key(made, role, given[role], 0, new=new)
    credentials.save(path, made)
    http_port, status_port = free_port_block(), free_port_block()
    up = Up(
        tmp_path / "up", "--bootstrap", kafka_bootstrap, "--namespace", namespace,
        "--http-port", str(http_port), "--state-dir", str(tmp_path / "state"),
        "--metrics-port", str(status_port), "--processes", "2", "--credentials", str(path),
    )  # fmt: skip
    try:
        up.wait_ready(f"http://127.0.0.1:{http_port}/ojs/v1/health")
        for port in (status_port, status_port + 1, status_port + 2):
            metrics = f"http://127.0.0.1:{port}/metrics"
            refused = httpx.get(metrics, timeout=10)
            assert refused.status_code == 401, refused.text
            assert refused.json()["error"]["code"] == "unauthenticated"
            producer = {"Authorization": f"Bearer {given['producer']}"}
            denied = httpx.get(metrics, headers=producer, timeout=10)
            assert denied.status_code == 403 and "gateway_" not in denied.text
            assert denied.json()["error"]["code"] == "permission_denied"
            reader = {"Authorization": f"Bearer {given['read-only']}"}
            read = httpx.get(metrics, headers=reader, timeout=10)
            assert read.status_code == 200 and "gateway_decisions_total" in read.text, port
            assert httpx.get(f"http://127.0.0.1:{port}/ready", timeout=10).status_code == 200
        # The reader's key revoked, and SIGHUP to up alone: passed on, read again everywhere.
        credentials.save(path, credentials.without_keys(made, "read-only"))
        os.kill(up.proc.pid, signal.SIGHUP)
        for port in (status_port, status_port + 1, status_port + 2):
            deadline = time.monotonic() + 10
            while (code := httpx.get(f"http://127.0.0.1:{port}/metrics", headers=reader,
                                     timeout=10).status_code) == 200:  # fmt: skip
                assert time.monotonic() < deadline, f"port {port} still takes a revoked key"
                time.sleep(0.1)
            assert code == 401, port
        assert up.proc.poll() is None
        assert httpx.get(f"http://127.0.0.1:{http_port}/ojs/v1/health").status_code == 200
    finally:
        up.interrupt()
    refusals = [line for line in up.log_lines() if line["logger"] == "gateway.security"]
    assert {(line["route"], line["status"]) for line in refusals} == {
        ("GET /metrics", 401), ("GET /metrics", 403),
    }  # fmt: skip


def _assert_logs(up: Up, key: str) -> None:
    """Every stderr line is JSON, uvicorn's under its own loggers; the key only at DEBUG."""
    lines = up.log_lines()
    loggers = {line["logger"] for line in lines}
    assert {"uvicorn.error", "uvicorn.access", "gateway.processor"} <= loggers, loggers
    above_debug = [line for line in lines if line["level"] != "debug"]
    assert not [line for line in above_debug if key in str(line)]


@pytest.mark.kafka
def test_ctrl_c_ends_everything_every_time(kafka_bootstrap, namespace, tmp_path):
    """Ctrl-C at a random moment of `gateway up`'s life, SHUTDOWN_ROUNDS times; the stop
    times are printed, not asserted (`interrupt` fails only if a process never ends)."""
    http_port = free_port_block()
    args = ("--bootstrap", kafka_bootstrap, "--namespace", namespace)
    args += ("--http-port", str(http_port), "--state-dir", str(tmp_path / "state"))
    rng = random.Random()
    times = []
    for round_ in range(SHUTDOWN_ROUNDS):
        up = Up(tmp_path / f"round-{round_}", *args)
        # From still importing to joining the group to serving: 0.5 to 12 s.
        time.sleep(rng.uniform(0.5, 12.0))
        times.append(up.interrupt())
        up.log_lines()  # every line JSON, no traceback
    print(
        f"Ctrl-C to the last process gone, {len(times)} rounds: median "
        f"{statistics.median(times):.2f}s (min {min(times):.2f}, max {max(times):.2f})"
    )


@pytest.mark.kafka
def test_up_whose_http_port_is_taken_ends_non_zero_naming_the_port(
    kafka_bootstrap, namespace, tmp_path
):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        http_port = taken.getsockname()[1]
        up = Up(
            tmp_path, "--bootstrap", kafka_bootstrap, "--namespace", namespace,
            "--http-port", str(http_port), "--state-dir", str(tmp_path / "state"),
        )  # fmt: skip
        try:
            code = up.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            up.kill()
            stderr = up.stderr()[-3000:]
            raise AssertionError(f"still up with its HTTP port taken:\n{stderr}") from None
    assert code == 1, up.stderr()[-3000:]
    # Refused before anything is started or printed (no `http: ...`, no `processor: starting`).
    assert up.stdout() == ""
    assert up.stderr().startswith(f"gateway: cannot listen on 127.0.0.1:{http_port} (--http-port)")
    assert up.stderr().count("\n") == 1
    assert not _group_alive(up.proc.pid), "a process it started outlived it"
