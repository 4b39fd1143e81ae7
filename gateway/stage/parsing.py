"""Reading input records into the core's values, within the deployment's limits.

The router and the dedup stage read requests, and the audit
replays them, the same way: a request over the size limit is refused unread
(`parse_limited`), a refused one still records the dialect it asked for
(`dialect_of`), and a job event must travel under its job's route
(`parse_event_record`). `Limits` holds what a deployment bounds: the request
size it reads and how long it keeps finished jobs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gateway import wire
from gateway.core import (
    DEFAULT_RETENTION_MS,
    INVALID_EVENT,
    PAYLOAD_TOO_LARGE,
    UNKNOWN_DIALECT,
    GatewayError,
    JobEvent,
    Request,
    parse_event_json,
    parse_request_json,
    requested_dialect,
)
from gateway.core.idempotency import DEFAULT_IDEMPOTENCY_MS
from gateway.core.limits import MAX_REQUEST_BYTES
from gateway.core.tenants import scoped


@dataclass(frozen=True)
class Limits:
    # At most the core's MAX_REQUEST_BYTES, which keeps every derived record under
    # the topics' max.message.bytes; a deployment may ask for less.
    max_request_bytes: int = MAX_REQUEST_BYTES
    retention_ms: int = DEFAULT_RETENTION_MS
    # How long an idempotency key's first answer is given again (core/idempotency.py).
    idempotency_ms: int = DEFAULT_IDEMPOTENCY_MS

    def __post_init__(self) -> None:
        if not 1 <= self.max_request_bytes <= MAX_REQUEST_BYTES:
            raise ValueError(
                f"--max-request-bytes must be from 1 to {MAX_REQUEST_BYTES}: a larger request "
                "could make records larger than the topics take"
            )
        if self.idempotency_ms < 1:
            raise ValueError("--idempotency-seconds must be positive")


def parse_limited(
    value: bytes | None, limits: Limits, headers: Mapping[str, bytes] | None = None
) -> Request | GatewayError:
    """Parse a request record, refusing one over the size limit before reading it; one
    whose `headers` mark it as scoped by its tenant holds its tenant's key (core/tenants.py)."""
    size = len(value or b"")
    if size > limits.max_request_bytes:
        return GatewayError(
            PAYLOAD_TOO_LARGE,
            f"the request is {size} bytes; the limit is {limits.max_request_bytes}",
        )
    request = parse_request_json(value or b"")
    if headers and wire.TENANT_SCOPED_HEADER in headers and isinstance(request, Request):
        return scoped(request)
    return request


def dialect_of(request: Request | GatewayError, value: bytes | None) -> str:
    """The dialect to record for a request, also when it was refused."""
    if isinstance(request, Request):
        return request.dialect
    if request.code == PAYLOAD_TOO_LARGE:
        return UNKNOWN_DIALECT  # not worth reading
    return requested_dialect(value or b"")


def parse_event_record(value: bytes | None, key: bytes | None) -> JobEvent | GatewayError:
    """Parse a job-event record; its record key must be the job's route."""
    event = parse_event_json(value or b"")
    if not isinstance(event, GatewayError) and (key or b"").decode(errors="replace") != (
        event.route
    ):
        return GatewayError(
            INVALID_EVENT, "the record key must be the job's route: its unique_key, else its id"
        )
    return event
