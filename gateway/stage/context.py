"""What the stage's modules speak of: where outputs go, a key's state (in a store, and as a
record's handling sees it), the metrics the stage counts, and what handles a kind of record.

Nothing here knows Kafka or a store: the processor hands the stage its emit, its stores'
key states and its metrics (gateway/processor/), and replay hands it its own
(gateway/audit/replay.py).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Protocol

from gateway.core import GatewayError
from gateway.stage.records import Output, Source

# Where the stage's outputs go, each with the record it came of.
Emit = Callable[[Output, Source], None]


class KeyState(Protocol):
    """A key's state in its partition's store, values by name: what the stage is handed for
    the record's key and asks for any other (processor/store.py's, the replay's
    audit/trail_store.py's). A value set with a ttl reads as absent once the partition's
    event time reaches its expiry."""

    def get_bytes(self, name: str) -> bytes | None: ...

    def get_stamped(self, name: str) -> tuple[bytes | None, int | None]:
        """A value and its expiry in event-time ms (None: it has none)."""

    def set_bytes(self, name: str, value: bytes, ttl: timedelta | None = None) -> None: ...

    def delete(self, name: str) -> None: ...


# The state of any key in a record's partition, as of that record.
StateOf = Callable[[Source, bytes], KeyState]

DELETED = object()  # a staged write that deletes


class Staged:
    """A key's state as a record's handling reads and writes it: the writes wait for the
    handling to finish (total.py applies them, or drops them), and what the handling read
    first is kept: the state the record was decided from (see trail.py)."""

    __slots__ = ("_state", "writes", "reads")

    def __init__(self, state: KeyState) -> None:
        self._state = state
        self.writes: dict[str, tuple[object, timedelta | None]] = {}
        # name -> (value, expiry) as the record found it, read before any write of it
        self.reads: dict[str, tuple[bytes | None, int | None]] = {}

    def get_bytes(self, name: str) -> bytes | None:
        written = self.writes.get(name)
        if written is None:
            read = self.reads.get(name)
            if read is None:
                read = self.reads[name] = self._state.get_stamped(name)
            return read[0]
        value = written[0]
        return None if value is DELETED else value  # type: ignore[return-value]

    def peek(self, name: str) -> bytes | None:
        """`get_bytes` of a value that is absent but in a rare case, read in a path every
        record of a kind takes: it joins the record's state (its audit record) only when
        present. A replay, which starts from an empty store, reads such an absence the same
        way, so the audit records of that path stay what they were."""
        if name in self.writes or name in self.reads:
            return self.get_bytes(name)
        read = self._state.get_stamped(name)
        if read[0] is not None:
            self.reads[name] = read
        return read[0]

    def set_bytes(self, name: str, value: bytes, ttl: timedelta | None = None) -> None:
        self.writes[name] = (value, ttl)

    def delete(self, name: str) -> None:
        self.writes[name] = (DELETED, None)

    def apply(self) -> None:
        for name, (value, ttl) in self.writes.items():
            if value is DELETED:
                self._state.delete(name)
            else:
                self._state.set_bytes(name, value, ttl=ttl)  # type: ignore[arg-type]


class Counter(Protocol):
    def inc(self) -> None: ...


class LabelledCounter(Protocol):
    def labels(self, *values: str) -> Counter: ...


class StageMetrics(Protocol):
    """What the stage counts (processor/metrics.py's Metrics has it all)."""

    dead_letters: LabelledCounter  # by stage and exception
    refused_inputs: LabelledCounter  # by stage and error code
    idempotent: LabelledCounter  # by what became of the request
    tenant_requests: LabelledCounter  # by tenant and what its home did
    reroutes: Counter
    id_conflicts: Counter

    def decided(self, outcome: str, dialect: str, record_timestamp_ms: int) -> None: ...

    def event(self, result: str, reason: str) -> None: ...


class KindHandler(Protocol):
    """What handles one kind of record (kinds.py) in the dedup stage."""

    def handle(self, value: bytes | None, key: bytes | None, source: Source, state: Staged) -> bool:
        """Handle it; False: it was sent on to be decided elsewhere."""

    def refused(self, source: Source, error: GatewayError, key: bytes | None) -> list[Output]:
        """What it writes when it is refused unread, or its handling failed."""
