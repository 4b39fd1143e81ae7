"""What the handlers share: the settings and the clients made in the app's lifespan."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient
from starlette.requests import Request

from gateway.core import DEFAULT_RETENTION_MS
from gateway.http.answers import Answer
from gateway.http.errors import ApiError
from gateway.http.view import JobView
from gateway.sdk import AsyncClient

DEFAULT_MAX_BODY_BYTES = 1024 * 1024
DEFAULT_MANIFEST = Path(__file__).resolve().parents[2] / "conformance.json"


@dataclass(frozen=True)
class HttpSettings:
    bootstrap: str | None = None
    namespace: str | None = None
    # When set, every /ojs/v1/ route but health needs `Authorization: Bearer <token>`.
    token: str | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    decision_timeout: float = 30.0
    manifest: Path = DEFAULT_MANIFEST
    kafka_settings: dict[str, Any] = field(default_factory=dict)
    # The processor's status URL (`gateway process --metrics-port`): health asks
    # it whether it owns its partitions and has restored its state.
    processor_url: str | None = None
    # Where this process keeps its job view (RocksDB); one directory per serve process.
    view_dir: Path | None = None
    # The processor's retention: how long the view keeps a finished job.
    retention_ms: int = DEFAULT_RETENTION_MS


@dataclass
class Binding:
    settings: HttpSettings
    client: AsyncClient
    view: JobView
    admin: AdminClient
    requests_topic: str
    # Job id -> until when (monotonic) this process's own claim of it is pending.
    claims: dict[str, float] = field(default_factory=dict)


Handler = Callable[[Request, Binding, str], Awaitable[Answer | ApiError]]
