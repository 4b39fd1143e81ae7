"""Which stage handles an input record, and over which partition's store.

The processor's per-record path without Kafka: the loop (loop.py) hands each
batch's records here in log order, and so can a test or a benchmark. `intake`
and `job_events` go to the router (no state); `requests` to the dedup stage,
over the store of the record's partition.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol

from gateway.catalogue import Catalogue
from gateway.processor.metrics import Metrics
from gateway.processor.store import PartitionStore
from gateway.stage.context import Emit, KeyState
from gateway.stage.dedup import Dedup
from gateway.stage.parsing import Limits
from gateway.stage.records import Source, headers_of
from gateway.stage.router import Router
from gateway.stage.shared import ENTRIES
from gateway.stage.trail import UNKEYED, Sealer

# The inputs, by catalogue role.
INPUTS = ("intake", "job_events", "requests")


def input_roles(catalogue: Catalogue) -> dict[str, str]:
    """Each input topic's catalogue role."""
    return {catalogue.name(role): role for role in INPUTS}


class Record(Protocol):
    """What the stages read of an input record: confluent_kafka's Message has it all."""

    def topic(self) -> str | None: ...
    def partition(self) -> int | None: ...
    def offset(self) -> int | None: ...
    def timestamp(self) -> tuple[int, int]: ...
    def key(self) -> bytes | None: ...
    def value(self) -> bytes | None: ...
    def headers(self) -> Any: ...


class Stores:
    """The open stores of this runtime's partitions, under `root`/<role>/<partition>: the
    stages read them here, and the loop opens and closes them with its tasks (task.py).

    A `requests` store counts the routes that hold entries: the fingerprints it holds."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.open: dict[tuple[str, int], PartitionStore] = {}
        # Changes whenever a store may have changed other than through the stages (a
        # rebalance, an abandoned transaction): what the dedup stage remembers is forgotten.
        self.epoch = object()

    def get(self, role: str, partition: int) -> PartitionStore:
        store = self.open.get((role, partition))
        if store is None:
            counted = ENTRIES if role == "requests" else None
            store = PartitionStore(self.root / role / str(partition), counted)
            self.open[(role, partition)] = store
            self.epoch = object()
        return store

    def fingerprints(self) -> int:
        """The fingerprints the open stores hold, as of their last write."""
        return sum(store.count for (role, _), store in self.open.items() if role == "requests")

    def close(self, keys: Iterable[tuple[str, int]]) -> None:
        """Close these stores; after a rebalance or an abandoned transaction, with no keys
        too: what the stages remember of the stores is forgotten."""
        for key in list(keys):
            store = self.open.pop(key, None)
            if store is not None:
                store.close()
        self.epoch = object()


class Stages:
    def __init__(
        self, catalogue: Catalogue, emit: Emit, metrics: Metrics, limits: Limits, stores: Stores,
        sealer: Sealer = UNKEYED,
    ) -> None:  # fmt: skip
        self.stores = stores
        self.metrics = metrics
        self.roles = input_roles(catalogue)
        self.dedup = Dedup(
            catalogue.by_role("requests").partitions, emit, metrics, limits,
            lambda source, key: stores.get("requests", source.partition).state(key),
            epoch=lambda: stores.epoch, sealer=sealer,
        )  # fmt: skip
        self.router = Router(emit, metrics, limits)
        self._handlers: dict[str, Callable[[Record, str, int], None]] = {
            "intake": self._intake,
            "job_events": self._job_event,
            "requests": self._request,
        }

    def handle(self, records: Iterable[Record]) -> None:
        """Handle records in the order given (each partition's in log order)."""
        roles, handlers = self.roles, self._handlers
        for record in records:
            topic = record.topic() or ""
            handlers[roles[topic]](record, topic, record.partition() or 0)
        self.metrics.flush()

    def _source(self, record: Record, topic: str, partition: int) -> Source:
        return Source(
            topic, partition, record.offset() or 0, record.timestamp()[1],
            headers_of(record.headers()),
        )  # fmt: skip

    def _intake(self, record: Record, topic: str, partition: int) -> None:
        self.router.on_record(record.value(), record.key(), self._source(record, topic, partition))

    def _job_event(self, record: Record, topic: str, partition: int) -> None:
        self.router.on_event(record.value(), record.key(), self._source(record, topic, partition))

    def _request(self, record: Record, topic: str, partition: int) -> None:
        self._stateful(self.dedup.on_record, "requests", record, topic, partition)

    def _stateful(
        self, stage: Callable[[bytes | None, bytes | None, Source, KeyState], None], role: str,
        record: Record, topic: str, partition: int,
    ) -> None:  # fmt: skip
        """A record of a stateful input, over its key's state in its partition's store."""
        source = self._source(record, topic, partition)
        store = self.stores.get(role, partition)
        store.at(source.timestamp_ms)
        key = record.key()
        stage(record.value(), key, source, store.state(key or b""))
