"""HTTP errors: a status, an OJS error code, a message a caller can act on.

A route raises an ApiError where it finds the problem; the endpoint every route
is served through (plumbing.endpoint) answers it in the OJS error envelope.
Where one answer holds several errors (a batch's items, a heartbeat's jobs) an
ApiError is also a value. The codes the core answers (invalid_request,
duplicate, ...) are the core's (core/errors.py); the ones only the HTTP
binding answers are here, and the refusals of who calls (`unauthenticated`,
`permission_denied`), which the processor's status port answers too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gateway.auth.roles import ANY_QUEUE

NOT_FOUND = "not_found"
# OJS errors §4.3: no valid credential (401); a credential without the permission (403).
UNAUTHENTICATED = "unauthenticated"
PERMISSION_DENIED = "permission_denied"
# OJS security §8.1: a job type the binding's allowlist does not name (job_types.py).
JOB_TYPE_NOT_ALLOWED = "job_type_not_allowed"
UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"
METHOD_NOT_ALLOWED = "method_not_allowed"
TIMEOUT = "timeout"
UNAVAILABLE = "unavailable"
INTERNAL_ERROR = "internal_error"
# OJS security §10.4: a client with as many requests in flight as it may have (429).
TOO_MANY_CONNECTIONS = "too_many_connections"
# OJS multi-tenancy §8.2: a tenant over one of its limits (429, the spec's spelling).
TENANT_LIMIT_EXCEEDED = "TENANT_LIMIT_EXCEEDED"


@dataclass(eq=True)
class ApiError(Exception):
    status: int
    code: str
    message: str
    retryable: bool = False
    details: dict[str, Any] = field(default_factory=dict)
    # The request id the envelope names instead of the call's: the original request's,
    # for an answer given again under an idempotency key.
    request_id: str | None = None
    # Response headers it needs (Retry-After), and fields a spec puts beside the code.
    headers: dict[str, str] = field(default_factory=dict)
    fields: dict[str, Any] = field(default_factory=dict)
    # Raised and caught as an exception, compared as a value: hashed as an exception is.
    __hash__ = Exception.__hash__

    def __str__(self) -> str:
        return f"{self.status} {self.code}: {self.message}"

    def envelope(self, request_id: str) -> dict[str, Any]:
        """The OJS error envelope."""
        return {
            "error": {
                "code": self.code,
                "message": self.message,
                "retryable": self.retryable,
                "details": self.details,
                "request_id": self.request_id or request_id,
                **self.fields,
            }
        }


def unauthenticated(message: str) -> ApiError:
    return ApiError(401, UNAUTHENTICATED, message)


def permission_denied(principal: str, operation: str, queue: str | None = None) -> ApiError:
    """403 naming the principal, the operation and the queue (OJS security §15.2); the
    queue ANY_QUEUE for a route that spans every queue."""
    where = (
        " on every queue (the route spans them)" if queue == ANY_QUEUE
        else f" on queue {queue!r}" if queue is not None else ""
    )  # fmt: skip
    details: dict[str, Any] = {"principal": principal, "operation": operation}
    if queue is not None:
        details["queue"] = queue
    return ApiError(
        403, PERMISSION_DENIED,
        f"principal {principal!r} does not have {operation!r} permission{where}",
        details=details,
    )  # fmt: skip


def not_found(resource_type: str, resource_id: str, message: str, **more: Any) -> ApiError:
    """404 naming what was looked for (OJS errors: `resource_type`, `resource_id`)."""
    details = {"resource_type": resource_type, "resource_id": resource_id, **more}
    return ApiError(404, NOT_FOUND, message, details=details)
