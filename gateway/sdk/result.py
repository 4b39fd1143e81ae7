"""What an enqueue call returns: the committed decision, or the acknowledged request."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.core import INVALID_REQUEST, OJS, EventOutcome, GatewayError, Outcome
from gateway.core.retry import with_ojs_retry
from gateway.core.successor import SUCCESSOR_OF


@dataclass(frozen=True, slots=True)
class Sent:
    """A request Kafka has acknowledged; its decision comes later (see `decisions`)."""

    request_id: str
    unique_key: str | None


@dataclass(frozen=True, slots=True)
class EnqueueResult:
    """The processor's committed decision for one request.

    `job` is the accepted job, the updated one, or for rejected and ignored
    the existing one, as the HTTP binding shows it (`retry` as the OJS retry
    object, `core.retry.ojs_retry`); `job_id` is that job's id. `record` is the
    decision record as written (its `job` as stored). `answer` is what the
    request's dialect answers.
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
    dialect: str = OJS

    @property
    def conflicted(self) -> bool:
        """An existing job matched: Oban's `conflicted`, Zizq's `duplicate`, BullMQ's
        `deduplicated` (a request kept as a running job's successor met it too)."""
        return self.outcome in _CONFLICTS or (
            self.job is not None and SUCCESSOR_OF in self.job and self.existing_job_id is not None
        )

    @property
    def answer(self) -> dict[str, Any]:
        """The answer in the request's dialect (the body of the HTTP answer)."""
        return answer_body(self)

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> EnqueueResult:
        return cls(
            dialect=str(record.get("dialect") or OJS),
            outcome=Outcome(record["outcome"]),
            request_id=str(record["request_id"]),
            unique_key=record.get("unique_key"),
            job_id=record.get("job_id"),
            job=_shown(record.get("job")),
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


_CONFLICTS = frozenset({Outcome.IGNORED, Outcome.UPDATED, Outcome.REJECTED, Outcome.REPLACED})


def answer_body(result: EnqueueResult) -> dict[str, Any]:
    """What each dialect tells its caller: the job and a flag, or the error.

    Oban: the new job with conflicted false, or the existing (or updated) one
    with conflicted true. Zizq: the same with `duplicate`, BullMQ with
    `deduplicated`, River with `unique_skipped_as_duplicate`. sidekiq: the jid
    of the pushed job, or null and the existing job when it was not pushed.
    Faktory and OJS: the job, or for a refused request the error (sidekiq's
    `raise` too); OJS's ignore and debounce add deduplicated.
    """
    if result.outcome is Outcome.INVALID or (
        result.outcome is Outcome.REJECTED and result.error is not None
    ):
        error = result.error or GatewayError(INVALID_REQUEST, "the request was refused")
        details = {
            "existing_job_id": result.existing_job_id,
            "existing_job_state": result.existing_job_state,
            "unique_key": result.unique_key,
        }
        out: dict[str, Any] = {"code": error.code, "message": error.message}
        if result.outcome is Outcome.REJECTED:
            out["details"] = details
        return {"error": out}
    body: dict[str, Any] = {"job": result.job}
    if result.dialect in ("oban", "oban-py"):
        body["conflicted"] = result.conflicted
    elif result.dialect == "zizq":
        body["duplicate"] = result.conflicted
    elif result.dialect == "bullmq":
        body["deduplicated"] = result.conflicted
    elif result.dialect == "river":
        body["unique_skipped_as_duplicate"] = result.conflicted
    elif result.dialect == "sidekiq":
        # Sidekiq's push answers the new job's jid, or nil when the job was not pushed.
        body = {"jid": None if result.outcome is Outcome.IGNORED else result.job_id, **body}
    elif result.outcome is Outcome.IGNORED:
        body["deduplicated"] = True
    elif result.outcome is Outcome.UPDATED and result.record.get("debounce") is not None:
        body["deduplicated"] = True  # the waiting job, moved (OJS's debounce extension)
    return body


def _shown(job: Any) -> dict[str, Any] | None:
    """A job of a decision record as callers see it: one shape on every surface."""
    return with_ojs_retry(job) if isinstance(job, Mapping) else None


def _error(record: Mapping[str, Any]) -> GatewayError | None:
    """A reply record's {code, message} error, if it has one."""
    error = record.get("error")
    return GatewayError(str(error["code"]), str(error["message"])) if error else None
