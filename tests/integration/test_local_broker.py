"""`gateway kafka ...`: a real Apache Kafka cluster from the launcher."""

from __future__ import annotations

import os
import re
import socket
import uuid

import pytest
from confluent_kafka import Consumer, Producer

from gateway.broker import launcher
from tests.integration.cli import gateway
from tests.support import free_port_block

pytestmark = pytest.mark.kafka


def _bootstrap(stdout: str) -> str:
    match = re.search(r"^bootstrap: (\S+)$", stdout, re.M)
    assert match, stdout
    return match.group(1)


def _transaction_round_trip(bootstrap: str, topic: str) -> None:
    """Commit one transactional record and abort another; read_committed sees one."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1)])[topic].result()
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": uuid.uuid4().hex})
    producer.init_transactions(60)
    for value, commit in ((b"aborted", False), (b"committed", True)):
        producer.begin_transaction()
        producer.produce(topic, value)
        (producer.commit_transaction if commit else producer.abort_transaction)(60)
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
        "auto.offset.reset": "earliest", "isolation.level": "read_committed",
    })  # fmt: skip
    consumer.subscribe([topic])
    seen = []
    for _ in range(60):
        msg = consumer.poll(1)
        if msg is not None and not msg.error():
            seen.append(msg.value())
        if seen:
            break
    consumer.close()
    assert seen == [b"committed"]


def test_up_reuse_status_down(gateway_home):
    port = str(free_port_block())
    first = gateway("kafka", "up", "--port", port)
    assert first.returncode == 0, first.stderr
    assert re.search(r"ready in \d+\.\ds", first.stdout)
    # Each step of a start is said: no silent wait.
    assert (
        f"starting Kafka {launcher.kafka_version()} on 127.0.0.1:{port}, its controller "
        f"on {int(port) + 100}" in first.stdout
    ), first.stdout
    bootstrap = _bootstrap(first.stdout)
    assert bootstrap == f"127.0.0.1:{port}"

    again = gateway("kafka", "up", "--port", port)
    assert again.returncode == 0 and "already running" in again.stdout
    assert _bootstrap(again.stdout) == bootstrap

    status = gateway("kafka", "status")
    assert status.returncode == 0 and "running (pid" in status.stdout
    log = re.search(r"log: (\S+)", status.stdout).group(1)
    assert os.path.getsize(log) > 0

    _transaction_round_trip(bootstrap, "txn-check")

    cluster = launcher.load_cluster(gateway_home / "cluster")
    pid = launcher.node_pid(cluster, 1)
    down = gateway("kafka", "down")
    assert down.returncode == 0 and "stopped node(s): 1" in down.stdout
    assert not os.path.exists(f"/proc/{pid}") or launcher.node_pid(cluster, 1) is None
    stopped = gateway("kafka", "status")
    assert stopped.returncode == 3 and "node 1: stopped" in stopped.stdout


def test_three_nodes_survive_stopping_and_restarting_one(gateway_home):
    up = gateway("kafka", "up", "--brokers", "3", "--port", str(free_port_block()))
    assert up.returncode == 0, up.stderr
    bootstrap = _bootstrap(up.stdout)
    assert bootstrap.count(",") == 2
    assert gateway("kafka", "stop-node", "2").stdout.strip() == "node 2 stopped"
    assert "node 2: stopped" in gateway("kafka", "status").stdout
    _transaction_round_trip(bootstrap, "txn-two-of-three")
    restarted = gateway("kafka", "start-node", "2")
    assert restarted.returncode == 0 and "node 2 running" in restarted.stdout
    assert gateway("kafka", "status").stdout.count("running (pid") == 3
    assert gateway("kafka", "stop-node", "4").returncode == 1


def test_kafka_3_9_starts(gateway_home):
    up = gateway("kafka", "up", "--port", str(free_port_block()), "--kafka-version", "3.9.2")
    assert up.returncode == 0, up.stderr
    assert "Kafka 3.9.2 ready" in up.stdout
    _transaction_round_trip(_bootstrap(up.stdout), "txn-on-3-9")


def test_down_without_a_cluster_touches_nothing(gateway_home):
    result = gateway("kafka", "down")
    assert result.returncode == 0 and result.stdout.strip() == "nothing running"
    status = gateway("kafka", "status")
    assert status.returncode == 1 and "run `gateway kafka up` first" in status.stderr


def test_a_taken_controller_port_is_named_and_leaves_no_cluster_behind(gateway_home):
    port = free_port_block()
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", port + 100))
        holder.listen()
        failed = gateway("kafka", "up", "--port", str(port))
    assert failed.returncode == 1
    assert f"port {port + 100} (node 1's controller) is taken: choose another --port" in (
        failed.stderr
    ), failed.stderr
    assert launcher.load_cluster() is None  # nothing kept: the next start takes any port
    other = free_port_block()
    started = gateway("kafka", "up", "--port", str(other))
    try:
        assert started.returncode == 0, started.stderr
        assert _bootstrap(started.stdout) == f"127.0.0.1:{other}"
    finally:
        gateway("kafka", "down", "--purge")


def test_a_node_that_ends_while_starting_is_reported_with_its_log(gateway_home):
    directory = gateway_home / "cluster"
    cluster = launcher.up(port=free_port_block(), directory=directory).cluster
    launcher.down(cluster)
    meta = cluster.node_dir(1) / "data" / "meta.properties"
    meta.write_text(meta.read_text().replace("node.id=1", "node.id=7"))
    with pytest.raises(launcher.BrokerError) as failed:
        launcher.up(directory=directory)
    assert "Kafka node 1 exited with code 1 while starting:\n" in str(failed.value)
    assert "Stored node id 7 doesn't match" in str(failed.value)
    assert launcher.running_nodes(cluster) == []
