"""The restore reads a store's changelog on the real broker: committed records only, from
where the store is, to the end past the final marker; a partition dropped mid-way stops."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from gateway.processor.restore import Restorer
from gateway.processor.store import PartitionStore

pytestmark = pytest.mark.kafka

KEYS = 3_000


def _changelog(bootstrap: str, topic: str, partitions: int) -> None:
    """Per partition: KEYS values in three transactions, and one aborted transaction."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(topic, partitions, 1, config={"cleanup.policy": "compact"})
    admin.create_topics([new])[topic].result()
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": topic})
    deadline = time.monotonic() + 30
    # A topic created a moment ago: produce to an explicit partition once it is known.
    while len(producer.list_topics(topic, timeout=10).topics[topic].partitions) < partitions:
        assert time.monotonic() < deadline, f"{topic} has no metadata"
        time.sleep(0.1)
    producer.init_transactions(30)
    for start in range(0, KEYS, KEYS // 3):
        producer.begin_transaction()
        for n in range(start, start + KEYS // 3):
            for p in range(partitions):
                producer.produce(topic, b"\x00v%d" % n, b"dr\xffjob/%d" % n, partition=p)
        producer.commit_transaction(30)
    producer.begin_transaction()
    for p in range(partitions):
        producer.produce(topic, b"\x00aborted", b"dr\xffjob/0", partition=p)
    producer.abort_transaction(30)


def _restore(restorer: Restorer, until: float = 60) -> list[tuple[str, int]]:
    done: list[tuple[str, int]] = []
    deadline = time.monotonic() + until
    while restorer.pending and time.monotonic() < deadline:
        done += restorer.step()
    return done


def test_a_restore_reads_committed_records_to_the_end_and_goes_on_from_where_it_was(
    kafka_bootstrap: str, namespace: str, tmp_path: Path
):
    topic = f"{namespace}.changelog"
    _changelog(kafka_bootstrap, topic, 2)
    restorer = Restorer({"bootstrap.servers": kafka_bootstrap}, f"{namespace}.group")
    try:
        empty = PartitionStore(tmp_path / "0")
        restorer.add([(topic, 0, empty)])
        assert _restore(restorer) == [(topic, 0)]
        values = dict(((r, n), v) for r, n, v in empty.live())
        assert len(values) == KEYS and values[(b"r", "job/0")] == b"v0"  # not the aborted one
        reached = empty.changelog_offset
        empty.close()
        # Restored already: at most the final markers are read again, nothing is applied.
        again = PartitionStore(tmp_path / "0")
        restorer.add([(topic, 0, again)])
        _restore(restorer)
        assert not restorer.pending and again.changelog_offset == reached
        assert dict(((r, n), v) for r, n, v in again.live()) == values
        again.close()
    finally:
        restorer.close()


def test_a_partition_dropped_mid_restore_stops_and_the_others_finish(
    kafka_bootstrap: str, namespace: str, tmp_path: Path
):
    topic = f"{namespace}.changelog"
    _changelog(kafka_bootstrap, topic, 2)
    restorer = Restorer({"bootstrap.servers": kafka_bootstrap}, f"{namespace}.group")
    stores = [PartitionStore(tmp_path / str(p)) for p in range(2)]
    try:
        restorer.add([(topic, p, store) for p, store in enumerate(stores)])
        assert set(restorer.pending) == {(topic, 0), (topic, 1)}
        restorer.drop([(topic, 1)])  # its input was revoked
        assert _restore(restorer) == [(topic, 0)]
        assert len(list(stores[0].live())) == KEYS
        assert len(list(stores[1].live())) < KEYS  # left where it was; a successor goes on
    finally:
        restorer.close()
        for store in stores:
            store.close()
