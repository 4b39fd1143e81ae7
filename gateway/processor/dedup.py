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

from gateway.core import (
    DEFAULT_RETENTION_MS,
    INVALID_EVENT,
    PAYLOAD_TOO_LARGE,
    EventOutcome,
    GatewayError,
    JobEvent,
    Request,
    apply_event,
    decide,
    parse_event_json,
    parse_request_json,
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
from gateway.processor.sweep import KeyStore, States

log = logging.getLogger("gateway.processor")

Emit = Callable[[Output, Source], None]


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
        self.keys = KeyStore(limits.retention_ms, metrics)

    def on_record(
        self,
        value: bytes | None,
        key: bytes | None,
        source: Source,
        states: States,
        is_request: bool,
    ) -> None:
        """One record of the partition: decide or apply it, then sweep expired keys."""
        if is_request:
            self.on_request(value, key, source, states)
        else:
            self.on_event(value, key, source, states)
        self.keys.sweep(states, source.timestamp_ms)

    # -- requests -----------------------------------------------------------

    def on_request(
        self, value: bytes | None, key: bytes | None, source: Source, states: States
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
        entries = self.keys.load(states, unique_key) if unique_key else ()
        decision = decide(
            entries, request, source.timestamp_ms, self.limits.retention_ms, seed=source.seed
        )
        if unique_key:
            self.keys.store(states, unique_key, entries, decision.entries)
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

    def on_event(
        self, value: bytes | None, key: bytes | None, source: Source, states: States
    ) -> None:
        event = parse_event_record(value, key)
        unique_key = None if isinstance(event, GatewayError) else event.unique_key
        entries = self.keys.load(states, unique_key) if unique_key else ()
        result = apply_event(entries, event, source.timestamp_ms, self.limits.retention_ms)
        if unique_key and result.outcome is EventOutcome.APPLIED:
            self.keys.store(states, unique_key, entries, result.entries)
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
