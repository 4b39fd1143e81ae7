"""What the processor does with one input record: wiring between Kafka and the core.

No rule of uniqueness lives here: requests go to `core.decide`, job events to
`core.apply_event`, and the results become records (see records.py). This
module only loads and stores a fingerprint's entries, checks that a request
sits on the partition its fingerprint belongs to, and hands records to `emit`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from gateway.core import (
    DEFAULT_RETENTION_MS,
    INVALID_EVENT,
    PAYLOAD_TOO_LARGE,
    UNKNOWN_DIALECT,
    Entry,
    EventOutcome,
    GatewayError,
    JobEvent,
    Request,
    apply_event,
    decide,
    dump_entries,
    expires_at,
    load_entries,
    parse_event_json,
    parse_request_json,
    requested_dialect,
)
from gateway.partitioner import partition_for
from gateway.processor.metrics import Metrics
from gateway.processor.records import (
    Output,
    Source,
    decision_outputs,
    event_reply,
    request_id,
)

log = logging.getLogger("gateway.processor")

Emit = Callable[[Output, Source], None]
# The state of the record's key (its fingerprint) in the partition's store:
# get_bytes, set_bytes (with an optional event-time ttl) and delete.
KeyState = Any
ENTRIES = "entries"


@dataclass(frozen=True)
class Limits:
    # Well under the topics' max.message.bytes (1 MiB): a decision record
    # carries the job, so it must fit with room to spare.
    max_request_bytes: int = 256 * 1024
    retention_ms: int = DEFAULT_RETENTION_MS


def parse_limited(value: bytes | None, limits: Limits) -> Request | GatewayError:
    """Parse a request record, refusing one over the size limit before reading it."""
    size = len(value or b"")
    if size > limits.max_request_bytes:
        return GatewayError(
            PAYLOAD_TOO_LARGE,
            f"the request is {size} bytes; the limit is {limits.max_request_bytes}",
        )
    return parse_request_json(value or b"")


def dialect_of(request: Request | GatewayError, value: bytes | None) -> str:
    """The dialect to record for a request, also when it was refused."""
    if isinstance(request, Request):
        return request.dialect
    if request.code == PAYLOAD_TOO_LARGE:
        return UNKNOWN_DIALECT  # not worth reading
    return requested_dialect(value or b"")


def parse_event_record(value: bytes | None, key: bytes | None) -> JobEvent | GatewayError:
    """Parse a job-event record; its record key must be the event's unique_key."""
    event = parse_event_json(value or b"")
    if not isinstance(event, GatewayError) and (key or b"").decode(errors="replace") != (
        event.unique_key
    ):
        return GatewayError(INVALID_EVENT, "the record key must be the event's unique_key")
    return event


class Dedup:
    """Decides requests and applies job events for the partitions this instance owns."""

    def __init__(self, partitions: int, emit: Emit, metrics: Metrics, limits: Limits) -> None:
        self.partitions = partitions
        self.emit = emit
        self.metrics = metrics
        self.limits = limits

    def on_record(
        self, value: bytes | None, key: bytes | None, source: Source, state: KeyState
    ) -> None:
        """One record of the partition's log: a request, or a job event the router forwarded."""
        if source.is_job_event:
            self.on_event(value, key, source, state)
        else:
            self.on_request(value, key, source, state)

    def _load(self, state: KeyState) -> tuple[Entry, ...]:
        return load_entries(state.get_bytes(ENTRIES))

    def _store(
        self, state: KeyState, before: tuple[Entry, ...], after: tuple[Entry, ...], now_ms: int
    ) -> None:
        """Write the key's entries. The store deletes them when the core says they expire,
        whether or not the key is touched again; an empty key is deleted now. Either way
        the changelog gets a tombstone."""
        if after == before:
            return
        due = expires_at(after, self.limits.retention_ms)
        if not after or (due is not None and due <= now_ms):
            state.delete(ENTRIES)
            self.metrics.state_keys.dec()
            return
        ttl = None if due is None else timedelta(milliseconds=due - now_ms)
        state.set_bytes(ENTRIES, dump_entries(after), ttl=ttl)
        if not before:
            self.metrics.state_keys.inc()

    # -- requests -----------------------------------------------------------

    def on_request(
        self, value: bytes | None, key: bytes | None, source: Source, state: KeyState
    ) -> None:
        request = parse_limited(value, self.limits)
        if isinstance(request, Request) and self._misrouted(request, key, source.partition):
            # Deciding here could let two copies of one fingerprint be decided on
            # two partitions; the router re-keys it onto the right one.
            self.metrics.reroutes.inc()
            log.warning(
                "request on the wrong partition re-routed",
                extra={"source": source.as_dict()},
            )
            intake = Output(value or b"", key, role="intake", headers=list(source.headers.items()))
            self.emit(intake, source)
            return
        unique_key = request.unique_key if isinstance(request, Request) else None
        entries = self._load(state) if unique_key else ()
        decision = decide(
            entries, request, source.timestamp_ms, self.limits.retention_ms, seed=source.seed
        )
        if unique_key:
            self._store(state, entries, decision.entries, source.timestamp_ms)
        raw = request.envelope.raw if isinstance(request, Request) else None
        dialect = dialect_of(request, value)
        for output in decision_outputs(decision, source, request_id(source, raw), dialect):
            self.emit(output, source)
        self.metrics.decided(decision.outcome, dialect, source.timestamp_ms)
        log.debug(
            "decided",
            extra={"outcome": str(decision.outcome), "unique_key": decision.unique_key},
        )

    def _misrouted(self, request: Request, key: bytes | None, partition: int) -> bool:
        if request.unique_key is None:
            return False  # no uniqueness, no partition to belong to
        wanted = request.unique_key.encode()
        return key != wanted or partition_for(wanted, self.partitions) != partition

    # -- job events ---------------------------------------------------------

    def on_event(
        self, value: bytes | None, key: bytes | None, source: Source, state: KeyState
    ) -> None:
        event = parse_event_record(value, key)
        unique_key = None if isinstance(event, GatewayError) else event.unique_key
        entries = self._load(state) if unique_key else ()
        result = apply_event(entries, event, source.timestamp_ms, self.limits.retention_ms)
        if unique_key and result.outcome is EventOutcome.APPLIED:
            self._store(state, entries, result.entries, source.timestamp_ms)
        reply = event_reply(result, unique_key, source)
        if reply is not None:
            self.emit(reply, source)
        reason = result.reason or (result.error.code if result.error else "")
        self.metrics.events.labels(str(result.outcome), str(reason)).inc()
        if result.outcome is not EventOutcome.APPLIED:
            log.info(
                "job event not applied",
                extra={
                    "result": str(result.outcome),
                    "reason": str(reason),
                    "error": result.error.message if result.error else None,
                    "source": source.as_dict(),
                },
            )
