"""Exactly-once under SIGKILL, rebalances and a broker restart, read from committed data."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient

from tests.conftest import start_local_cluster, stop_local_cluster
from tests.integration.harness import (
    DuplicateLoad,
    Processor,
    apply_topics,
    decided,
    owned_partitions,
    written,
)
from tests.integration.test_http_admin import eventually
from tests.support import free_port_block

pytestmark = pytest.mark.kafka


def test_sigkill_during_load_loses_and_repeats_nothing(kafka_bootstrap, namespace, tmp_path):
    cat = apply_topics(kafka_bootstrap, namespace)
    port = free_port_block()
    # Transactions of seconds: a kill once this run has decided lands inside one.
    proc = Processor(kafka_bootstrap, namespace, tmp_path, "1", "--metrics-port", str(port),
                     "--commit-interval", "2").start()  # fmt: skip
    load = DuplicateLoad(kafka_bootstrap, cat, keys=1000, copies=3)

    def disturb(batch: int) -> None:
        if batch % 6 == 5:  # five kills over the 30 batches
            eventually(lambda: decided(port), bool, seconds=60)
            proc.kill()
            proc.start()

    try:
        load.run(disturb=disturb)
        counts = load.check()
    finally:
        proc.stop()
    assert counts["requests"] == 3000
    # What the killed transactions had written was aborted: it shows under read_uncommitted.
    partitions = cat.by_role("decisions").partitions
    aborted = written(kafka_bootstrap, cat.name("decisions"), partitions) - counts["decisions"]
    print(f"{aborted} decisions of killed transactions were aborted and made again")
    assert aborted > 0, "no kill found an open transaction"


def test_two_instances_with_a_rebalance_mid_load(kafka_bootstrap, namespace, tmp_path):
    cat = apply_topics(kafka_bootstrap, namespace)
    ports = {"a": free_port_block(), "b": free_port_block()}
    # The first commits rarely: once it has decided since the rebalance, its kill lands
    # inside an open transaction.
    first = Processor(kafka_bootstrap, namespace, tmp_path, "a", "--metrics-port", str(ports["a"]),
                      "--commit-interval", "30").start()  # fmt: skip
    second = Processor(kafka_bootstrap, namespace, tmp_path, "b", "--metrics-port", str(ports["b"]))
    # The first, once killed, comes back as an ordinary processor (the same instance).
    again = Processor(kafka_bootstrap, namespace, tmp_path, "a", "--metrics-port", str(ports["a"]))
    load = DuplicateLoad(kafka_bootstrap, cat, keys=600, copies=3)
    everything = eventually(lambda: owned_partitions(ports["a"]), bool)  # alone: all of them
    split: dict[str, int] = {}  # each instance's partitions once the rebalance is done
    settled: list[float] = []  # what the first had decided by then

    def disturb(batch: int) -> None:
        if batch == 2:
            second.start(wait=False)  # joins: partitions move to it mid-load
        if batch == 6:  # the load waits until they have moved
            split.update(eventually(
                lambda: {name: owned_partitions(port) for name, port in ports.items()},
                lambda owned: owned["b"] > 0 and sum(owned.values()) == everything,
                seconds=90,
            ))  # fmt: skip
            settled.append(decided(ports["a"]))
        if batch == 10:
            # Killed once it has decided since the rebalance's commit, before it commits.
            eventually(lambda: decided(ports["a"]), lambda n: n > settled[0], seconds=60)
            first.kill()
        if batch == 12:
            again.start(wait=False)

    try:
        load.run(disturb=disturb)
        counts = load.check()
        # The second stayed, owned partitions and decided requests.
        assert second.alive, second.log()
        assert 0 < split["b"] < everything and split["a"] + split["b"] == everything, split
        assert decided(ports["b"]) > 0
    finally:
        again.stop()
        first.stop()
        second.stop()
    # What the killed transaction had written was aborted: it shows under read_uncommitted.
    partitions = cat.by_role("decisions").partitions
    aborted = written(kafka_bootstrap, cat.name("decisions"), partitions) - counts["decisions"]
    print(f"partitions after the rebalance: {split}; {aborted} aborted decisions")
    assert aborted > 0, "the kill found no open transaction"


def test_a_broker_restart_on_three_nodes(namespace, tmp_path):
    from gateway.broker import launcher

    cluster = start_local_cluster(brokers=3)
    try:
        cat = apply_topics(cluster.bootstrap, namespace)
        proc = Processor(cluster.bootstrap, namespace, tmp_path, "1").start()
        load = DuplicateLoad(cluster.bootstrap, cat, keys=500, copies=3)

        def disturb(batch: int) -> None:
            if batch == 4:
                launcher.stop_node(cluster, 2)
            if batch == 10:
                launcher.start_node(cluster, 2)
                # The rest of the load runs with the node back in the cluster.
                admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
                eventually(lambda: admin.list_topics(timeout=10).brokers, lambda b: 2 in b, 120)

        try:
            load.run(disturb=disturb)
            load.check()
        except AssertionError as failed:
            raise AssertionError(f"{failed}\nthe processor's log:\n{proc.log()[-8000:]}") from None
        finally:
            proc.stop()
    finally:
        stop_local_cluster(cluster)
