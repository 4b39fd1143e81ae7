"""The jobs the HTTP binding can show: job id -> the job as last seen, with its state.

Built from the committed records of `decisions`, `jobs`, `cancellations` and
`job_events` (read from the beginning), plus the binding's own answers, so a
GET right after a POST finds the job. Which state an event leads to is the
core's rule (`apply_event`), applied here to the one job the event names.
"""

from __future__ import annotations

import copy
import logging
import threading
import uuid
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from confluent_kafka import Consumer, Message

from gateway.catalogue import Catalogue
from gateway.core import (
    TERMINAL_STATES,
    Entry,
    EventOutcome,
    GatewayError,
    State,
    apply_event,
    parse_event,
)
from gateway.core.entries import effective_state
from gateway.core.envelope import DEFAULT_MAX_ATTEMPTS, DEFAULT_QUEUE
from gateway.core.events import EVENT_TYPES, JobEvent
from gateway.core.times import parse_rfc3339

log = logging.getLogger("gateway.http.read_model")

_ROLES = ("decisions", "jobs", "cancellations", "job_events")
_POLL_S = 0.2
# What a worker may fetch. Retryable jobs come back at once: there is no backoff yet.
FETCHABLE = frozenset({State.AVAILABLE, State.RETRYABLE})


@dataclass(frozen=True, slots=True)
class Moved:
    """A transition the binding asked for: the job afterwards, or why it did not move."""

    job: dict[str, Any] | None
    # "not_found", or "invalid_state" when the job was not in an expected state.
    refused: str | None = None
    previous: str | None = None


class ReadModel:
    """Thread-safe: the follower thread and the request handlers both write it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: dict[str, dict[str, Any]] = {}

    def get(self, job_id: str) -> dict[str, Any] | None:
        with self._lock:
            job = self._jobs.get(job_id.lower())
            return copy.deepcopy(job) if job is not None else None

    def add(self, job: Mapping[str, Any]) -> None:
        """Record an accepted job unless already known: later records only move it on."""
        job_id = job.get("id")
        if not isinstance(job_id, str):
            return
        with self._lock:
            self._jobs.setdefault(job_id, dict(job))

    def update(self, job: Mapping[str, Any]) -> None:
        """An update (Oban's replace) changed a known job's fields; its state stays ours."""
        job_id = job.get("id")
        with self._lock:
            known = self._jobs.get(job_id) if isinstance(job_id, str) else None
            if known is not None:
                kept = {k: known[k] for k in ("state", "attempt") if k in known}
                known.clear()
                known.update(job, **kept)

    def cancel(self, job_id: str) -> None:
        with self._lock:
            job = self._jobs.get(job_id)
            if job is not None and job.get("state") not in TERMINAL_STATES:
                job["state"] = str(State.CANCELLED)

    def apply_event(self, raw: object, now_ms: int) -> State | None:
        """Move a job by a job-state event; the new state, or None if nothing moved."""
        event = parse_event(raw)
        if isinstance(event, GatewayError):
            return None  # the processor counts and reports invalid events
        with self._lock:
            job = self._jobs.get(event.job_id)
            if job is None:
                return None
            result = apply_event([_entry(job, now_ms)], event, now_ms)
            if result.outcome is not EventOutcome.APPLIED or result.state is None:
                return None
            job["state"] = str(result.state)
            if event.attempt is not None:
                job["attempt"] = event.attempt
            return result.state

    def move(
        self,
        job_id: str,
        event_type: str,
        now_ms: int,
        expected: Collection[State],
        attempt: int | None = None,
    ) -> Moved:
        """Move a job by a lifecycle event of the binding's own (cancel, ack, nack).

        Only from an `expected` state, checked and moved under the lock, so two
        callers never both move one job. The target state is the core's.
        """
        with self._lock:
            job = self._jobs.get(job_id.lower())
            if job is None:
                return Moved(None, "not_found")
            entry = _entry(job, now_ms)
            if effective_state(entry, now_ms) not in expected:
                return Moved(copy.deepcopy(job), "invalid_state")
            previous = str(job.get("state"))
            self._move(job, entry, event_type, now_ms, attempt)
            return Moved(copy.deepcopy(job), previous=previous)

    def claim(self, queues: Collection[str], count: int, now_ms: int) -> list[dict[str, Any]]:
        """Hand out up to `count` fetchable jobs of `queues`, moved to active, oldest first.

        Under the lock: a job claimed here is active before anyone else looks.
        """
        claimed: list[dict[str, Any]] = []
        with self._lock:
            for job in self._jobs.values():
                if len(claimed) == count:
                    break
                if job.get("queue") not in queues:
                    continue
                entry = _entry(job, now_ms)
                if effective_state(entry, now_ms) in FETCHABLE:
                    # OJS counts attempts as they start: the first run is attempt 1.
                    attempt = int(job.get("attempt") or 0) + 1
                    self._move(job, entry, "job.started", now_ms, attempt)
                    claimed.append(copy.deepcopy(job))
        return claimed

    @staticmethod
    def _move(
        job: dict[str, Any], entry: Entry, event_type: str, now_ms: int, attempt: int | None
    ) -> None:
        if attempt is None and isinstance(job.get("attempt"), int):
            attempt = job["attempt"]  # job.failed needs it to tell retryable from discarded
        event = JobEvent(
            entry.job_id, str(job.get("unique_key") or ""), EVENT_TYPES[event_type], event_type,
            attempt, entry.max_attempts,
        )  # fmt: skip
        result = apply_event([entry], event, now_ms)
        if result.outcome is EventOutcome.APPLIED and result.state is not None:
            job["state"] = str(result.state)
        if attempt is not None:
            job["attempt"] = attempt

    def apply_record(self, role: str, value: object, timestamp_ms: int) -> None:
        """One committed record of a followed topic."""
        if not isinstance(value, dict):
            return
        if role == "decisions" and value.get("outcome") in ("accepted", "replaced"):
            if isinstance(value.get("job"), dict):
                self.add(value["job"])
            if isinstance(value.get("cancelled_job_id"), str):
                self.cancel(value["cancelled_job_id"])
        elif role == "decisions" and value.get("outcome") == "updated":
            if isinstance(value.get("job"), dict):
                self.update(value["job"])
        elif role == "jobs":
            self.add(value)
        elif role == "cancellations" and isinstance(value.get("job_id"), str):
            self.cancel(value["job_id"])
        elif role == "job_events":
            self.apply_event(value, timestamp_ms)


def _entry(job: Mapping[str, Any], now_ms: int) -> Entry:
    """The job as the core's entry, enough for `apply_event` to judge one event."""
    max_attempts = job.get("max_attempts")
    scheduled_at = job.get("scheduled_at")
    return Entry(
        job_id=str(job["id"]),
        state=State(job.get("state", State.AVAILABLE)),
        created_at=now_ms,
        state_changed_at=now_ms,
        type=str(job.get("type", "")),
        queue=str(job.get("queue", DEFAULT_QUEUE)),
        scheduled_at=parse_rfc3339(scheduled_at) if isinstance(scheduled_at, str) else None,
        max_attempts=max_attempts if isinstance(max_attempts, int) else DEFAULT_MAX_ATTEMPTS,
    )


class Follower:
    """A background thread feeding the read model from the topics, read_committed."""

    def __init__(self, model: ReadModel, cat: Catalogue, settings: Mapping[str, Any]) -> None:
        self._model = model
        self._roles = {cat.name(role): role for role in _ROLES}
        self._consumer = Consumer(
            {
                **settings,
                # A group of its own: every binding instance reads everything.
                "group.id": f"gateway-http-{uuid.uuid4().hex}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
            }
        )
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gateway-http-follower", daemon=True)

    def start(self) -> None:
        self._consumer.subscribe(list(self._roles))
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join()
        self._consumer.close()

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                msg = self._consumer.poll(_POLL_S)
                if msg is not None:
                    self._on(msg)
            except Exception:  # the thread must outlive any one bad record
                log.exception("the read model failed on a record; continuing")

    def _on(self, msg: Message) -> None:
        if msg.error() is not None:
            log.warning("reading for the read model failed", extra={"error": msg.error().str()})
            return
        try:
            value = orjson.loads(msg.value() or b"null")
        except orjson.JSONDecodeError:
            return
        _, timestamp_ms = msg.timestamp()
        self._model.apply_record(self._roles[msg.topic()], value, timestamp_ms)
