"""Processor state belongs to the cluster and changelog it was built from."""

from __future__ import annotations

import time

import httpx
import pytest
from confluent_kafka.admin import AdminClient

from gateway import admin, catalogue
from gateway.broker import launcher
from gateway.sdk import Client
from tests.integration.cli import gateway
from tests.integration.harness import Processor, apply_topics
from tests.integration.running import Up
from tests.support import free_port_block

pytestmark = pytest.mark.kafka

JOB = {"type": "email.send", "args": {"user_id": 42}, "unique": {"keys": ["type", "args"]}}


def _up_and_post_twice(
    gateway_home, port: int, http_port: int, round_: str, gone: str | None = None
) -> tuple[float, str]:
    """`gateway up`, the quick start's POST twice (201, 409), Ctrl-C; the stop's seconds and
    the job's id. A job id `gone` must be unknown to it."""
    up = Up(gateway_home / round_, "--port", str(port), "--http-port", str(http_port))
    base = f"http://127.0.0.1:{http_port}"
    try:
        up.wait_ready(f"{base}/ojs/v1/health")
        first = httpx.post(f"{base}/ojs/v1/jobs", json=JOB, timeout=60)
        assert first.status_code == 201, first.text
        second = httpx.post(f"{base}/ojs/v1/jobs", json=JOB, timeout=60)
        assert second.status_code == 409, second.text
        job_id = first.json()["job"]["id"]
        assert httpx.get(f"{base}/ojs/v1/jobs/{job_id}").status_code == 200
        if gone is not None:
            assert httpx.get(f"{base}/ojs/v1/jobs/{gone}").status_code == 404
    finally:
        took = up.interrupt()
    assert "stopped the local Kafka broker" in up.stdout()
    up.log_lines()  # every line JSON
    return took, job_id


def test_after_a_purge_the_first_post_is_accepted_and_replay_agrees(gateway_home):
    port, http_port = free_port_block(), free_port_block()
    took, job_id = _up_and_post_twice(gateway_home, port, http_port, "first")
    print(f"gateway up with its own broker stopped {took:.2f}s after Ctrl-C")
    # One state directory per processor process `up` ran (one per core by default).
    states = [p.parent for p in (gateway_home / "state" / "gateway-dedup").glob("*/identity.json")]
    assert states
    view = gateway_home / "views" / "default" / f"port-{http_port}"
    assert (view / "identity.json").exists()

    purged = gateway("kafka", "down", "--purge")
    assert purged.returncode == 0, purged.stderr
    for state in states:
        assert f"deleted processor state {state}" in purged.stdout
        assert not state.exists()
    assert f"deleted HTTP view {view}" in purged.stdout
    assert not view.exists()

    # A brand-new cluster: the same job is new to it, and the purged one is gone from GET.
    _up_and_post_twice(gateway_home, port, http_port, "second", gone=job_id)
    up = gateway("kafka", "up")
    assert up.returncode == 0, up.stderr
    replayed = gateway("replay", "--bootstrap", f"127.0.0.1:{port}")
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert "decided 2 again: 2 verified identical (100.0%)" in replayed.stdout, replayed.stdout


def test_kafka_up_never_replaces_an_existing_cluster(gateway_home):
    port = str(free_port_block())
    assert gateway("kafka", "up", "--port", port).returncode == 0
    running = gateway("kafka", "up", "--brokers", "3")
    assert running.returncode == 1
    assert "gateway kafka down --purge" in running.stderr and "--brokers 3" in running.stderr
    assert gateway("kafka", "down").returncode == 0

    refused = gateway("kafka", "up", "--brokers", "3")
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1
    assert "is stopped, with its data" in refused.stderr
    assert "gateway kafka down --purge" in refused.stderr
    cluster = launcher.load_cluster(gateway_home / "cluster")
    assert cluster is not None and cluster.brokers == 1
    assert (cluster.node_dir(1) / "data" / "meta.properties").exists()

    # Without flags, the stopped cluster comes back as it was, data and all.
    again = gateway("kafka", "up")
    assert again.returncode == 0, again.stderr
    assert f"bootstrap: 127.0.0.1:{port}" in again.stdout
    assert launcher.load_cluster(gateway_home / "cluster") == cluster


def _delete_namespace_topics(bootstrap: str, namespace: str) -> None:
    client = AdminClient({"bootstrap.servers": bootstrap})
    names = [t for t in client.list_topics(timeout=10).topics if namespace in t]
    for future in client.delete_topics(names, operation_timeout=30).values():
        future.result()
    deadline = time.monotonic() + 60
    while any(namespace in t for t in client.list_topics(timeout=10).topics):
        assert time.monotonic() < deadline, "topics not deleted"
        time.sleep(0.5)


def test_state_from_a_recreated_changelog_is_discarded_and_rebuilt(
    kafka_bootstrap, namespace, tmp_path
):
    apply_topics(kafka_bootstrap, namespace)
    proc = Processor(kafka_bootstrap, namespace, tmp_path, "1").start()
    try:
        with Client(kafka_bootstrap, namespace) as client:
            assert client.enqueue(JOB, wait=True, timeout=60).outcome == "accepted"
    finally:
        proc.stop()
    assert "local state was built from another" not in proc.log()

    # The same names, new topics: the local state describes a log that is gone.
    _delete_namespace_topics(kafka_bootstrap, namespace)
    deadline = time.monotonic() + 60
    while True:
        try:
            admin.apply(catalogue.load(namespace=namespace), {"bootstrap.servers": kafka_bootstrap})
            break
        except Exception:  # a deleted topic's name is busy for a moment
            assert time.monotonic() < deadline
            time.sleep(1)
    proc.start()
    try:
        with Client(kafka_bootstrap, namespace) as client:
            assert client.enqueue(JOB, wait=True, timeout=60).outcome == "accepted"
    finally:
        proc.stop()
    discarded = [line for line in proc.log().splitlines() if "local state was built" in line]
    assert len(discarded) == 1, proc.log()
    replayed = gateway("replay", "--bootstrap", kafka_bootstrap, "--namespace", namespace)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert "decided 1 again: 1 verified identical (100.0%)" in replayed.stdout, replayed.stdout
