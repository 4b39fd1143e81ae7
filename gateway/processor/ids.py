"""The id stage: every client-chosen job id is claimed in `job_ids`, keyed by the id, before
its request reaches its route (the rules: core/ids.py).

It reads two kinds of record, in one log per partition: requests carrying a
client id (from the SDK, the router, or sent back by the dedup stage), and
the routes' reports (`kind: id_report`). A request whose id another route
holds is refused here, with its decision record, rejection and reply like
any; the others go on to `requests`, keyed by their route and marked
`id_claim: claimed` with the id, so the route reports back after deciding.
"""

from __future__ import annotations

import logging

import orjson

from gateway import wire
from gateway.core import GatewayError, Request
from gateway.core.ids import IdClaim, claim_id, report_id
from gateway.core.limits import headers_refusal
from gateway.partitioner import partition_for
from gateway.processor.dedup import Emit, KeyState
from gateway.processor.metrics import Metrics
from gateway.processor.parsing import Limits, dialect_of, parse_limited
from gateway.processor.records import (
    Output,
    Source,
    decision_outputs,
    refused_request,
    request_id,
)
from gateway.processor.total import Guard

log = logging.getLogger("gateway.processor")
CLAIM = "claim"


class IdStage:
    def __init__(self, partitions: int, emit: Emit, metrics: Metrics, limits: Limits) -> None:
        self.partitions = partitions
        self._guard = Guard(emit, None, metrics)
        self.emit = self._guard.emit
        self.metrics = metrics
        self.limits = limits

    def on_record(
        self, value: bytes | None, key: bytes | None, source: Source, state: KeyState
    ) -> None:
        staged = self._guard.stage(key, state)
        if source.headers.get(wire.KIND_HEADER) == wire.ID_REPORT:
            handle = lambda: self._on_report(value, key, staged)  # noqa: E731
            # A report the stage cannot read is the gateway's own fault: kept, not answered.
            self._guard.run("ids", source, value, key, handle, lambda *_: [])
            return
        handle = lambda: self._on_request(value, key, source, staged)  # noqa: E731
        self._guard.run("ids", source, value, key, handle, refused_request)

    def _on_report(self, value: bytes | None, key: bytes | None, state: KeyState) -> None:
        report = orjson.loads(value or b"")
        claim = IdClaim.load(state.get_bytes(CLAIM))
        route, job = str(report["route"]), report.get("job")
        if claim is not None and claim.route != route and job is not None:
            # Two routes hold one id: a minted id a client claimed before its report came.
            self.metrics.id_conflicts.inc()
            # Routes are unique keys, which never go above DEBUG.
            log.error("two routes hold one job id", extra={"job_id": report.get("job_id")})
        _store(state, report_id(claim, route, job, bool(report["decided"])))

    def _on_request(
        self, value: bytes | None, key: bytes | None, source: Source, state: KeyState
    ) -> None:
        request = headers_refusal(source.headers) or parse_limited(value, self.limits)
        raw = request.envelope.raw if isinstance(request, Request) else None
        req_id = request_id(source, raw)
        if isinstance(request, GatewayError) or request.envelope.id is None:
            # Nothing to claim: an invalid request is answered here; one without an id
            # (sent here by mistake) goes through the router, which gives it one.
            if isinstance(request, GatewayError):
                dialect = dialect_of(request, value)
                for output in refused_request(source, request, dialect, raw):
                    self.emit(output, source)
                self.metrics.refused_inputs.labels("ids", request.code).inc()
            else:
                self.emit(_forward(value, None, "intake", source, req_id), source)
            return
        job_id = request.envelope.id
        wanted = job_id.encode()
        if key != wanted or partition_for(wanted, self.partitions) != source.partition:
            # Claimed anywhere else, two partitions could each claim the id.
            self.emit(_forward(value, wanted, "job_ids", source, req_id), source)
            return
        route = wire.route(request)
        assert route is not None  # it has an id
        claim, refusal = claim_id(
            IdClaim.load(state.get_bytes(CLAIM)), request, route, source.timestamp_ms
        )
        _store(state, claim)
        if refusal is not None:
            outputs = decision_outputs(refusal, source, req_id, request.dialect)
            for output in outputs:
                self.emit(output, source)
            self.metrics.decided(refusal.outcome, request.dialect, source.timestamp_ms)
            return
        forward = _forward(value, route.encode(), "requests", source, req_id, claimed=job_id)
        self.emit(forward, source)


def _forward(
    value: bytes | None,
    key: bytes | None,
    role: str,
    source: Source,
    req_id: str,
    claimed: str | None = None,
) -> Output:
    """The request on its way, with its request id; marked claimed only by this stage."""
    dropped = (wire.ID_CLAIM_HEADER, wire.CLAIMED_ID_HEADER, wire.REQUEST_ID_HEADER)
    headers = [(k, v) for k, v in source.headers.items() if k not in dropped]
    headers.append((wire.REQUEST_ID_HEADER, req_id.encode()))
    if claimed is not None:
        headers.append((wire.ID_CLAIM_HEADER, wire.ID_CLAIMED))
        headers.append((wire.CLAIMED_ID_HEADER, claimed.encode()))
    return Output(value or b"", key, role=role, headers=headers)


def _store(state: KeyState, claim: IdClaim | None) -> None:
    if claim is None:
        state.delete(CLAIM)
    else:
        state.set_bytes(CLAIM, claim.dump())
