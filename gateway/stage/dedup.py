"""What the processor does with one record of `requests`, over its key's state: wiring
between the log and the core, one handler per kind of record.

A record is told once (kinds.py) and handed to the handler of its kind: requests
(requests.py), job events (events.py), queue and cron commands (commands.py), id reports
(ids.py), a rate key's claims and reports (rates.py), a tenant's reports and limits
(tenants.py), ticks (which carry only time).
Before any of them, what the record's time made due is done (due.py). No rule of
uniqueness or of the job lifecycle lives here: this module runs each record all or nothing
(total.py) and leaves its audit record (trail.py); what every handler shares, a key's
entries and job records and the schedules, is shared.py's. Each handler is given what it
uses; none knows this module.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from gateway import wire
from gateway.core import GatewayError, Request
from gateway.core.limits import headers_refusal
from gateway.stage.commands import CRON, Commands
from gateway.stage.context import Emit, KeyState, KindHandler, StageMetrics, StateOf
from gateway.stage.due import Due
from gateway.stage.events import Events
from gateway.stage.idempotency import Idempotency
from gateway.stage.ids import Ids
from gateway.stage.kinds import Kind, kind_of
from gateway.stage.parsing import Limits, parse_limited
from gateway.stage.rates import Rates
from gateway.stage.records import Output, Source
from gateway.stage.requests import Requests
from gateway.stage.shared import Shared, Window
from gateway.stage.tenants import Tenants
from gateway.stage.total import Guard
from gateway.stage.trail import CHAIN_KEY, JOB, UNKEYED, Sealer, actor_refusal, seal


class _Ticks:
    """A tick carries time alone: what it made due is done before it is handled."""

    def handle(self, *_: Any) -> bool:
        return True

    def refused(self, *_: Any) -> list[Output]:
        return []


class Dedup:
    """Decides requests and applies job events for the partitions this instance owns."""

    def __init__(
        self,
        partitions: int,
        emit: Emit,
        metrics: StageMetrics,
        limits: Limits,
        state_of: StateOf,
        epoch: Callable[[], object] | None = None,
        sealer: Sealer = UNKEYED,
        window: Window | None = None,
    ) -> None:
        """`epoch`: an object that changes whenever the store may have changed other than
        through this instance (the stores' epoch: a rebalance, an abandoned transaction); None:
        it never does. `sealer`: how audit records are sealed (keyed: audit_keys.py).
        `window`: a replay's, whose schedules may have begun before it (shared.py)."""
        self.sealer = sealer
        # Whether a duplicate's audit record names the job it met rather than carrying it
        # (trail.seal); a replay sets it False for a record written carrying it.
        self.references = True
        # Every record is handled all or nothing, and never raises (see total.py).
        self._guard = guard = Guard(emit, state_of, metrics)
        self._shared = shared = Shared(
            partitions, limits, metrics, guard.emit, guard.state_of, epoch, window
        )  # fmt: skip
        self.commands = Commands(shared)
        idempotency = Idempotency(shared)
        self.ids = Ids(shared, idempotency)
        events = Events(shared, self.commands.paused, self.commands.queue_limits)
        tenants = Tenants(shared)
        self._due = Due(shared, events, self.ids, self.commands)
        self._handlers: dict[Kind, KindHandler] = {
            Kind.REQUEST: Requests(shared, self.ids, idempotency, tenants),
            Kind.EVENT: events, Kind.TICK: _Ticks(), Kind.COMMAND: self.commands,
            Kind.ID_REPORT: self.ids, Kind.RATE: Rates(shared), Kind.TENANT: tenants,
        }  # fmt: skip

    def on_record(
        self, value: bytes | None, key: bytes | None, source: Source, state: KeyState
    ) -> None:
        """One record of the partition's log, handled by the handler of its kind. A request
        whose id its home claimed for this route is reported back there once decided,
        whatever became of it, failures included (see core/ids.py)."""
        shared, guard = self._shared, self._guard
        staged = guard.stage(key, state)
        kind = kind_of(source, value)
        handler = self._handlers[kind]
        claimed = (
            kind is Kind.REQUEST and source.headers.get(wire.ID_CLAIM_HEADER) == wire.ID_CLAIMED
        )
        # Reported as its route's: at its tenant's home too, where a failure ends it.
        route = _route_of(value, key, source, self._shared) if claimed else key
        shared.begin()

        def handle() -> None:
            self._due.passed(source)
            refusal = (
                None if kind is Kind.TICK
                else headers_refusal(source.headers) or actor_refusal(source.headers)
            )  # fmt: skip
            if refusal is not None:  # refused before it is read
                for output in handler.refused(source, refusal, key):
                    shared.emit(output, source)
                shared.metrics.refused_inputs.labels("dedup", refusal.code).inc()
            elif handler.handle(value, key, source, staged) and claimed:
                shared.emit(self.ids.decided(source, route), source)
            self._seal(guard.outputs, source, key, kind)

        def answer(source: Source, error: GatewayError) -> list[Output]:
            # What the failed handling did is gone, and so is what its audit record would say.
            shared.begin()
            outputs = handler.refused(source, error, key)
            if claimed:
                outputs.append(self.ids.decided(source, route))
            self._seal(outputs, source, key, kind)
            return outputs

        shared.settle(guard.run("dedup", source, value, key, handle, answer))

    def _seal(self, outputs: list[Output], source: Source, key: bytes | None, kind: Kind) -> None:
        """The record's audit record, with the state it was decided from (trail.py)."""
        shared = self._shared
        head = shared.state_of(source, CHAIN_KEY)
        seal(outputs, self._guard.staged, head, source, key, kind, shared.what, shared.taken,
             shared.jobs_after, self.sealer, self.references)  # fmt: skip

    def seeded(self, source: Source, state_of: StateOf, name: str, value: bytes) -> None:
        """A value a replay took from an audit record, which read it: on the schedules (in
        `state_of`) as the processor put it there when it wrote it, so that what falls due
        falls due at the same record. What is due is a function of the value alone."""
        if name.startswith(JOB):
            self._shared.schedule_job(orjson.loads(value), source, state_of)
        elif name == CRON:
            self.commands.schedule_cron(source, orjson.loads(value), state_of)


def _route_of(
    value: bytes | None, key: bytes | None, source: Source, shared: Shared
) -> bytes | None:
    """The route of a claimed request: its record key, but at its tenant's home (which ends
    it only if it fails there) the route it names."""
    if key is None or not key.startswith(wire.TENANT_KEY_PREFIX):
        return key
    request = parse_limited(value, shared.limits, source.headers)
    route = wire.route(request) if isinstance(request, Request) else None
    return key if route is None else route.encode()
