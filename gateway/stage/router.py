"""The router stage: raw requests from `intake` and job events from `job_events`, onto `requests`.

Valid requests go on to the dedup stage keyed by their route (`wire.route`),
so they land on the partition that owns it; a keyed request with a client id
goes to the id's home first (keyed by the id, see core/ids.py), which claims
the id and sends it on. A job with neither key nor id gets its id here, a
UUIDv7 derived from the intake record (so replay gives the same one), written
into the request. Invalid ones are decided `invalid` here,
with a rejection and a decision record, so none is lost. Job events go on
unchanged, keyed as they came (by their job's route) and marked as events, so
the dedup stage reads one log per partition: a key's requests and events in
the order it handles them, which replay and explain read back as it is.
"""

from __future__ import annotations

import orjson

from gateway import wire
from gateway.core import GatewayError, Outcome, Request, uuid7
from gateway.core.limits import event_size_refusal, headers_refusal
from gateway.stage.context import Emit, StageMetrics
from gateway.stage.parsing import Limits, dialect_of, parse_limited
from gateway.stage.records import Output, Source, refused_event, refused_request, request_id
from gateway.stage.total import Guard


class Router:
    def __init__(self, emit: Emit, metrics: StageMetrics, limits: Limits) -> None:
        # Every record is handled all or nothing, and never raises (see total.py).
        self._guard = Guard(emit, None, metrics)
        self.emit = self._guard.emit
        self.metrics = metrics
        self.limits = limits

    def on_record(self, value: bytes | None, key: bytes | None, source: Source) -> None:
        self._guard.run(
            "router", source, value, key, lambda: self._on_record(value, source), refused_request
        )

    def on_event(self, value: bytes | None, key: bytes | None, source: Source) -> None:
        self._guard.run(
            "router", source, value, key, lambda: self._on_event(value, key, source),
            refused_event,
        )  # fmt: skip

    def _on_record(self, value: bytes | None, source: Source) -> None:
        request = headers_refusal(source.headers) or parse_limited(
            value, self.limits, source.headers
        )
        raw = request.envelope.raw if isinstance(request, Request) else None
        req_id = request_id(source, raw)
        if isinstance(request, GatewayError):
            dialect = dialect_of(request, value)
            for output in refused_request(source, request, dialect, raw):
                self.emit(output, source)
            self.metrics.decided(Outcome.INVALID, dialect, source.timestamp_ms)
            return
        # The request keeps the id it was given on intake, wherever it is decided. Only
        # the gateway vouches for an id: a producer's own id_claim header is dropped.
        headers = {**source.headers, wire.REQUEST_ID_HEADER: req_id.encode()}
        for name in (wire.KIND_HEADER, wire.ID_CLAIM_HEADER, wire.CLAIMED_ID_HEADER,
                     wire.IDEMPOTENCY_CHECKED_HEADER, *wire.RATE_GATEWAY_HEADERS,
                     *wire.TENANT_HEADERS):  # fmt: skip
            headers.pop(name, None)
        idem = source.header(wire.IDEMPOTENCY_KEY_HEADER)
        if idem is not None:
            # Checked at the key's home first, which gives an id to a job without one, the
            # same on every attempt (stage/idempotency.py).
            home = wire.idempotency_home(idem)
            self.emit(Output(value or b"", home, role="requests",
                             headers=list(headers.items())), source)  # fmt: skip
            return
        # A client id is claimed at its home first (core/ids.py): keyed by the id.
        route = request.envelope.id or wire.route(request)
        if route is None:  # neither a key nor an id: it gets its id here
            route = uuid7(source.timestamp_ms, None, source.seed)
            # Into the request as sent, whatever its dialect (the envelope's raw is OJS-shaped).
            value = orjson.dumps({**orjson.loads(value or b"{}"), "id": route})
        self.emit(
            Output(value or b"", route.encode(), role="requests", headers=list(headers.items())),
            source,
        )

    def _on_event(self, value: bytes | None, key: bytes | None, source: Source) -> None:
        # Checked where it is applied, with its reply; here only what could not be
        # forwarded: a record too large for `requests` once marked as an event.
        refusal = headers_refusal(source.headers) or event_size_refusal(value)
        if refusal is not None:
            for output in refused_event(source, refusal):
                self.emit(output, source)
            self.metrics.refused_inputs.labels("router", refusal.code).inc()
            return
        # Only a rate key's home grants a permit: a producer's own permit headers are dropped.
        headers = {**source.headers, wire.KIND_HEADER: wire.JOB_EVENT}
        for name in wire.RATE_GATEWAY_HEADERS:
            headers.pop(name, None)
        self.emit(Output(value or b"", key, role="requests", headers=list(headers.items())), source)
