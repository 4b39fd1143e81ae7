"""Committed input records, as the processor saw them.

The dedup stage reads one topic, `requests`, into which the router forwards
job events (marked kind=job_event): each partition's log, in offset order, is
the order in which the processor decided and applied its records.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.stage.records import Source


# Not frozen: a frozen dataclass sets each field through object.__setattr__, and a replay
# makes one per record it reads.
@dataclass(slots=True)
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
