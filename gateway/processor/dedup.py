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
from typing import Any

from gateway.core import (
    DEFAULT_RETENTION_MS,
    Entry,
    EventOutcome,
    GatewayError,
    Request,
    apply_event,
    decide,
    dump_entries,
    load_entries,
    parse_event_json,
    parse_request_json,
)
from gateway.partitioner import partition_for
from gateway.processor.metrics import Metrics
from gateway.processor.records import Output, Source, decision_outputs, request_id

log = logging.getLogger("gateway.processor")

ENTRIES = "entries"  # the state name under each fingerprint
PAYLOAD_TOO_LARGE = "payload_too_large"

Emit = Callable[[Output, Source], None]


@dataclass(frozen=True)
class Limits:
    max_request_bytes: int = 1_000_000
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


class Dedup:
    """Decides requests and applies job events for the partitions this instance owns."""

    def __init__(self, partitions: int, emit: Emit, metrics: Metrics, limits: Limits) -> None:
        self.partitions = partitions
        self.emit = emit
        self.metrics = metrics
        self.limits = limits

    # -- requests -----------------------------------------------------------

    def on_request(
        self, value: bytes | None, key: bytes | None, source: Source, state: Any
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
        key_state = state if isinstance(request, Request) and request.unique_key else None
        entries = _load(key_state)
        decision = decide(
            entries, request, source.timestamp_ms, self.limits.retention_ms, seed=source.seed
        )
        if key_state is not None:
            _store(key_state, entries, decision.entries, self.metrics)
        raw = request.envelope.raw if isinstance(request, Request) else None
        dialect = request.dialect if isinstance(request, Request) else "ojs"
        for output in decision_outputs(decision, source, request_id(source, raw), dialect):
            self.emit(output, source)
        self.metrics.decisions.labels(str(decision.outcome), dialect).inc()
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

    def on_event(self, value: bytes | None, key: bytes | None, source: Source, state: Any) -> None:
        event = parse_event_json(value or b"")
        if not isinstance(event, GatewayError) and (key or b"").decode(errors="replace") != (
            event.unique_key
        ):
            event = GatewayError("invalid_event", "the record key must be the event's unique_key")
        key_state = None if isinstance(event, GatewayError) else state
        entries = _load(key_state)
        result = apply_event(entries, event, source.timestamp_ms, self.limits.retention_ms)
        if key_state is not None and result.outcome is EventOutcome.APPLIED:
            _store(key_state, entries, result.entries, self.metrics)
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


def _load(state: Any) -> tuple[Entry, ...]:
    return () if state is None else load_entries(state.get_bytes(ENTRIES))


def _store(
    state: Any, before: tuple[Entry, ...], after: tuple[Entry, ...], metrics: Metrics
) -> None:
    """Write the key's entries; an empty key is deleted, so a tombstone reaches the changelog."""
    if after == before:
        return
    if after:
        state.set_bytes(ENTRIES, dump_entries(after))
        if not before:
            metrics.state_keys.inc()
    else:
        state.delete(ENTRIES)
        if before:
            metrics.state_keys.dec()
