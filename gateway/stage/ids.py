"""Job ids at their home: the dedup stage's part in core/ids.py's one authority for ids.

An id's home is the partition of `requests` its own bytes route to. There the
stage claims client ids for keyed requests before sending them on to their
route, keeps the claim of every id it minted for a keyed job (in the same
state write as the job, no record), and takes the routes' reports (records
keyed by the id, `kind: id_report`) of the jobs they hold under a claimed id.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from gateway import wire
from gateway.core import GatewayError, Request
from gateway.core.ids import IdClaim, claim_id, holder, parse_report, report_id, summary
from gateway.partitioner import partition_for
from gateway.stage.context import Staged
from gateway.stage.idempotency import Idempotency
from gateway.stage.records import Output, Source, decision_outputs, request_id
from gateway.stage.reports import id_report
from gateway.stage.shared import Shared

log = logging.getLogger("gateway.processor")
CLAIM = "claim"


class Ids:
    def __init__(self, shared: Shared, idempotency: Idempotency) -> None:
        self._shared = shared
        self._idempotency = idempotency
        self._at_home: dict[int, Callable[[bytes], bool]] = {}

    def home(self, job_id: bytes) -> int:
        return partition_for(job_id, self._shared.partitions)

    def at_home(self, partition: int) -> Callable[[bytes], bool]:
        """What an id minted on `partition` must satisfy: that its home is `partition`."""
        test = self._at_home.get(partition)
        if test is None:
            count = self._shared.partitions
            test = self._at_home[partition] = lambda job_id: (
                partition_for(job_id, count) == partition
            )
        return test

    def known(self, state: Staged, request: Request) -> Mapping[str, Any] | None:
        """What holds the request's client id where its route decides: the route's own job
        with the id; at the id's home (a job routed by its id), also a keyed job's claim."""
        job_id = request.envelope.id
        if job_id is None:
            return None
        job = self._shared.load_job(state, job_id)
        if job is not None or wire.route(request) != job_id:
            return job
        return holder(IdClaim.load(state.get_bytes(CLAIM)), job_id, job_id)

    def claimed(self, state: Staged, job_id: str, route: str) -> bool:
        """Whether, at the id's home (`route` is the id), a keyed job's route claims the id."""
        return route == job_id and state.peek(CLAIM) is not None

    def claim(self, request: Request, value: bytes | None, source: Source, state: Staged) -> None:
        """At its home, a keyed request's client id: claimed for its route and sent on there
        (marked claimed), or refused as taken, answered like any decision."""
        job_id, route = str(request.envelope.id), str(wire.route(request))
        req_id = request_id(source, request.envelope.raw)
        before = IdClaim.load(state.get_bytes(CLAIM))
        claim, refusal = claim_id(
            before, self._shared.load_job(state, job_id), request, route, source.timestamp_ms
        )
        if claim != before:
            _store(state, claim)
        if refusal is not None:
            idem = self._idempotency.key_of(source)
            for output in decision_outputs(refusal, source, req_id, request.dialect):
                self._shared.emit(output, source)
                if idem is not None and output.role == "decisions" and output.value is not None:
                    self._idempotency.keep(source, state, idem, output.value)
            self._shared.metrics.decided(refusal.outcome, request.dialect, source.timestamp_ms)
            return
        dropped = (wire.ID_CLAIM_HEADER, wire.CLAIMED_ID_HEADER, wire.REQUEST_ID_HEADER)
        headers = [(k, v) for k, v in source.headers.items() if k not in dropped]
        headers += [
            (wire.REQUEST_ID_HEADER, req_id.encode()),
            (wire.ID_CLAIM_HEADER, wire.ID_CLAIMED),
            (wire.CLAIMED_ID_HEADER, job_id.encode()),
        ]
        self._shared.emit(Output(value or b"", route.encode(), "requests", headers=headers), source)

    def minted(self, source: Source, job: Mapping[str, Any], route: str) -> None:
        """A keyed job whose id was minted here, at the id's home: its claim, at once."""
        job_id = str(job["id"]).encode()
        self._apply(self._shared.state_of(source, job_id), route, job, decided=False)

    def left(self, source: Source, job_id: str, route: str) -> None:
        """A job that left its route: its id's claim, if a route other than the id holds it,
        learns so, here when the id's home is here, else by a report."""
        if route != job_id:
            self._report(source, job_id, route, None, decided=False)

    def decided(self, source: Source, route: bytes | None) -> Output:
        """After a claimed request's decision: the report of the job the route now holds
        under the id, to the id's home."""
        job_id = source.header(wire.CLAIMED_ID_HEADER) or ""
        state = self._shared.state_of(source, route or b"")
        job = self._shared.load_job(state, job_id)
        held = None if job is None else summary(job)
        answer = self._idempotency.kept(source, state)
        return id_report(job_id, (route or b"").decode(errors="replace"), held, True, answer)

    def handle(
        self, value: bytes | None, _key: bytes | None, source: Source, state: Staged
    ) -> bool:
        """A route's report, at the id's home (the record is keyed by the id). One no route
        wrote (unreadable) changes nothing; it is counted and logged."""
        report = parse_report(value)
        if isinstance(report, GatewayError):
            self._shared.metrics.refused_inputs.labels("dedup", report.code).inc()
            log.warning("id report refused", extra={"error": report.message})
            return True
        self._apply(state, report.route, report.job, report.decided)
        if report.answer is not None:
            self._idempotency.keep_reported(source, state, *report.answer)
        return True

    @staticmethod
    def refused(*_: Any) -> list[Output]:
        """The gateway's own record: a failed one is kept as a dead letter, not answered."""
        return []

    def _report(
        self, source: Source, job_id: str, route: str, job: Mapping[str, Any] | None, decided: bool
    ) -> None:
        if self.home(job_id.encode()) != source.partition:
            self._shared.emit(id_report(job_id, route, None if job is None else summary(job),
                                      decided), source)  # fmt: skip
            return
        self._apply(self._shared.state_of(source, job_id.encode()), route, job, decided)

    def _apply(
        self, state: Staged, route: str, job: Mapping[str, Any] | None, decided: bool
    ) -> None:
        claim = IdClaim.load(state.get_bytes(CLAIM))
        if claim is not None and claim.route != route and job is not None:
            # Two routes hold one id: only a record forged past the home can do this.
            self._shared.metrics.id_conflicts.inc()
            log.error("two routes hold one job id", extra={"job_id": job.get("id")})
        _store(state, report_id(claim, route, job, decided))


def _store(state: Staged, claim: IdClaim | None) -> None:
    if claim is None:
        state.delete(CLAIM)
    else:
        state.set_bytes(CLAIM, claim.dump())
