"""A job turned into the record the SDK produces: validated, fingerprinted, identified.

Pure. The bytes that are validated are the bytes that are sent, so the key
computed here is the key the processor computes; a job naming a tenant is marked as
scoped by it (wire.TENANT_SCOPED_HEADER), so both compute its tenant's key, and as counted
by it (wire.TENANT_COUNTED_HEADER): it passes its tenant's home, first when nothing is to
be checked before (core/tenant_limits.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

import orjson

from gateway import wire
from gateway.core import (
    INVALID_EVENT,
    INVALID_REQUEST,
    GatewayError,
    parse_event_json,
    parse_request_json,
    uuid7,
)
from gateway.core.actor import Actor
from gateway.core.meta import meta_problem
from gateway.core.rate_policy import JOB_FIELD as RATE_FIELD
from gateway.core.rate_policy import policy_of
from gateway.core.tenants import meta_field, request_tenant, scoped, tenant_problem
from gateway.randomness import random_bytes, random_hex


@dataclass(frozen=True, slots=True)
class Outgoing:
    value: bytes
    # The record key: the job's id, else its route (its fingerprint): a client id is
    # claimed at its home first, the partition its id routes to (core/ids.py).
    key: bytes | None
    request_id: str
    unique_key: str | None
    role: str = "requests"
    headers: tuple[tuple[str, bytes], ...] = ()
    # None: the key's partition (murmur2); a queue command names each partition.
    partition: int | None = None


def prepare(job: Any, mint_id: bool = True) -> Outgoing | GatewayError:
    """The job's record; without `mint_id`, a job with neither key nor id is sent without
    one (the home of its idempotency key gives it one, the same on every attempt)."""
    try:
        value = orjson.dumps(job)
    except TypeError as exc:  # orjson.JSONEncodeError is a TypeError
        return GatewayError(INVALID_REQUEST, f"the job cannot be encoded as JSON: {exc}")
    request = parse_request_json(value)
    if isinstance(request, GatewayError):
        return request
    meta = request.envelope.raw.get("meta")  # its record's, in every dialect (request_tenant)
    meta = meta if isinstance(meta, dict) else None  # not the gateway's in a job hash's field
    where = meta_field(job) if isinstance(job, dict) else "meta"
    problem = meta_problem(meta, where) or tenant_problem(meta, f"{where}.tenant_id")
    if problem is not None:
        return GatewayError(INVALID_REQUEST, problem)
    headers: tuple[tuple[str, bytes], ...] = ()
    tenant = request_tenant(request)
    if tenant is not None:
        # Its key is its tenant's, here as where it is decided: the mark says so.
        scoped_request = scoped(request)
        if isinstance(scoped_request, GatewayError):
            return scoped_request
        request = scoped_request
        headers = (
            (wire.TENANT_SCOPED_HEADER, wire.TENANT_SCOPED),
            (wire.TENANT_COUNTED_HEADER, wire.TENANT_COUNTED),
        )
    request_id = request.envelope.raw.get("request_id", random_hex())
    if not isinstance(request_id, str) or not request_id:
        return GatewayError(INVALID_REQUEST, "request_id, when given, must be a non-empty string")
    key = request.unique_key
    route = request.envelope.id or wire.route(request)
    if route is None and mint_id:
        # A job without a key is routed by its id, so it is given one here (see wire.route),
        # fresh. Into the job as sent, whatever its dialect (the envelope's raw is OJS-shaped).
        route = new_job_id()
        value = orjson.dumps({**job, "id": route})
    elif route is None or not mint_id:
        record_key = None if route is None else route.encode()
        return Outgoing(value, record_key, request_id, key, headers=headers)
    if tenant is not None and (key is None or request.envelope.id is None):
        # No client id to claim at its home first: straight to its tenant's home.
        return Outgoing(value, wire.tenant_home(tenant), request_id, key, headers=headers)
    return Outgoing(value, route.encode(), request_id, key, headers=headers)


def idempotent(out: Outgoing, key: str, item: str | None) -> Outgoing:
    """`out` under an idempotency key: keyed by the key's home, where it is checked first;
    `item`: which of a batch's items it is ("i/n"), None for a single request."""
    headers = [*out.headers, (wire.IDEMPOTENCY_KEY_HEADER, key.encode())]
    if item is not None:
        headers.append((wire.IDEMPOTENCY_ITEM_HEADER, item.encode()))
    return replace(out, key=wire.idempotency_home(key), headers=tuple(headers))


def acting(out: Outgoing, actor: Actor | None) -> Outgoing:
    """`out` sent for `actor` (None: for nobody named): its actor header is this one and no
    other, so an item cannot carry one of its own past the call's."""
    if actor is None and not out.headers:
        return out  # the common case, on every enqueue
    kept = tuple(h for h in out.headers if h[0] != wire.ACTOR_HEADER)
    if actor is not None:
        kept += ((wire.ACTOR_HEADER, actor.header()),)
    return out if kept == out.headers else replace(out, headers=kept)


def new_job_id() -> str:
    """A lowercase UUIDv7 from the clock and fresh randomness."""
    return uuid7(time.time_ns() // 1_000_000, None, random_bytes(16))


def prepare_event(event: Any) -> Outgoing | GatewayError:
    """A job-state event, validated by the core and keyed by its job's route (wire.route),
    marked as a job event; one carrying its job's `rate_limit` (a claim of a rate-limited
    job, and fetch's requeue after it) is keyed by the rate key's home, marked so
    (core/rates.py)."""
    try:
        value = orjson.dumps(event)
    except TypeError as exc:
        return GatewayError(INVALID_EVENT, f"the event cannot be encoded as JSON: {exc}")
    parsed = parse_event_json(value)
    if isinstance(parsed, GatewayError):
        return parsed
    policy = policy_of(event.get(RATE_FIELD)) if isinstance(event, dict) else None
    if policy is not None:
        return Outgoing(value, wire.rate_home(policy.key), random_hex(), parsed.unique_key,
                        headers=((wire.KIND_HEADER, wire.RATE),))  # fmt: skip
    return Outgoing(value, parsed.route.encode(), random_hex(), parsed.unique_key,
                    headers=((wire.KIND_HEADER, wire.JOB_EVENT),))  # fmt: skip
