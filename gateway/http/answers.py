"""What the binding answers for a decision or an SDK error: pure mapping, no I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gateway.core import PAYLOAD_TOO_LARGE, Outcome
from gateway.http import errors
from gateway.http.errors import ApiError
from gateway.sdk import ClientError, EnqueueResult, EnqueueTimeout, InvalidJob

JOBS_PATH = "/ojs/v1/jobs"
# Error codes the processor may decide `invalid` with, and their statuses.
_INVALID_STATUS = {PAYLOAD_TOO_LARGE: 413}


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


def for_result(result: EnqueueResult) -> Answer | ApiError:
    """201 for a new job (accepted, replaced), 200 deduplicated for ignored, 409, 400."""
    if result.outcome in (Outcome.ACCEPTED, Outcome.REPLACED) and result.job is not None:
        location = f"{JOBS_PATH}/{result.job_id}"
        return Answer(201, {"job": result.job}, {"Location": location})
    if result.outcome is Outcome.IGNORED:
        return Answer(200, {"job": result.job, "deduplicated": True})
    if result.outcome is Outcome.REJECTED:
        return ApiError(
            409,
            errors.DUPLICATE,
            result.error.message if result.error else "a duplicate of a live job",
            details={
                "existing_job_id": result.existing_job_id,
                "existing_job_state": result.existing_job_state,
                "unique_key": result.unique_key,
            },
        )
    code = result.error.code if result.error else errors.INVALID_REQUEST
    message = result.error.message if result.error else f"the job was decided {result.outcome}"
    return ApiError(_INVALID_STATUS.get(code, 400), code, message)


def for_client_error(exc: ClientError) -> ApiError:
    """Local validation is the caller's fault (400); the rest is ours, and worth a retry."""
    if isinstance(exc, InvalidJob):
        return ApiError(400, exc.code, exc.message)
    if isinstance(exc, EnqueueTimeout):
        return ApiError(
            504, errors.TIMEOUT, f"no decision in time ({exc.message}); it may still come",
            retryable=True,
        )  # fmt: skip
    return ApiError(503, errors.UNAVAILABLE, str(exc), retryable=True)


def batch_item(outcome: Any) -> dict[str, Any]:
    """One batch job: the job (new, or the existing one it duplicates) with its outcome."""
    if isinstance(outcome, EnqueueResult):
        job = dict(outcome.job or {"id": outcome.job_id})
        job.pop("route", None)
        job.pop("partition", None)
        job["deduplicated"] = outcome.outcome in (Outcome.IGNORED, Outcome.REJECTED)
        if outcome.outcome is Outcome.REJECTED:
            job["existing_job_id"] = outcome.existing_job_id
            job["error"] = for_result(outcome).envelope("")["error"]  # type: ignore[union-attr]
        return job
    error = for_client_error(outcome) if isinstance(outcome, ClientError) else ApiError(
        504, errors.TIMEOUT, "no decision in time", retryable=True
    )  # fmt: skip
    return {"error": error.envelope("")["error"]}
