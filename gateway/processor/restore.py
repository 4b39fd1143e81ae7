"""Bring stores up to their changelogs before their partitions decide anything.

A store is a cache of its changelog partition (store.py): it holds the
changelog offset it reaches, and when the changelog's end is past it (the
store was lost, or a crash came between a commit and the store's write, or
another runtime owned the partition meanwhile) the rest is read and copied in,
a chunk at a time, in RocksDB batches that each hold their last record's
offset (PartitionStore.restore). A crash mid-restore leaves a store at a
batch's edge, and the next restore goes on from there. Changelogs are read
`read_committed`: records of an aborted transaction never reach a store.

The loop reads a chunk between its own polls, with the input partitions
whose stores are behind paused (their tasks restoring, task.py), so the other
partitions go on deciding and a rebalance is never held up by a restore.
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
    """The restore `store` needs to reach its changelog's end, or None if it is there.

    The end is the log's high watermark, asked of a read_uncommitted `consumer`: a
    read_committed one answers the last stable offset, which lags a commit until the
    coordinator has written its markers. A store would then be taken for up to date while
    its predecessor's last commit (on a revoke, just before this assignment) was still
    being marked, and decide without it. The restore reads read_committed up to this end,
    so it waits for those markers (or for an open transaction to end)."""
    low, high = _watermarks(consumer, TopicPartition(topic, partition))
    # Changelogs are written in transactions, so a log ends with a commit's marker, which the
    # store never sees: a store at the record before it is at the end (a stopped processor's
    # stores are, and its restart reads nothing).
    if low == high or store.changelog_offset >= high - 2:
        return None
    return Restoring(topic, partition, store, high)


class Restorer:
    """The stores of this run's partitions that are behind their changelogs, read a chunk per
    `step` beside the loop (so a rebalance is never held up by a restore), with a consumer of
    its own assigned exactly those changelog partitions."""

    def __init__(
        self,
        client_config: dict[str, Any],
        group: str,
        stats_cb: Callable[[str], None] | None = None,
    ) -> None:
        self._consumer = Consumer(
            {
                **client_config,
                "group.id": f"{group}-restore",  # never joined: the partitions are assigned
                "enable.auto.commit": False,
                # A store behind the changelog's start (compaction moved it on): from the start.
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
                "fetch.wait.max.ms": 10,
                # A changelog is read from its start at full speed: librdkafka's 1 MiB a
                # partition per fetch made a restore wait on round trips (300,000 keys: 6.3 s
                # against 3.3 s with 16 MiB).
                "max.partition.fetch.bytes": 16 << 20,
                **({"statistics.interval.ms": 1_000, "stats_cb": stats_cb} if stats_cb else {}),
            }
        )
        # Asks where each changelog ends (see `behind`), never reads one.
        self._ends = Consumer({
            **client_config, "group.id": f"{group}-restore", "enable.auto.commit": False,
            "isolation.level": "read_uncommitted",
        })  # fmt: skip
        self.pending: dict[tuple[str, int], Restoring] = {}
        self._started = 0.0
        self._records = 0

    def add(self, stores: list[tuple[str, int, PartitionStore]]) -> list[tuple[str, int]]:
        """Restore these (changelog topic, partition, store) where they are behind; the
        changelog partitions that are."""
        behind_now = {
            (r.topic, r.partition): r
            for topic, partition, store in stores
            if (r := behind(self._ends, topic, partition, store)) is not None
        }
        if behind_now:
            if not self.pending:
                self._started, self._records = time.monotonic(), 0
            self.pending |= behind_now
            self._assign()
        return list(behind_now)

    def drop(self, partitions: list[tuple[str, int]]) -> None:
        """Stop restoring these changelog partitions (their input was revoked)."""
        dropped = [self.pending.pop(where, None) for where in partitions]
        if any(r is not None for r in dropped):
            self._assign()

    def step(self, wait_s: float = WAIT_S) -> list[tuple[str, int]]:
        """Read and apply one chunk; the changelog partitions this finished."""
        # A record read from an assigned partition has its topic and partition (the stubs
        # say Optional).
        messages: list[Any] = self._consumer.consume(CHUNK, wait_s)
        self._records += len(messages)
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
            if (restoring := self.pending.get(where)) is not None:
                restoring.store.restore(chunk)
        if len(messages) == CHUNK:
            return []
        done = _finished(self._consumer, self.pending)
        if done:
            self._assign()
            if not self.pending:
                log.info(
                    "state restored",
                    extra={"records": self._records,
                           "seconds": round(time.monotonic() - self._started, 2)},
                )  # fmt: skip
        return done

    def close(self) -> None:
        self._consumer.close()
        self._ends.close()

    def _assign(self) -> None:
        """Read exactly the pending partitions, each from where its store is."""
        self._consumer.assign(
            [
                TopicPartition(r.topic, r.partition, r.store.changelog_offset + 1)
                for r in self.pending.values()
            ]
        )


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


def _finished(consumer: Any, pending: dict[tuple[str, int], Restoring]) -> list[tuple[str, int]]:
    """Take from `pending` the partitions read to their end (past a final marker too)."""
    done = []
    for tp in consumer.position([TopicPartition(t, p) for t, p in pending]):
        if tp.offset >= pending[(tp.topic, tp.partition)].end:
            pending.pop((tp.topic, tp.partition)).store.restored()
            done.append((tp.topic, tp.partition))
    return done
