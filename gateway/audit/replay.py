"""Replay the committed input log through the processor's own per-record code.

Each partition's `requests` records (requests, and the job events the router
forwarded there) run in offset order, the order the live processor handles
them, through `Dedup` (which calls `core.decide` / `core.on_key`, and
`core.expire_job` as ticks and other records move time on) over a fresh
in-memory state; `intake` records run through `Router`. Every decision record so produced is
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
from datetime import timedelta
from typing import Any

import orjson

from gateway import wire
from gateway.audit.log import LogRecord, in_log_order
from gateway.processor.dedup import Dedup
from gateway.processor.metrics import Metrics
from gateway.processor.parsing import Limits
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


class Store:
    """One partition's store, in memory, with the store's event-time expiry: a value set
    with a ttl reads as gone once the partition's time reaches its stamp."""

    def __init__(self) -> None:
        self.items: dict[tuple[bytes, str], tuple[bytes, int | None]] = {}
        self.now_ms = 0
        self.high_water_ms = 0

    def at(self, timestamp_ms: int) -> None:
        """Before each record: its time stamps writes, and moves the partition's time on."""
        self.now_ms = timestamp_ms
        self.high_water_ms = max(self.high_water_ms, timestamp_ms)

    def state(self, key: bytes) -> KeyState:
        return KeyState(self, key)


@dataclass(frozen=True, slots=True)
class KeyState:
    """One key's state, with the calls the processor makes on it."""

    store: Store
    key: bytes

    def get_bytes(self, name: str) -> bytes | None:
        value, stamp = self.store.items.get((self.key, name), (None, None))
        if stamp is not None and stamp <= self.store.high_water_ms:
            return None
        return value

    def set_bytes(self, name: str, value: bytes, ttl: timedelta | None = None) -> None:
        stamp = None if ttl is None else self.store.now_ms + ttl // timedelta(milliseconds=1)
        self.store.items[(self.key, name)] = (value, stamp)

    def delete(self, name: str) -> None:
        self.store.items.pop((self.key, name), None)


def replay(
    intake: Sequence[LogRecord],
    requests: Sequence[LogRecord],
    recorded: Recorded,
    partitions: int,
    limits: Limits,
    compare_from_ms: int | None = None,
) -> ReplayReport:
    """Replay the input topics and compare with `recorded` (decision records by source).

    Each sequence holds one topic's records.
    `compare_from_ms` leaves earlier decisions out of the comparison; they are
    still replayed, since later ones depend on the state they built.
    """
    replayed: dict[Position, dict[str, Any]] = {}
    rerouted: list[Position] = []

    def emit(output: Output, source: Source) -> None:
        position = (source.topic, source.partition, source.offset)
        if output.role == "decisions" and output.value is not None:
            replayed[position] = orjson.loads(output.value)

    def emit_dedup(output: Output, source: Source) -> None:
        emit(output, source)
        # Sent to be decided elsewhere; a report to an id's home is no request.
        report = (wire.KIND_HEADER, wire.ID_REPORT) in (output.headers or [])
        if output.role in ("intake", "requests") and not report:
            rerouted.append((source.topic, source.partition, source.offset))

    metrics = Metrics()
    router = Router(emit, metrics, limits)
    for record in intake:
        router.on_record(record.value, record.key, record.source)

    stores: dict[int, Store] = defaultdict(Store)
    dedup = Dedup(
        partitions, emit_dedup, metrics, limits,
        lambda source, key: stores[source.partition].state(key),
    )  # fmt: skip
    for record in in_log_order(requests):
        store = stores[record.partition]
        store.at(record.timestamp_ms)
        dedup.on_record(record.value, record.key, record.source, store.state(record.key or b""))

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
