"""A tenant's home: the dedup stage's part in core/tenant_limits.py's one authority for a
tenant's counts.

A request of a tenant's job marked `tenant_counted` (wire.py) passes its tenant's home, the
partition of `wire.tenant_home(tenant)`, once its idempotency key is checked and its client
id claimed, before its route decides it. The home admits it at the record's broker time
and sends it on to its route with the place it took (`tenant_slot`), or with the limit it
breaks (`tenant_refused`), which the route answers as its decision: so every end of a
request is its route's, and a claimed id or an idempotency key learns of it as of any
other. The route gives the place back (`tenant_report`) at once when the request made no
job, else when the job first starts or ends (shared.put_job). An operator's limits come
as a `tenant_command`, answered with the tenant as it then stands. The tenant's state is
published on `job_states` under its home key, for the tenant routes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from gateway import wire
from gateway.core import INVALID_EVENT, INVALID_REQUEST, OJS, EventOutcome, GatewayError, Request
from gateway.core.tenant_limits import (
    TenantLimits,
    TenantState,
    admit,
    breach_error,
    concurrency_limit,
    concurrency_refusal,
    idle,
    is_scheduled,
    parse_limits,
    parse_tenant_command,
    release,
    reserved_key_refusal,
    set_limits,
    shown_limits,
)
from gateway.core.tenants import is_valid_tenant, request_tenant
from gateway.partitioner import partition_for
from gateway.stage.context import Staged
from gateway.stage.records import Output, Source, refused_command
from gateway.stage.reports import tenant_report
from gateway.stage.shared import Shared

STATE = "tenant"


class Tenants:
    def __init__(self, shared: Shared) -> None:
        self._shared = shared

    @staticmethod
    def unplaced(request: Request, source: Source) -> str | None:
        """The tenant a counted request must pass before its route decides it; None for a
        request that is not counted or has passed."""
        headers = source.headers
        if wire.TENANT_COUNTED_HEADER not in headers or any(
            name in headers for name in wire.TENANT_HEADERS
        ):
            return None
        tenant = request_tenant(request)
        return tenant if is_valid_tenant(tenant) else None

    def is_home(self, tenant: str, key: bytes | None, partition: int) -> bool:
        home = wire.tenant_home(tenant)
        return key == home and partition_for(home, self._shared.partitions) == partition

    def at_home(
        self, request: Request, tenant: str, value: bytes | None, key: bytes | None,
        source: Source, state: Staged,
    ) -> None:  # fmt: skip
        """Admit the request at its tenant's home (sent there first if this is not it), and
        send it on to its route with the place it took or the limit it breaks."""
        shared = self._shared
        home = wire.tenant_home(tenant)
        headers = [(k, v) for k, v in source.headers.items() if k not in wire.TENANT_HEADERS]
        if not self.is_home(tenant, key, source.partition):
            shared.emit(Output(value or b"", home, "requests", headers=headers), source)
            return
        route = wire.route(request)
        if route is None:  # no id yet: the router gives it one, and it comes back here
            shared.emit(Output(value or b"", key, "intake", headers=headers), source)
            return
        now = source.timestamp_ms
        envelope = request.envelope
        scheduled = is_scheduled(envelope.scheduled_at, envelope.scheduled_in, now)
        before = TenantState.load(state.get_bytes(STATE))
        limits = TenantState(tenant).limits if before is None else before.limits
        own = request.envelope.rate_limit
        held = reserved_key_refusal(None if own is None else own.key, False) or (
            concurrency_refusal(limits, own is not None, request.dialect == OJS)
        )
        after, breach = (
            (before, None) if held is not None else admit(before, tenant, scheduled, now)
        )
        if after is not None:
            self._store(state, source, home, before, after)
        told: dict[str, Any] = {"tenant": tenant, "route": route}
        if after is not None:
            told.update(waiting=after.waiting, scheduled=after.scheduled)
        refused = None
        if held is not None:
            refused = {"error": held.to_dict(), "details": {"tenant_id": tenant}}
        elif breach is not None:
            error = breach_error(tenant, breach)
            refused = {"error": error.to_dict(), "details": breach.details(tenant, now)}
        result = "admitted" if refused is None else (
            "unsupported" if breach is None else breach.limit
        )  # fmt: skip
        shared.metrics.tenant_requests.labels(tenant, result).inc()
        if refused is None:
            slot = wire.SLOT_SCHEDULED if scheduled else wire.SLOT_WAITING
            headers.append((wire.TENANT_SLOT_HEADER, f"{slot}/{tenant}".encode()))
            told["slot"] = slot
            given = concurrency_limit(tenant, limits)
            if given is not None:  # held by its tenant's concurrency key (core/tenant_limits.py)
                value = orjson.dumps({**orjson.loads(value or b"{}"), "rate_limit": given})
                told["rate_limit"] = given
        else:
            headers.append((wire.TENANT_REFUSED_HEADER, orjson.dumps(refused)))
            told["refused"] = refused
            shared.metrics.refused_inputs.labels("dedup", refused["error"]["code"]).inc()
        shared.what = {"tenant": told}
        shared.emit(Output(value or b"", route.encode(), "requests", headers=headers), source)

    def refused(self, source: Source, error: GatewayError, key: bytes | None) -> list[Output]:
        """A command refused before it is read is answered; a report is the gateway's own."""
        if source.headers.get(wire.KIND_HEADER) == wire.TENANT_COMMAND:
            return refused_command(source, error, key)
        return []

    def handle(self, value: bytes | None, key: bytes | None, source: Source, state: Staged) -> bool:
        if source.headers.get(wire.KIND_HEADER) == wire.TENANT_COMMAND:
            self._command(value, key, source, state)
        else:
            self._report(value, key, source, state)
        return True

    def _command(
        self, value: bytes | None, key: bytes | None, source: Source, state: Staged
    ) -> None:
        """An operator's limits for the tenant, answered with the tenant as it then stands."""
        shared = self._shared
        command = parse_tenant_command(value or b"")
        if not isinstance(command, GatewayError) and wire.tenant_home(command[0]) != key:
            command = GatewayError(INVALID_EVENT, "a tenant command is keyed by its tenant's home")
        if isinstance(command, GatewayError):
            shared.refuse_command(source, command, key)
            return
        tenant, given, reason = command
        before = TenantState.load(state.get_bytes(STATE))
        limits = parse_limits(given, TenantLimits() if before is None else before.limits)[0]
        after = set_limits(before, tenant, limits)
        self._store(state, source, key or b"", before, after)
        shared.what = {"tenant": {"tenant": tenant, "limits": limits.to_dict(), "reason": reason}}
        shown = {"outcome": str(EventOutcome.APPLIED), "tenant_id": tenant,
                 "limits": shown_limits(tenant, after)}  # fmt: skip
        shared.answer_command(source, key, shown)

    def _report(
        self, value: bytes | None, key: bytes | None, source: Source, state: Staged
    ) -> None:
        """A place given back by a route. One no route wrote changes nothing: counted."""
        shared = self._shared
        scheduled = _parse_report(value)
        before = TenantState.load(state.get_bytes(STATE))
        if scheduled is None or before is None:
            shared.metrics.refused_inputs.labels("dedup", INVALID_EVENT).inc()
            return
        after = release(before, scheduled)
        self._store(state, source, key or b"", before, after)
        shared.metrics.tenant_requests.labels(before.tenant, "returned").inc()
        shared.what = {"tenant": {"tenant": before.tenant, "released": "scheduled" if scheduled
                                  else "waiting", "waiting": after.waiting}}  # fmt: skip

    def _store(
        self, state: Staged, source: Source, key: bytes, before: TenantState | None,
        after: TenantState,
    ) -> None:  # fmt: skip
        """Keep and publish the tenant's state; one with nothing to remember is deleted."""
        if after == before:
            return
        if idle(after):
            if before is not None:
                state.delete(STATE)
                self._shared.emit(Output(None, key, role="job_states"), source)
            return
        dumped = after.dump()
        state.set_bytes(STATE, dumped)
        self._shared.emit(Output(dumped, key, role="job_states"), source)


def _parse_report(value: bytes | None) -> bool | None:
    try:
        report = orjson.loads(value or b"")
    except orjson.JSONDecodeError:
        return None
    scheduled = report.get("scheduled") if isinstance(report, dict) else None
    return scheduled if isinstance(scheduled, bool) else None


# -- at the job's route ------------------------------------------------------------


def slot_of(source: Source) -> dict[str, Any] | None:
    """The place its tenant's home took for a request, as its job keeps it ({"tenant",
    "scheduled"}); None without one."""
    slot = source.header(wire.TENANT_SLOT_HEADER)
    if slot is None:
        return None
    kind, _, tenant = slot.partition("/")
    return {"tenant": tenant, "scheduled": kind == wire.SLOT_SCHEDULED}


def given_back(slot: Mapping[str, Any]) -> Output:
    """A place given back to its tenant's home."""
    return tenant_report(str(slot["tenant"]), bool(slot.get("scheduled")))


def refusal_of(source: Source) -> tuple[GatewayError, dict[str, Any]] | None:
    """The limit its tenant's home found a request breaks (error, details); None without."""
    raw = source.headers.get(wire.TENANT_REFUSED_HEADER)
    if raw is None:
        return None
    try:
        refused = orjson.loads(raw)
        error = refused["error"]
        return GatewayError(str(error["code"]), str(error["message"])), dict(refused["details"])
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return GatewayError(INVALID_REQUEST, "the tenant_refused header is not one the gateway "
                            "wrote"), {}  # fmt: skip
