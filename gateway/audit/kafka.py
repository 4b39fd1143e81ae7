"""The edge: read the committed records of one partition as they stream past, up to the
end seen at start.

A read_committed consumer of its own (no group offsets committed) reads the
partition from a given offset up to the high watermark captured before reading,
so records appended meanwhile are left for the next run. Control records
(transaction markers) are never delivered, so a partition is also done when the
consumer reports its end at or past that watermark.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Sequence

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from gateway.audit.log import LogRecord
from gateway.stage.records import headers_of

# How long a partition may make no progress before we give up on it: longer
# than the processor's transaction timeout, after which an open transaction
# is aborted and the read can pass it.
STALL_S = 60.0


class ReadError(Exception):
    """The topics could not be read; the message is for the user."""


def partition_bounds(client_config: dict[str, str], topic: str) -> dict[int, tuple[int, int]]:
    """Each partition of `topic`: (first offset kept, end offset), as of now."""
    consumer = _consumer(client_config)
    try:
        return {tp.partition: (low, high) for tp, low, high in _bounds(consumer, [topic])}
    finally:
        consumer.close()


def offset_at(client_config: dict[str, str], topic: str, partition: int, time_ms: int) -> int:
    """The first offset of the partition whose record is at or after `time_ms` (the end
    offset when none is)."""
    consumer = _consumer(client_config)
    try:
        [found] = consumer.offsets_for_times([TopicPartition(topic, partition, time_ms)], 10)
        if found.offset >= 0:
            return int(found.offset)
        return int(consumer.get_watermark_offsets(TopicPartition(topic, partition), 10)[1])
    except KafkaException as exc:
        raise ReadError(f"cannot read {topic}: {exc.args[0].str()}") from exc
    finally:
        consumer.close()


def stream(
    client_config: dict[str, str], topic: str, partition: int, start: int, end: int
) -> Iterator[LogRecord]:
    """The committed records of one partition from `start` up to `end`, in offset order, as
    they arrive: a consumer of its own, whose prefetch is bounded."""
    if start >= end:
        return
    # A bounded prefetch that fills again at once: with librdkafka's default backoff (1 s
    # once the queue is full) a replay waited on it for half its time.
    consumer = _consumer(client_config, {
        "queued.max.messages.kbytes": "8192", "fetch.queue.backoff.ms": "5",
        "fetch.wait.max.ms": "10", "max.partition.fetch.bytes": str(8 << 20),
    })  # fmt: skip
    try:
        consumer.assign([TopicPartition(topic, partition, start)])
        last_progress, position = time.monotonic(), start
        while True:
            # Never ask for more than is left (an end-of-partition event counts as one), so
            # the last call returns at once rather than at its timeout.
            messages = consumer.consume(min(500, max(1, end - position)), timeout=0.5)
            if not messages and time.monotonic() - last_progress > STALL_S:
                raise ReadError(
                    f"{topic} partition {partition} could not be read up to offset {end} in "
                    f"{STALL_S:.0f}s (a transaction left open?)"
                )
            for msg in messages:
                err = msg.error()
                if err is not None and err.code() != KafkaError._PARTITION_EOF:
                    raise ReadError(f"reading {topic}: {err.str()}")
                offset = msg.offset() or 0  # every message read here has one
                if err is None and offset < end:
                    last_progress = time.monotonic()
                    _, timestamp = msg.timestamp()
                    yield LogRecord(topic, partition, offset, timestamp, msg.key(), msg.value(),
                                    headers_of(msg.headers()))  # fmt: skip
                    offset += 1
                position = max(position, offset)
                if offset >= end:
                    return
    except KafkaException as exc:
        raise ReadError(f"cannot read {topic}: {exc.args[0].str()}") from exc
    finally:
        consumer.close()


def _consumer(client_config: dict[str, str], more: dict[str, str] | None = None) -> Consumer:
    return Consumer(
        {
            **client_config,
            "group.id": f"gateway-audit-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            **(more or {}),
        }
    )


def _bounds(consumer: Consumer, topics: Sequence[str]) -> list[tuple[TopicPartition, int, int]]:
    """(partition, first offset, end offset) of every partition of `topics`."""
    try:
        metadata = consumer.list_topics(timeout=10)
        bounds = []
        for topic in topics:
            meta = metadata.topics.get(topic)
            if meta is None or meta.error is not None:
                raise ReadError(f"topic {topic} does not exist (check --namespace and --bootstrap)")
            for partition in sorted(meta.partitions):
                tp = TopicPartition(topic, partition)
                low, high = consumer.get_watermark_offsets(tp, timeout=10)
                bounds.append((tp, low, high))
        return bounds
    except KafkaException as exc:
        raise ReadError(f"cannot reach the brokers: {exc.args[0].str()}") from exc
