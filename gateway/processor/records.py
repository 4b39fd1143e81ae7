"""The processor's output records, built from core decisions and input metadata.

Shapes only: every rule that chooses an outcome lives in gateway.core. This
module turns a Decision (or an event result) into the Kafka records the
processor writes, by topic role, with their keys and headers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from gateway.core import (
    Decision,
    EventResult,
    GatewayError,
    Outcome,
    audit_fields,
    cancellations,
)
from gateway.core.times import format_rfc3339

Headers = list[tuple[str, bytes]]

# The router forwards job events into `requests` with this header, so that each
# partition's requests and events form one log in the order they are handled.
KIND_HEADER = "kind"
JOB_EVENT = b"job_event"


@dataclass(frozen=True, slots=True)
class Source:
    """Where an input record came from, and what it carried besides its value."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    headers: dict[str, bytes]

    def as_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "offset": self.offset}

    @property
    def seed(self) -> bytes:
        """Identifies the record, so ids derived from it replay identically."""
        return f"{self.topic}/{self.partition}/{self.offset}".encode()

    @property
    def is_job_event(self) -> bool:
        return self.headers.get(KIND_HEADER) == JOB_EVENT

    def header(self, name: str) -> str | None:
        value = self.headers.get(name)
        return None if value is None else value.decode("utf-8", "replace")


@dataclass(frozen=True, slots=True)
class Output:
    """One record to produce: to a catalogue role, or to a reply topic by name."""

    value: bytes | None  # None: a tombstone
    key: bytes | None
    role: str | None = None
    topic: str | None = None
    headers: Headers | None = None


def headers_of(raw: Any) -> dict[str, bytes]:
    """Kafka headers (a list of pairs, a mapping or None) as a dict of bytes; last one wins."""
    if not raw:
        return {}
    pairs = raw.items() if isinstance(raw, dict) else raw
    return {k: (v if isinstance(v, bytes) else str(v).encode()) for k, v in pairs if v is not None}


def request_id(source: Source, value: object) -> str:
    """The request_id header, else the request's own field, else its place in the log."""
    from_header = source.header("request_id")
    if from_header:
        return from_header
    if isinstance(value, dict) and isinstance(value.get("request_id"), str) and value["request_id"]:
        return str(value["request_id"])
    return f"{source.topic}/{source.partition}/{source.offset}"


def decision_outputs(decision: Decision, source: Source, req_id: str, dialect: str) -> list[Output]:
    """Everything one decision writes: cancellations, the job, a rejection, the record."""
    key = decision.unique_key.encode() if decision.unique_key else None
    key_header: Headers = [("unique_key", key)] if key else []
    outputs = [
        Output(_json(c), key, role="cancellations", headers=key_header)
        for c in cancellations(decision)
    ]
    if decision.job is not None:
        route = key or str(decision.job["id"]).encode()  # a job without a key: its id
        outputs.append(Output(_json(decision.job), route, role="jobs", headers=key_header))
    if decision.error is not None:
        envelope = rejection(decision.error, req_id, source, _duplicate_details(decision))
        outputs.append(Output(_json(envelope), key, role="rejections"))
    record = decision_record(decision, source, req_id, dialect)
    value = _json(record)
    outputs.append(Output(value, key, role="decisions", headers=[("request_id", req_id.encode())]))
    reply_to = source.header("reply_to")
    if reply_to:
        correlation = source.headers.get("correlation_id", req_id.encode())
        outputs.append(
            Output(value, key, topic=reply_to, headers=[("correlation_id", correlation)])
        )
    return outputs


def job_state(job: dict[str, Any]) -> Output:
    """The job as it is now, for `job_states` (compacted, keyed by job id)."""
    return Output(_json(job), str(job["id"]).encode(), role="job_states")


def job_state_tombstone(job_id: str) -> Output:
    """The end of a job on `job_states`: its record left the processor's store."""
    return Output(None, job_id.encode(), role="job_states")


def cancellation(job: dict[str, Any], previous: str, unique_key: Any) -> Output:
    """A cancellation record for the job's worker, keyed like every record about the job."""
    record = {
        "job_id": job["id"],
        "unique_key": unique_key,
        "previous_state": previous,
        "reason": "cancelled",
        "replaced_by": None,
        "cancelled_at": job.get("cancelled_at"),
    }
    key = str(job.get("route") or job["id"]).encode()
    return Output(_json(record), key, role="cancellations")


def event_reply(result: EventResult, route: str | None, source: Source) -> Output | None:
    """For an event that asked (reply_to), what became of it, once it is committed.

    A caller that waits for this knows the next decision on the key sees the
    event; `job` is the job as it stands after it (moved or not).
    """
    reply_to = source.header("reply_to")
    if not reply_to:
        return None
    record = {
        "job_id": result.job_id,
        "unique_key": None if result.job is None else result.job.get("unique_key"),
        "route": route,
        "outcome": str(result.outcome),
        "reason": None if result.reason is None else str(result.reason),
        "previous_state": None if result.previous_state is None else str(result.previous_state),
        "state": None if result.state is None else str(result.state),
        "error": None if result.error is None else result.error.to_dict(),
        "job": result.job,
        "source": source.as_dict(),
    }
    correlation = source.headers.get("correlation_id", b"")
    key = route.encode() if route else None
    return Output(_json(record), key, topic=reply_to, headers=[("correlation_id", correlation)])


def decision_record(
    decision: Decision, source: Source, req_id: str, dialect: str
) -> dict[str, Any]:
    """The audit record: one per request, whatever became of it."""
    record = {"request_id": req_id, **audit_fields(decision)}
    record.update(
        decided_at=format_rfc3339(decision.decided_at),
        source=source.as_dict(),
        dialect=dialect,
        job=decision.job if decision.job is not None else decision.existing_job,
    )
    return record


def rejection(
    error: GatewayError, req_id: str, source: Source, details: dict[str, Any] | None = None
) -> dict[str, Any]:
    """An OJS error envelope, with where the refused request came from."""
    return {
        "error": {
            "code": error.code,
            "message": error.message,
            "retryable": False,
            "details": details or {},
            "request_id": req_id,
        },
        "source": source.as_dict(),
    }


def _duplicate_details(decision: Decision) -> dict[str, Any] | None:
    if decision.outcome is not Outcome.REJECTED or decision.existing is None:
        return None
    return {
        "existing_job_id": decision.existing.job_id,
        "existing_job_state": str(decision.existing_state),
        "unique_key": decision.unique_key,
    }


def _json(value: Any) -> bytes:
    return orjson.dumps(value)
