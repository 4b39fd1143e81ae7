"""A rate key's home: the dedup stage's part in core/rates.py's one authority for permits.

A rate key's home is the partition its record key `wire.rate_home(key)` routes to. A claim
(job.started) of a rate-limited job comes here first, marked `rate`: from fetch, keyed so,
or sent on by the job's route when a worker claimed the job straight at its route. The
home decides it at the record's broker time: granted, the claim goes on to the job's route
as a job event carrying the permit (wire.RATE_PERMIT_HEADER and its fellows), and the
caller's reply headers, so the route answers it; refused, the home answers it (`refused`,
code `rate_limited`). Any other event marked `rate` (fetch's requeue of a claim with no
answer) goes on unchanged, after the claim it follows. The routes give permits back with
records marked `rate_report`; an operator sets or clears the key's override with one
marked `rate_command`, answered with the key as it then stands. The key's state is
published on `job_states` under its home key (the view reads it as a control, so fetch
proposes no job its key has no permit for).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import orjson

from gateway import wire
from gateway.core import (
    INVALID_EVENT,
    INVALID_REQUEST,
    EventOutcome,
    EventResult,
    GatewayError,
    State,
)
from gateway.core.job_events import HEARTBEAT, JobEvent, parse_event_json
from gateway.core.rate_policy import JOB_FIELD, WAIT, RateLimit, parse_rate_command, policy_of
from gateway.core.rates import (
    Permit,
    RateState,
    decide,
    idle_at,
    inspect,
    overridden,
    refusal_error,
    release,
    set_override,
    window,
)
from gateway.stage.context import Staged
from gateway.stage.records import (
    Output,
    Source,
    event_reply,
    refused_command,
    refused_event,
)
from gateway.stage.reports import rate_report
from gateway.stage.shared import Shared

log = logging.getLogger("gateway.processor")
STATE = "rate"


class Rates:
    def __init__(self, shared: Shared) -> None:
        self._shared = shared

    def refused(self, source: Source, error: GatewayError, key: bytes | None) -> list[Output]:
        """A claim or command refused before it is read is answered; a report is the
        gateway's own."""
        kind = source.headers.get(wire.KIND_HEADER)
        if kind == wire.RATE_REPORT:
            return []
        if kind == wire.RATE_COMMAND:
            return refused_command(source, error, key)
        return refused_event(source, error)

    def handle(self, value: bytes | None, key: bytes | None, source: Source, state: Staged) -> bool:
        kind = source.headers.get(wire.KIND_HEADER)
        if kind == wire.RATE_REPORT:
            self._report(value, key, source, state)
        elif kind == wire.RATE_COMMAND:
            self._command(value, key, source, state)
        else:
            self._event(value, key, source, state)
        return True

    def _command(
        self, value: bytes | None, key: bytes | None, source: Source, state: Staged
    ) -> None:
        """An operator's override of the key set or cleared, at the record's broker time;
        answered with the key as it then stands."""
        shared = self._shared
        command = parse_rate_command(value or b"")
        if not isinstance(command, GatewayError) and wire.rate_home(command[0]) != key:
            command = GatewayError(INVALID_REQUEST, "a rate command is keyed by its key's home")
        if isinstance(command, GatewayError):
            shared.refuse_command(source, command, key)
            return
        name, given = command
        now = source.timestamp_ms
        before = RateState.load(state.get_bytes(STATE))
        after = set_override(before, name, given, now)
        self._store(state, source, key or b"", before, after)
        override = None if after.override is None else after.override.to_dict()
        shared.what = {"rate": {"key": name, "override": override, "cleared": given is None}}
        shown = {"outcome": str(EventOutcome.APPLIED), "rate_limit": inspect(name, after, now, 0)}
        shared.answer_command(source, key, shown)

    def _event(self, value: bytes | None, key: bytes | None, source: Source, state: Staged) -> None:
        shared = self._shared
        event, policy = _parse(value, key)
        if isinstance(event, GatewayError):
            for output in refused_event(source, event):
                shared.emit(output, source)
            shared.metrics.refused_inputs.labels("dedup", event.code).inc()
            return
        assert policy is not None
        if not is_claim(event):
            shared.emit(_forwarded(value or b"", event.route, source, ()), source)
            sent_on = {"key": policy.key, "forwarded": event.event_type}
            shared.what = {"job_id": event.job_id, "rate": sent_on}
            return
        now = source.timestamp_ms
        carried = permits_of(source.headers)  # of the keys it passed already (queue_rates.py)
        permit_id = f"{source.partition}-{source.offset}"  # the log's own: replay makes the same
        before = RateState.load(state.get_bytes(STATE))
        after, refusal = decide(before, policy, event.job_id, permit_id, now)
        self._store(state, source, key or b"", before, after)
        rule = overridden(after, policy, now)
        told: dict[str, Any] = {"key": policy.key, "policy": policy.to_dict(),
                                "held": len(after.holders),
                                "starts": len(window(after.starts, rule, now))}  # fmt: skip
        if after.override is not None and after.override.active(now):
            told["override"] = after.override.to_dict()
        if refusal is None:
            permit = Permit(policy.key, permit_id, now)
            shared.emit(_forwarded(value or b"", event.route, source, (*carried, permit)), source)
            told.update(outcome="granted", permit=permit_id, permit_at=now)
        elif policy.on_limit != WAIT:
            # Its route moves the job as its on_limit says, and answers the claim.
            error = refusal_error(event.job_id, policy.key, refusal)
            refused = {"on_limit": policy.on_limit, "retry_at": refusal.retry_at_ms,
                       "key": policy.key, "error": error.to_dict()}  # fmt: skip
            shared.emit(_forwarded(value or b"", event.route, source, carried, refused), source)
            told.update(outcome="refused", error=error.to_dict(), on_limit=policy.on_limit,
                        **refusal.details(policy.key))  # fmt: skip
        else:
            error = refusal_error(event.job_id, policy.key, refusal)
            result = EventResult(EventOutcome.REFUSED, event.job_id, error=error)
            reply = event_reply(result, event.route, source)
            if reply is not None:
                shared.emit(reply, source)
            for held in carried:  # another key's, granted before: not used
                shared.emit(rate_report(held.key, held.id, unused=True), source)
            told.update(outcome="refused", error=error.to_dict(), **refusal.details(policy.key))
            shared.metrics.event(str(EventOutcome.REFUSED), error.code)
        shared.what = {"job_id": event.job_id, "rate": told}

    def _report(
        self, value: bytes | None, key: bytes | None, source: Source, state: Staged
    ) -> None:
        """A permit given back by a route. One no route wrote changes nothing: counted."""
        shared = self._shared
        report = _parse_report(value)
        if report is None:
            shared.metrics.refused_inputs.labels("dedup", INVALID_EVENT).inc()
            log.warning("rate report refused: not {permit, unused}")
            return
        permit_id, unused = report
        before = RateState.load(state.get_bytes(STATE))
        if before is None:
            return
        after = release(before, permit_id, unused, source.timestamp_ms)
        self._store(state, source, key or b"", before, after)
        shared.what = {"rate": {"key": before.key, "released": permit_id,
                                "unused": unused, "held": len(after.holders)}}  # fmt: skip

    def _store(
        self, state: Staged, source: Source, key: bytes, before: RateState | None,
        after: RateState,
    ) -> None:  # fmt: skip
        """Keep and publish the key's state; a key that holds nothing is deleted. One that
        holds only starts leaves the store by event time once the newest is a period old."""
        if after == before:
            return
        idle = idle_at(after)
        now = source.timestamp_ms
        if idle is not None and idle <= now:
            if before is not None:
                state.delete(STATE)
                self._shared.emit(Output(None, key, role="job_states"), source)
            return
        ttl = None if idle is None else timedelta(milliseconds=idle - now)
        dumped = after.dump()
        state.set_bytes(STATE, dumped, ttl=ttl)
        self._shared.emit(Output(dumped, key, role="job_states"), source)


def is_claim(event: JobEvent) -> bool:
    return event.state is State.ACTIVE and event.event_type != HEARTBEAT


def _parse(
    value: bytes | None, key: bytes | None
) -> tuple[JobEvent | GatewayError, RateLimit | None]:
    event = parse_event_json(value or b"")
    if isinstance(event, GatewayError):
        return event, None
    policy = policy_of(orjson.loads(value or b"{}").get(JOB_FIELD))
    if policy is None or wire.rate_home(policy.key) != key:
        return GatewayError(
            INVALID_EVENT,
            "an event sent to a rate key's home carries the job's rate_limit and is keyed by "
            "the home of its key",
        ), None
    return event, policy


def _parse_report(value: bytes | None) -> tuple[str, bool] | None:
    try:
        report = orjson.loads(value or b"")
    except orjson.JSONDecodeError:
        return None
    if not isinstance(report, dict):
        return None
    permit, unused = report.get("permit"), report.get("unused")
    if not isinstance(permit, str) or not isinstance(unused, bool):
        return None
    return permit, unused


def _forwarded(
    value: bytes, route: str, source: Source, permits: tuple[Permit, ...],
    refused: dict[str, Any] | None = None,
) -> Output:  # fmt: skip
    """The event on to its job's route, as a job event, with the caller's reply headers and
    the permits it holds (a granted claim's, with the one just granted); for a refused one
    whose job's on_limit moves it, why."""
    dropped = (wire.KIND_HEADER, *wire.RATE_GATEWAY_HEADERS)
    headers = [(k, v) for k, v in source.headers.items() if k not in dropped]
    headers.append((wire.KIND_HEADER, wire.JOB_EVENT))
    headers += _permit_headers(permits)
    if refused is not None:
        headers.append((wire.RATE_REFUSED_HEADER, orjson.dumps(refused)))
    return Output(value, route.encode(), role="requests", headers=headers)


# -- at the job's route ------------------------------------------------------------


def permits_of(headers: Mapping[str, bytes]) -> tuple[Permit, ...]:
    """The permits a claim carries (only a home sets these headers); () without one."""
    raw = [headers.get(name) for name in wire.RATE_HEADERS]
    if any(v is None for v in raw):
        return ()
    permit_id, key, at = (v.decode(errors="replace") for v in raw if v is not None)
    if not at.isdigit():
        return ()
    found = [Permit(key, permit_id, int(at))]
    try:
        more = orjson.loads(headers.get(wire.RATE_MORE_HEADER) or b"[]")
        found += [Permit(str(k), str(p), int(t)) for k, p, t in more]
    except (orjson.JSONDecodeError, TypeError, ValueError):
        return ()
    return tuple(found)


def _permit_headers(permits: tuple[Permit, ...]) -> list[tuple[str, bytes]]:
    """The headers carrying `permits`: the first in its own, the others as JSON."""
    if not permits:
        return []
    first = permits[0]
    headers = [
        (wire.RATE_PERMIT_HEADER, first.id.encode()),
        (wire.RATE_KEY_HEADER, first.key.encode()),
        (wire.RATE_PERMIT_AT_HEADER, str(first.at_ms).encode()),
    ]
    if len(permits) > 1:
        more = [[p.key, p.id, p.at_ms] for p in permits[1:]]
        headers.append((wire.RATE_MORE_HEADER, orjson.dumps(more)))
    return headers


def to_home(
    value: bytes | None, policy: Mapping[str, Any], key: str, source: Source,
    permits: tuple[Permit, ...],
) -> Output:  # fmt: skip
    """A claim that came to the job's route without a permit of rate key `key`, sent to its
    home with the key's `policy` (as the job holds it, or its queue's), the permits it holds
    already and the caller's reply headers."""
    event = orjson.loads(value or b"{}")
    event[JOB_FIELD] = policy
    dropped = (wire.KIND_HEADER, *wire.RATE_GATEWAY_HEADERS)
    headers = [(k, v) for k, v in source.headers.items() if k not in dropped]
    headers.append((wire.KIND_HEADER, wire.RATE))
    headers += _permit_headers(permits)
    return Output(orjson.dumps(event), wire.rate_home(key), role="requests", headers=headers)


def limited_of(headers: Mapping[str, bytes]) -> tuple[str, int | None, str, GatewayError] | None:
    """A claim its home refused, whose job's on_limit moves it: (on_limit, retry_at, key, the
    error); None for any other event (only a home sets the header)."""
    raw = headers.get(wire.RATE_REFUSED_HEADER)
    if raw is None:
        return None
    try:
        told = orjson.loads(raw)
        error = GatewayError(str(told["error"]["code"]), str(told["error"]["message"]))
        at = told.get("retry_at")
        return str(told["on_limit"]), at if isinstance(at, int) else None, str(told["key"]), error
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return None
