"""HTTP errors: a status, an OJS error code, a message a caller can act on.

A route raises an ApiError where it finds the problem; the endpoint every route
is served through (plumbing.endpoint) answers it in the OJS error envelope.
Where one answer holds several errors (a batch's items, a heartbeat's jobs) an
ApiError is also a value. The codes the core answers (invalid_request,
duplicate, ...) are the core's (core/errors.py); the ones only the HTTP
binding answers are here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

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
            }
        }
