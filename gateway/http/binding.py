"""What the handlers share: the settings and the clients made in the app's lifespan."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import IsolationLevel, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from starlette.requests import Request
from starlette.responses import Response

from gateway.audit.key_history import KeyHistory
from gateway.auth.keyring import Watcher
from gateway.auth.roles import Patterns
from gateway.core import DEFAULT_RETENTION_MS
from gateway.core.jobs import uuid7_ms
from gateway.http import errors
from gateway.http.answers import Answer
from gateway.http.enqueue_rate import EnqueueRate
from gateway.http.errors import ApiError
from gateway.http.serving import Board
from gateway.sdk import AsyncClient
from gateway.stage.audit_keys import AuditKeys
from gateway.view.event_feed import EventFeed
from gateway.view.follower import Follower
from gateway.view.store import JobView

DEFAULT_MAX_BODY_BYTES = 1024 * 1024
DEFAULT_MAX_CLIENT_CONNECTIONS = 100
DEFAULT_MAX_ENQUEUE_RATE = 1000  # jobs a second per principal (OJS security SEC-014)
# How long a request waits for this process's view to be live before answering 503.
VIEW_LIVE_WAIT_S = 10.0
# How long a job the view lacks is waited for, counted from the time its id carries: one
# made moments ago through another serve worker is on its way to this one's view.
RECENT_JOB_WAIT_S = 2.0
_RECENT_POLL_S = 0.02
_ENDS_TIMEOUT_S = 5.0
DEFAULT_MANIFEST = Path(__file__).resolve().parents[2] / "conformance.json"


@dataclass(frozen=True)
class HttpSettings:
    bootstrap: str | None = None
    namespace: str | None = None
    # The credentials file (`serve --credentials`): when set, every route but health and
    # the binding's descriptions needs a principal's key (gateway/http/access.py).
    credentials: Path | None = None
    # The job types enqueues may name (`serve --job-types`; http/job_types.py); None: any.
    job_types: Patterns | None = None
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
    # Every response as application/json, whatever Accept says (`serve --json-responses`).
    json_responses: bool = False
    # One of `serve --workers N`: where this worker says its view is live, and health
    # reads whether every worker's is (serving.py).
    board: Board | None = None
    # The keys a key's history verifies keyed audit records with (`serve --audit-key-file`).
    audit_keys: AuditKeys | None = None
    # Requests one client address may have in flight in this process; 0: no limit
    # (`serve --max-client-connections`, client_limit.py).
    max_client_connections: int = DEFAULT_MAX_CLIENT_CONNECTIONS
    # Jobs a principal may enqueue a second in this process; 0: no limit
    # (`serve --max-enqueue-rate`, enqueue_rate.py).
    max_enqueue_rate: int = DEFAULT_MAX_ENQUEUE_RATE


@dataclass
class Binding:
    settings: HttpSettings
    client: AsyncClient
    view: JobView
    admin: AdminClient
    requests_topic: str
    follower: Follower | None = None
    feed: EventFeed = field(default_factory=EventFeed)
    job_states_topic: str = "job_states"
    # Job id -> until when (monotonic) this process's own claim of it is pending.
    claims: dict[str, float] = field(default_factory=dict)
    # This process's audit index of decisions, for a key's history (http/history.py).
    audit: KeyHistory | None = None
    # The principals allowed in, from settings.credentials; None: everyone may do anything.
    watcher: Watcher | None = None
    # Each principal's enqueue rate in this process (settings.max_enqueue_rate).
    enqueue_rate: EnqueueRate = field(default_factory=lambda: EnqueueRate(0))

    async def job(
        self, job_id: str, sees: Callable[[Mapping[str, Any]], bool] | None = None
    ) -> dict[str, Any] | None:
        """The job as the view holds it; one `sees` is false of (the caller's scope:
        access.Scope.sees_job, its queue and tenant) is missing. A job this process has
        not seen, whose id says it was made within RECENT_JOB_WAIT_S, is waited for until
        then: enqueued through another serve worker (or answered there before its commit),
        its record is on its way here. Every other missing job is None at once: a hidden
        one after the same wait as a missing one."""

        def seen() -> dict[str, Any] | None:
            job = self.view.get(job_id)
            return job if job is None or sees is None or sees(job) else None

        job = seen()
        made_ms = uuid7_ms(job_id) if job is None else None
        if made_ms is None:
            return job
        now = time.time()
        until = min(made_ms / 1000 + RECENT_JOB_WAIT_S, now + RECENT_JOB_WAIT_S)
        while job is None and now < until:
            await asyncio.sleep(_RECENT_POLL_S)
            job, now = seen(), time.time()
        return job

    def job_states_ends(self, partitions: Iterable[int]) -> dict[int, int]:
        """The last stable offset of each of `partitions` of job_states, as the brokers say
        now (blocking); a partition the topic does not have is left out."""
        topic = self.job_states_topic
        listed = self.admin.list_topics(topic, timeout=_ENDS_TIMEOUT_S).topics[topic].partitions
        asked = {TopicPartition(topic, p): OffsetSpec.latest() for p in partitions if p in listed}
        if not asked:
            return {}
        answers = self.admin.list_offsets(
            asked, isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=_ENDS_TIMEOUT_S
        )
        return {tp.partition: future.result().offset for tp, future in answers.items()}

    def view_not_live(self) -> str | None:
        """None once the view follows every partition and has caught up; else why not."""
        if self.follower is None or self.follower.live.is_set():
            return None
        return self.follower.reason or "the job view is not live yet"

    async def view_live(self, timeout: float = VIEW_LIVE_WAIT_S) -> None:
        """Wait (up to `timeout`) for a live view: every route reads it. Else 503."""
        deadline = time.monotonic() + timeout
        while (reason := self.view_not_live()) is not None:
            if time.monotonic() >= deadline:
                raise ApiError(503, errors.UNAVAILABLE, reason, retryable=True)
            await asyncio.sleep(0.05)


# A route: its answer, or a ready-made Response (the event stream); it raises an ApiError.
Handler = Callable[[Request, Binding, str], Awaitable[Answer | Response]]
