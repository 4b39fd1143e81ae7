"""Exactly-once under SIGKILL, rebalances and a broker restart, read from committed data."""

from __future__ import annotations

import time

import pytest

from tests.conftest import start_local_cluster, stop_local_cluster
from tests.integration.harness import DuplicateLoad, Processor, apply_topics

pytestmark = pytest.mark.kafka


def test_sigkill_during_load_loses_and_repeats_nothing(kafka_bootstrap, namespace, tmp_path):
    cat = apply_topics(kafka_bootstrap, namespace)
    proc = Processor(kafka_bootstrap, namespace, tmp_path, "1").start()
    load = DuplicateLoad(kafka_bootstrap, cat, keys=1000, copies=3)

    def disturb(batch: int) -> None:
        if batch % 6 == 5:  # four kills over the 30 batches
            proc.kill()
            proc.start()

    try:
        load.run(disturb=disturb)
        counts = load.check()
    finally:
        proc.stop()
    assert counts["requests"] == 3000


def test_two_instances_with_a_rebalance_mid_load(kafka_bootstrap, namespace, tmp_path):
    cat = apply_topics(kafka_bootstrap, namespace)
    first = Processor(kafka_bootstrap, namespace, tmp_path, "a").start()
    second = Processor(kafka_bootstrap, namespace, tmp_path, "b")
    load = DuplicateLoad(kafka_bootstrap, cat, keys=600, copies=3)

    def disturb(batch: int) -> None:
        if batch == 4:
            second.start(wait=False)  # joins: partitions move to it mid-load
        if batch == 12:
            first.kill()  # and back again, after a crash
        if batch == 14:
            first.start(wait=False)

    try:
        load.run(disturb=disturb)
        load.check()
    finally:
        first.stop()
        second.stop()


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
                time.sleep(1)

        try:
            load.run(disturb=disturb)
            load.check()
        finally:
            proc.stop()
    finally:
        stop_local_cluster(cluster)
