"""Bring stores up to their changelogs before their partitions decide anything.

A store is a cache of its changelog partition (store.py): it holds the
changelog offset it reaches, and when the changelog's end is past it (the
store was lost, or a crash came between a commit and the store's write, or
another runtime owned the partition meanwhile) the rest is read and copied in,
a chunk at a time, in RocksDB batches that each hold their last record's
offset (PartitionStore.restore). A crash mid-restore leaves a store at a batch's edge, and the next
restore goes on from there. Changelogs are read `read_committed`: records of
an aborted transaction never reach a store.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from gateway.processor.store import PartitionStore

log = logging.getLogger("gateway.processor")

CHUNK = 10_000  # records read at once
WAIT_S = 0.1
TIMEOUT_S = 10.0


@dataclass
class Restoring:
    topic: str
    partition: int
    store: PartitionStore
    end: int  # the changelog's end when the restore began


def behind(consumer: Any, topic: str, partition: int, store: PartitionStore) -> Restoring | None:
    """The restore `store` needs to reach its changelog's end, or None if it is there."""
    low, high = _watermarks(consumer, TopicPartition(topic, partition))
    # The last record before `high` may be a transaction marker, which the store never sees.
    if low == high or store.changelog_offset >= high - 1:
        return None
    return Restoring(topic, partition, store, high)


def restore(
    client_config: dict[str, Any],
    group: str,
    stores: list[tuple[str, int, PartitionStore]],
    stats_cb: Callable[[str], None] | None = None,
) -> None:
    """Restore every store of (changelog topic, partition, store) that is behind."""
    started = time.monotonic()
    consumer = Consumer(
        {
            **client_config,
            "group.id": f"{group}-restore",  # never joined: the partitions are assigned
            "enable.auto.commit": False,
            # A store behind the changelog's start (compaction moved it on): from the start.
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "fetch.wait.max.ms": 10,
            **({"statistics.interval.ms": 1_000, "stats_cb": stats_cb} if stats_cb else {}),
        }
    )
    try:
        todo = {
            (r.topic, r.partition): r
            for topic, partition, store in stores
            if (r := behind(consumer, topic, partition, store)) is not None
        }
        if not todo:
            return
        consumer.assign(
            [
                TopicPartition(r.topic, r.partition, r.store.changelog_offset + 1)
                for r in todo.values()
            ]
        )
        records = 0
        while todo:
            messages = consumer.consume(CHUNK, WAIT_S)
            records += len(messages)
            chunks: dict[tuple[str, int], list[Any]] = {}
            for message in messages:
                if message.error() is not None:
                    raise KafkaException(message.error())
                where = (message.topic(), message.partition())
                chunk = chunks.get(where)
                if chunk is None:
                    chunk = chunks[where] = []
                chunk.append(message)
            for where, chunk in chunks.items():
                if (restoring := todo.get(where)) is not None:
                    restoring.store.restore(chunk)
            if not messages or len(messages) < CHUNK:
                _finished(consumer, todo)
        log.info(
            "state restored",
            extra={"partitions": len(stores), "records": records,
                   "seconds": round(time.monotonic() - started, 2)},
        )  # fmt: skip
    finally:
        consumer.close()


def _watermarks(consumer: Any, tp: TopicPartition) -> tuple[int, int]:
    """A partition's offsets, asked again for a while: a changelog created a moment ago,
    or one whose leader is moving, answers NOT_LEADER_FOR_PARTITION for a moment."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        try:
            low, high = consumer.get_watermark_offsets(tp, timeout=TIMEOUT_S, cached=False)
            return int(low), int(high)
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _finished(consumer: Any, todo: dict[tuple[str, int], Restoring]) -> None:
    """Drop from `todo` the partitions read to their end (past a final marker too)."""
    positions = consumer.position([TopicPartition(t, p) for t, p in todo])
    for tp in positions:
        restoring = todo[(tp.topic, tp.partition)]
        if tp.offset >= restoring.end:
            del todo[(tp.topic, tp.partition)]
