"""The Kafka edge of the audit index: bring it up to date, follow, read records by position.

Every consumer here reads committed records only, of its own (a fresh group
id it never joins: partitions are assigned) and commits nothing: how far the
index has read lives in the index, with the positions (index.py).

`catch_up` reads each partition of `decisions` from where the index stopped to
its end now (the CLI, once a run, as `unread` finds them), `Follower` keeps
reading (a serve process), and `read_at` reads exactly the records at some
positions: it seeks to each and reads on only while the next wanted record is near.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec

from gateway import follow
from gateway.audit.index import AuditIndex, DecisionAt, Read

_BATCH = 1000
_POLL_S = 0.05
TIMEOUT_S = 10.0
# How long a partition may give nothing before a catch-up leaves it behind: an open
# transaction is no reason to wait, the end of a read_committed read is its start.
STALL_S = 15.0
# Wanted records this many offsets apart are read by seeking, not by reading between.
SEEK_GAP = 100


def consumer(settings: Mapping[str, Any], seeking: bool = False) -> Consumer:
    """A read_committed consumer of its own. One that reads on (a catch-up, a follower)
    keeps up to 4 MiB a partition fetched ahead, so reading overlaps indexing; one that
    is `seeking` (read_at) fetches little, since it leaves most of what it fetched."""
    ahead = {"queued.min.messages": 100, "max.partition.fetch.bytes": 262144} if seeking else {
        "queued.min.messages": 20000, "queued.max.messages.kbytes": 4096}  # fmt: skip
    return Consumer(
        {
            **follow.reader_settings(settings, "gateway-audit-index"),
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            # An empty fetch comes back at once: the end of a partition is news here.
            "fetch.wait.max.ms": 10,
            # A fetcher whose queue is full waits this long (1 s by default) before it
            # fetches again.
            "fetch.queue.backoff.ms": 10,
            **ahead,
        }
    )


def partitions_of(client: Consumer, topic: str) -> list[int]:
    metadata = client.list_topics(topic, timeout=TIMEOUT_S)
    found = metadata.topics.get(topic)
    if found is None or found.error is not None:
        raise KafkaException(found.error if found is not None else KafkaError._UNKNOWN_TOPIC)
    return sorted(found.partitions)


def _batch(messages: Iterable[Message]) -> tuple[list[Read], dict[int, int], set[int]]:
    """A consumed batch: its records, the next offset it reaches per partition, and the
    partitions read to their end (the next offset is then that end)."""
    records: list[Read] = []
    reached: dict[int, int] = {}
    ended: set[int] = set()
    for msg in messages:
        error, partition, offset = msg.error(), msg.partition(), msg.offset()
        if partition is None or offset is None:
            continue
        if error is not None:
            if error.code() != KafkaError._PARTITION_EOF:
                raise KafkaException(error)
            ended.add(partition)
            reached[partition] = max(reached.get(partition, 0), offset)
            continue
        records.append((partition, offset, msg.value()))
        reached[partition] = max(reached.get(partition, 0), offset + 1)
    return records, reached, ended


def unread(client: Consumer, topic: str, index: AuditIndex) -> dict[int, tuple[int, int]]:
    """Each partition of `topic` with records the index has not read: (where the read
    starts, the partition's end now)."""
    stored = index.offsets()
    found: dict[int, tuple[int, int]] = {}
    for partition in partitions_of(client, topic):
        low, high = client.get_watermark_offsets(
            TopicPartition(topic, partition), timeout=TIMEOUT_S, cached=False
        )
        start = max(stored.get(partition, 0), low)
        if high > start:
            found[partition] = (start, high)
    return found


def catch_up(
    client: Consumer, topic: str, index: AuditIndex, ranges: Mapping[int, tuple[int, int]],
    advance: Callable[[int], None] | None = None,
) -> int:  # fmt: skip
    """Index every committed record of `topic` in `ranges` (unread's), calling `advance`
    with the offsets each batch moved on. How many offsets it left unread: of partitions
    that stalled (a transaction held open)."""
    if not ranges:
        return 0
    stored = index.offsets()
    ends = {p: end for p, (_, end) in ranges.items()}
    client.assign([TopicPartition(topic, p, stored.get(p, OFFSET_BEGINNING)) for p in ends])
    pending, moved_at = set(ends), time.monotonic()
    at = {p: start for p, (start, _) in ranges.items()}
    while pending and time.monotonic() - moved_at < STALL_S:
        records, reached, ended = _batch(client.consume(_BATCH, _POLL_S))
        if reached:
            index.add(records, reached)
            moved_at = time.monotonic()
            if advance is not None:
                moved = {p: min(o, ends[p]) for p, o in reached.items() if p in ends}
                advance(sum(max(0, o - at[p]) for p, o in moved.items()))
                at.update((p, max(at[p], o)) for p, o in moved.items())
        pending -= ended | {p for p, offset in reached.items() if offset >= ends[p]}
    held = index.offsets()
    return sum(max(0, ends[p] - held.get(p, 0)) for p in pending)


def committed_ends(admin: AdminClient, topic: str, partitions: Iterable[int]) -> dict[int, int]:
    """The last stable offset of each partition: where a read_committed read ends now."""
    asked = {TopicPartition(topic, p): OffsetSpec.latest() for p in partitions}
    answers = admin.list_offsets(
        asked, isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=TIMEOUT_S
    )
    return {tp.partition: future.result().offset for tp, future in answers.items()}


class Follower:
    """A background thread indexing every partition of `topic` as records come (the
    follower of gateway/follow.py). After any failure it reads again from where the
    index stopped: a batch it could not index is read again, never skipped."""

    def __init__(self, index: AuditIndex, topic: str, client: Consumer) -> None:
        self._index, self._topic, self._client = index, topic, client
        self._follower = follow.Follower(
            client, topic, self, what="the audit index", thread="gateway-audit-index",
            batch=_BATCH, poll_s=_POLL_S, reread=True,
        )  # fmt: skip

    def start(self) -> None:
        self._follower.start()

    def stop(self) -> None:
        self._follower.stop()

    def partitions(self, stopping: threading.Event) -> list[int]:
        return partitions_of(self._client, self._topic)

    def offsets(self) -> dict[int, int]:
        return self._index.offsets()

    def take(self, messages: list[Message]) -> None:
        records, reached, _ = _batch(messages)
        if reached:
            self._index.add(records, reached)


# Per position: the record's value, or None when the log no longer holds it.
Found = dict[DecisionAt, bytes | None]


def read_at(
    client: Consumer, topic: str, positions: Sequence[DecisionAt]
) -> tuple[Found, dict[int, int]]:
    """The records at `positions`, and each partition's first offset (older ones are gone:
    retention). Reads only them, and the records between two that are near each other."""
    found: Found = {}
    starts: dict[int, int] = {}
    for partition in sorted({p for p, _ in positions}):
        low, high = client.get_watermark_offsets(
            TopicPartition(topic, partition), timeout=TIMEOUT_S, cached=False
        )
        starts[partition] = low
        wanted = sorted({o for p, o in positions if p == partition})
        for offset in wanted:
            if not low <= offset < high:
                found[(partition, offset)] = None
        _read_partition(client, topic, partition, [o for o in wanted if low <= o < high], found)
    return found, starts


def _read_partition(
    client: Consumer, topic: str, partition: int, wanted: list[int], found: Found
) -> None:
    """One message at a time (a batch would wait for more than a key's few records)."""
    i, deadline = 0, time.monotonic() + TIMEOUT_S
    if wanted:
        client.assign([TopicPartition(topic, partition, wanted[0])])
    while i < len(wanted):
        if time.monotonic() > deadline:
            problem = f"reading {topic} [{partition}] took over {TIMEOUT_S:.0f}s"
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, problem))
        msg = client.poll(_POLL_S)
        offset = None if msg is None else msg.offset()
        if msg is None or msg.partition() != partition or offset is None:
            continue
        error = msg.error()
        if error is not None and error.code() != KafkaError._PARTITION_EOF:
            raise KafkaException(error)
        if error is not None:
            # The end: what was wanted and not met is not in the log (a committed
            # record is never skipped, and the index holds committed ones only).
            for gone in wanted[i:]:
                found[(partition, gone)] = None
            break
        while i < len(wanted) and wanted[i] <= offset:
            found[(partition, wanted[i])] = msg.value() if wanted[i] == offset else None
            i += 1
        if i < len(wanted) and wanted[i] - offset > SEEK_GAP:
            client.assign([TopicPartition(topic, partition, wanted[i])])
    client.unassign()
