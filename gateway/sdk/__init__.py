"""The gateway's Python SDK: `Client` and `AsyncClient` enqueue jobs and return decisions."""

from gateway.sdk.aio import AsyncClient
from gateway.sdk.client import Client
from gateway.sdk.errors import (
    ClientClosed,
    ClientError,
    DeliveryFailed,
    EnqueueTimeout,
    InvalidJob,
)
from gateway.sdk.result import EnqueueResult, Sent

__all__ = [
    "AsyncClient",
    "Client",
    "ClientClosed",
    "ClientError",
    "DeliveryFailed",
    "EnqueueResult",
    "EnqueueTimeout",
    "InvalidJob",
    "Sent",
]
