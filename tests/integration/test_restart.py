"""A restart of the same cluster and version keeps the processor's state: nothing is deleted,
nothing restored but the changelog's tail past each store, and decisions go on from it."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from gateway.processor.changelogs import changelog_name
from gateway.sdk import Client
from gateway.wire import group_name
from tests.integration.harness import Processor, apply_topics, end_offsets
from tests.support import free_port_block

pytestmark = pytest.mark.kafka

KEYS = 30
DELETED = "local state was built from another"


def _job(n: int) -> dict:
    return {"type": "restart.job", "args": [n], "unique": {"keys": ["type", "args"]}}


def _outcomes(bootstrap: str, namespace: str, jobs: list[dict]) -> list[str]:
    with Client(bootstrap, namespace) as client:
        return [str(client.enqueue(job, wait=True, timeout=60).outcome) for job in jobs]


def _state_keys(port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    [value] = [line for line in text.splitlines() if line.startswith("gateway_state_keys ")]
    return float(value.split()[1])


def _wait_for(condition: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "not so in time"
        time.sleep(0.1)


def _restored_records(log: str) -> int:
    """The changelog records the runs in `log` restored, as their `state restored` lines say."""
    lines = [orjson.loads(line) for line in log.splitlines() if '"state restored"' in line]
    return sum(int(line["records"]) for line in lines)


def test_a_restart_keeps_the_state_and_decides_on(
    kafka_bootstrap: str, namespace: str, tmp_path: Path
):
    cat = apply_topics(kafka_bootstrap, namespace)
    metrics = free_port_block()
    proc = Processor(kafka_bootstrap, namespace, tmp_path, "1", "--metrics-port", str(metrics))
    first = [_job(n) for n in range(KEYS)]
    proc.start()
    try:
        assert _outcomes(kafka_bootstrap, namespace, first) == ["accepted"] * KEYS
    finally:
        proc.stop()
    stores = tmp_path / "state-1" / "stores" / "requests"
    assert any(stores.iterdir())

    # Stopped gracefully: every store is at its changelog's end, so nothing is read.
    log_from = len(proc.log_path.read_text())
    proc.start()
    try:
        assert _state_keys(metrics) == KEYS
        assert _outcomes(kafka_bootstrap, namespace, first[:5]) == ["rejected"] * 5
        assert _outcomes(kafka_bootstrap, namespace, [_job(KEYS)]) == ["accepted"]
    finally:
        proc.stop()
    after_stop = proc.log_path.read_text()[log_from:]
    assert DELETED not in after_stop and '"state restored"' not in after_stop, after_stop

    # Killed mid-run: at most the tail past the last commit's store write is restored.
    log_from = len(proc.log_path.read_text())
    proc.start()
    assert _outcomes(kafka_bootstrap, namespace, [_job(KEYS + 1)]) == ["accepted"]
    proc.kill()
    proc.start()
    try:
        assert _outcomes(kafka_bootstrap, namespace, first[5:10]) == ["rejected"] * 5
        assert _outcomes(kafka_bootstrap, namespace, [_job(KEYS + 1)]) == ["rejected"]
        assert _outcomes(kafka_bootstrap, namespace, [_job(KEYS + 2)]) == ["accepted"]
        _wait_for(lambda: _state_keys(metrics) == KEYS + 3)
    finally:
        proc.stop()
    after_kill = proc.log_path.read_text()[log_from:]
    assert DELETED not in after_kill, after_kill
    partitions = cat.by_role("requests").partitions
    changelog = changelog_name(group_name(namespace), cat.name("requests"))
    assert _restored_records(after_kill) < end_offsets(kafka_bootstrap, changelog, partitions)


def test_two_runtimes_started_together_keep_their_state_across_restarts(
    kafka_bootstrap: str, namespace: str, tmp_path: Path
):
    """As `gateway up` runs them: both create and describe the changelogs at once."""
    apply_topics(kafka_bootstrap, namespace)
    proc = Processor(kafka_bootstrap, namespace, tmp_path, "1", "--processes", "2")
    jobs = [_job(n) for n in range(10)]
    for expected in ("accepted", "rejected", "rejected"):
        proc.start()
        try:
            assert _outcomes(kafka_bootstrap, namespace, jobs) == [expected] * len(jobs)
        finally:
            proc.stop()
    assert DELETED not in proc.log_path.read_text(), proc.log()
