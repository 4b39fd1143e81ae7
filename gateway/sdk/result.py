"""What an enqueue call returns: the committed decision, or the acknowledged request."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.core import EventOutcome, GatewayError, Outcome


@dataclass(frozen=True, slots=True)
class Sent:
    """A request Kafka has acknowledged; its decision comes later (see `decisions`)."""

    request_id: str
    unique_key: str | None


@dataclass(frozen=True, slots=True)
class EnqueueResult:
    """The processor's committed decision for one request.

    `job` is the accepted job, or for rejected and ignored the existing one;
    `job_id` is that job's id. `record` is the decision record as written.
    """

    outcome: Outcome
    request_id: str
    unique_key: str | None
    job_id: str | None
    job: dict[str, Any] | None
    existing_job_id: str | None
    existing_job_state: str | None
    cancelled_job_id: str | None
    error: GatewayError | None
    record: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> EnqueueResult:
        return cls(
            outcome=Outcome(record["outcome"]),
            request_id=str(record["request_id"]),
            unique_key=record.get("unique_key"),
            job_id=record.get("job_id"),
            job=record.get("job"),
            existing_job_id=record.get("existing_job_id"),
            existing_job_state=record.get("existing_job_state"),
            cancelled_job_id=record.get("cancelled_job_id"),
            error=_error(record),
            record=dict(record),
        )


@dataclass(frozen=True, slots=True)
class EventAck:
    """What the processor did with a job-state event, once committed.

    `outcome` is applied, ignored (`reason`: unknown_job, already_terminal,
    unchanged) or invalid (`error`). After it, the next decision on the key
    sees the event.
    """

    outcome: EventOutcome
    job_id: str | None
    unique_key: str | None
    previous_state: str | None
    state: str | None
    reason: str | None
    error: GatewayError | None
    record: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> EventAck:
        return cls(
            outcome=EventOutcome(record["outcome"]),
            job_id=record.get("job_id"),
            unique_key=record.get("unique_key"),
            previous_state=record.get("previous_state"),
            state=record.get("state"),
            reason=record.get("reason"),
            error=_error(record),
            record=dict(record),
        )


def _error(record: Mapping[str, Any]) -> GatewayError | None:
    """A reply record's {code, message} error, if it has one."""
    error = record.get("error")
    return GatewayError(str(error["code"]), str(error["message"])) if error else None
