"""Committed input records, and the order in which the processor handles them.

The processor reads `requests` and `job_events` through quixstreams' `concat`,
which makes the consumer buffer records per topic partition and pop them in
timestamp order across topics sharing a partition number
(quixstreams/internal_consumer/buffering.py, `PartitionBufferGroup.pop`):

- it is a merge of per-topic queues, each in offset order: the next record is
  the head, of all topics' heads, with the smallest timestamp; it never sorts
  inside one topic partition;
- on equal timestamps `min()` keeps the first buffer in the group's dict order,
  which is the order partitions were assigned in; quixstreams sorts that list
  by partition number only (a stable sort), and librdkafka's range assignor
  hands it over sorted by topic name (checked on a real broker). So on a tie
  the topic whose name sorts first wins: `gateway.job-events` before
  `gateway.requests`.

Live processing can still differ from this order when a partition's buffer
is empty but the broker shows it idle while a transaction on it is still
open (the router writes `requests` transactionally): a later record on the
other topic may then go first. The replay reports any decision this changed.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from gateway.processor.records import Source


class Timed(Protocol):
    @property
    def topic(self) -> str: ...

    @property
    def timestamp_ms(self) -> int: ...


T = TypeVar("T", bound=Timed)


@dataclass(frozen=True, slots=True)
class LogRecord:
    """One committed record of an input topic, as the processor saw it."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: dict[str, bytes] = field(default_factory=dict)

    @property
    def source(self) -> Source:
        return Source(self.topic, self.partition, self.offset, self.timestamp_ms, self.headers)

    @property
    def position(self) -> tuple[str, int, int]:
        return (self.topic, self.partition, self.offset)


def processing_order(streams: Sequence[Sequence[T]]) -> Iterator[T]:
    """Merge one partition's topics as the concat buffer does (see the module docstring).

    Each stream is one topic partition in offset order.
    """
    ordered = sorted((s for s in streams if s), key=lambda s: s[0].topic)
    heads = [0] * len(ordered)
    while True:
        best = -1
        for i, stream in enumerate(ordered):
            if heads[i] < len(stream) and (
                best < 0 or stream[heads[i]].timestamp_ms < ordered[best][heads[best]].timestamp_ms
            ):
                best = i
        if best < 0:
            return
        yield ordered[best][heads[best]]
        heads[best] += 1


def partition_streams(*topics: Sequence[LogRecord]) -> dict[int, list[list[LogRecord]]]:
    """Per partition number, one offset-ordered stream per topic."""
    grouped: dict[int, dict[str, list[LogRecord]]] = defaultdict(lambda: defaultdict(list))
    for records in topics:
        for record in records:
            grouped[record.partition][record.topic].append(record)
    return {
        p: [sorted(s, key=lambda r: r.offset) for s in streams.values()]
        for p, streams in grouped.items()
    }
