"""What can go wrong for a client: each error has a code a program can branch on and a message."""

from __future__ import annotations

from typing import Any

from gateway.core import GatewayError

DELIVERY_FAILED = "delivery_failed"
TIMEOUT = "timeout"
CLOSED = "closed"
KAFKA = "kafka"
UNKNOWN_TOPIC = "unknown_topic"
INVALID_REPLY = "invalid_reply"


class ClientError(Exception):
    """Base of the SDK's errors; `str()` is `code: message`, like the core's errors."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class Invalid(ClientError):
    """Local validation refused the input, so it was not sent; `error` is the core's verdict."""

    def __init__(self, error: GatewayError) -> None:
        super().__init__(error.code, error.message)
        self.error = error


class InvalidJob(Invalid):
    """The job failed local validation and was not sent."""


class InvalidEvent(Invalid):
    """The job-state event failed local validation and was not sent."""


class DeliveryFailed(ClientError):
    """Kafka did not accept the request record, so no decision will come for it."""

    def __init__(self, message: str) -> None:
        super().__init__(DELIVERY_FAILED, message)


class EnqueueTimeout(ClientError):
    """Some answers did not arrive in time.

    `results` holds what did arrive, in input order, with None for each
    missing one; a request that was sent may still be decided later.
    """

    def __init__(self, missing: int, total: int, waiting_for: str, results: list[Any]) -> None:
        super().__init__(TIMEOUT, f"{missing} of {total} {waiting_for} missing")
        self.missing = missing
        self.total = total
        self.results = results


class ClientClosed(ClientError):
    def __init__(self) -> None:
        super().__init__(CLOSED, "the client is closed")
