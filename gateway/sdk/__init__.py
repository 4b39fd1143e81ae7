"""The gateway's Python SDK: `Client` and `AsyncClient` enqueue jobs and return decisions,
and publish job-state events and return what the processor did with them."""

from gateway.core.actor import Actor
from gateway.sdk.aio import AsyncClient
from gateway.sdk.client import Client
from gateway.sdk.errors import (
    ClientClosed,
    ClientError,
    DeliveryFailed,
    EnqueueTimeout,
    Invalid,
    InvalidEvent,
    InvalidJob,
)
from gateway.sdk.result import EnqueueResult, EventAck, Sent
from gateway.sdk.zizq import zizq_unique_key

__all__ = [
    "Actor",
    "AsyncClient",
    "Client",
    "ClientClosed",
    "ClientError",
    "DeliveryFailed",
    "EnqueueResult",
    "EnqueueTimeout",
    "EventAck",
    "Invalid",
    "InvalidEvent",
    "InvalidJob",
    "Sent",
    "zizq_unique_key",
]
