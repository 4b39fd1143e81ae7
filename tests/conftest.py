"""The one way tests reach a Kafka broker, and per-test isolation.

Order: $KAFKA_BOOTSTRAP if set; else a testcontainers Kafka when a Docker
engine answers; else a cluster from the local launcher, started in a directory
of this run's own under the gateway home and stopped (and deleted) at the end.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.broker import launcher
from gateway.home import gateway_home as home_directory
from tests.support import free_port_block


def _docker_answers() -> bool:
    try:
        import docker

        docker.from_env(timeout=3).ping()
        return True
    except Exception:  # no engine, no socket, no permission: all mean "not available"
        return False


def start_local_cluster(brokers: int) -> launcher.Cluster:
    directory = home_directory() / "test-clusters" / uuid.uuid4().hex[:12]
    return launcher.up(brokers=brokers, port=free_port_block(), directory=directory).cluster


def stop_local_cluster(cluster: launcher.Cluster) -> None:
    launcher.down(cluster, purge=True)


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    if os.environ.get("KAFKA_BOOTSTRAP"):
        yield os.environ["KAFKA_BOOTSTRAP"]
    elif _docker_answers():
        from testcontainers.kafka import KafkaContainer

        container = (
            KafkaContainer()
            .with_kraft()
            .with_env("KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR", "1")
            .with_env("KAFKA_TRANSACTION_STATE_LOG_MIN_ISR", "1")
            .with_env("KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR", "1")
        )
        with container as kafka:
            yield kafka.get_bootstrap_server()
    else:
        cluster = start_local_cluster(brokers=1)
        try:
            yield cluster.bootstrap
        finally:
            stop_local_cluster(cluster)


@pytest.fixture
def namespace() -> str:
    """A topic namespace of the test's own, so tests never see each other's data."""
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture
def gateway_home(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A private gateway home sharing the jar cache, for tests that run `gateway kafka`.

    It lies under the real gateway home so that CI can find and stop anything
    a failed test left running there.
    """
    jars = home_directory() / "kafka"
    jars.mkdir(parents=True, exist_ok=True)
    home = home_directory() / "test-homes" / uuid.uuid4().hex[:12]
    home.mkdir(parents=True)
    (home / "kafka").symlink_to(jars, target_is_directory=True)
    monkeypatch.setenv("GATEWAY_HOME", str(home))
    yield home
    cluster = launcher.load_cluster(home / "cluster")
    if cluster is not None:
        launcher.down(cluster)
    shutil.rmtree(home, ignore_errors=True)
