"""Replay the committed input log through the processor's own per-record code.

Each partition's `requests` and `job_events` records run, in the order the
live processor handles them (log.processing_order), through `Dedup` (which
calls `core.decide` / `core.apply_event`) over a fresh in-memory state;
`intake` records run through `Router`. Every decision record so produced is
compared, field by field, with the one recorded on `decisions` for the same
source topic/partition/offset. Same seed, same record timestamps, same limits:
a faithful log replays to identical records.

A request the processor re-routed (wrong key or partition) has no decision at
its `requests` offset; `Dedup` re-routes it here too, and it is counted, not
compared: its decision is the one of the re-published record.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.audit.log import LogRecord, partition_streams, processing_order
from gateway.processor.dedup import Dedup, Limits
from gateway.processor.metrics import Metrics
from gateway.processor.records import Output, Source
from gateway.processor.router import Router

Position = tuple[str, int, int]  # topic, partition, offset of the request record
Recorded = Mapping[Position, Mapping[str, Any]]


@dataclass(frozen=True, slots=True)
class Difference:
    request_id: str
    source: Position
    field: str
    recorded: Any
    replayed: Any


@dataclass
class ReplayReport:
    compared: int = 0
    identical: int = 0
    rerouted: int = 0
    differences: list[Difference] = field(default_factory=list)

    @property
    def different(self) -> int:
        return self.compared - self.identical


class _PrefixState:
    """One prefix of the in-memory store, with the calls the processor makes on it."""

    def __init__(self) -> None:
        self.items: dict[str, Any] = {}

    def get(self, name: str, default: Any = None) -> Any:
        return self.items.get(name, default)

    def set(self, name: str, value: Any) -> None:
        self.items[name] = value

    def get_bytes(self, name: str) -> bytes | None:
        value = self.items.get(name)
        return value if isinstance(value, bytes) else None

    def set_bytes(self, name: str, value: bytes) -> None:
        self.items[name] = value

    def delete(self, name: str) -> None:
        self.items.pop(name, None)


class MemoryStore:
    """A partition's state, fresh: what the processor's RocksDB would hold."""

    def __init__(self) -> None:
        self._prefixes: dict[bytes, _PrefixState] = defaultdict(_PrefixState)

    def __call__(self, prefix: bytes) -> _PrefixState:
        return self._prefixes[prefix]


def replay(
    intake: Sequence[LogRecord],
    requests: Sequence[LogRecord],
    events: Sequence[LogRecord],
    recorded: Recorded,
    partitions: int,
    limits: Limits,
    compare_from_ms: int | None = None,
) -> ReplayReport:
    """Replay the three input topics and compare with `recorded` (decision records by source).

    Each sequence holds one topic's records, every partition in offset order.
    `compare_from_ms` leaves earlier decisions out of the comparison; they are
    still replayed, since later ones depend on the state they built.
    """
    replayed: dict[Position, dict[str, Any]] = {}
    rerouted: list[Position] = []

    def emit(output: Output, source: Source) -> None:
        position = (source.topic, source.partition, source.offset)
        if output.role == "decisions":
            replayed[position] = orjson.loads(output.value)
        elif output.role == "intake":
            rerouted.append(position)

    metrics = Metrics()
    router = Router(emit, metrics, limits)
    for record in intake:
        router.on_record(record.value, record.key, record.source)

    dedup = Dedup(partitions, emit, metrics, limits)
    request_topics = {r.topic for r in requests}
    for _, streams in sorted(partition_streams(requests, events).items()):
        store = MemoryStore()
        for record in processing_order(streams):
            dedup.on_record(
                record.value, record.key, record.source, store,
                is_request=record.topic in request_topics,
            )  # fmt: skip

    report = ReplayReport(rerouted=len(rerouted))
    times = {r.position: r.timestamp_ms for rs in (intake, requests) for r in rs}
    for position in sorted(replayed.keys() | recorded.keys()):
        if compare_from_ms is not None and times.get(position, compare_from_ms) < compare_from_ms:
            continue
        diffs = compare_records(position, recorded.get(position), replayed.get(position))
        report.compared += 1
        report.identical += not diffs
        report.differences.extend(diffs)
    return report


def compare_records(
    position: Position, recorded: Mapping[str, Any] | None, replayed: Mapping[str, Any] | None
) -> list[Difference]:
    """Every top-level field on which two decision records differ; a missing record is one."""
    request_id = str((recorded or replayed or {}).get("request_id", "/".join(map(str, position))))
    if recorded is None or replayed is None:
        return [
            Difference(request_id, position, "(record)", _outcome(recorded), _outcome(replayed))
        ]
    return [
        Difference(request_id, position, name, recorded.get(name), replayed.get(name))
        for name in sorted(recorded.keys() | replayed.keys())
        if recorded.get(name) != replayed.get(name)
    ]


def _outcome(record: Mapping[str, Any] | None) -> str:
    return "none" if record is None else f"decision {record.get('outcome')}"
