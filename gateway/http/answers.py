"""What the binding answers for a decision or an SDK error: pure mapping, no I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gateway.core import DUPLICATE, INTERNAL, INVALID_REQUEST, OJS, PAYLOAD_TOO_LARGE, Outcome
from gateway.core.idempotency import IDEMPOTENCY_KEY_REUSED
from gateway.core.tenant_limits import TENANT_LIMIT_EXCEEDED
from gateway.http import errors
from gateway.http.errors import ApiError
from gateway.sdk import ClientError, EnqueueResult, EnqueueTimeout, InvalidJob

JOBS_PATH = "/ojs/v1/jobs"
# Error codes the processor may decide `invalid` with, and their statuses. A record
# the processor failed on (`internal`, kept on dead_letters) is our fault: OJS's 500.
# The same idempotency key with another request is OJS's 422: understood, but refused.
_INVALID_STATUS = {PAYLOAD_TOO_LARGE: 413, INTERNAL: 500, IDEMPOTENCY_KEY_REUSED: 422}
_HTTP_CODE = {INTERNAL: errors.INTERNAL_ERROR}


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


def for_result(result: EnqueueResult) -> Answer | ApiError:
    """201 for a new job (accepted, replaced), 200 for one that already existed (ignored,
    updated), 409 for a rejected duplicate, 400 (413) for an invalid request.

    The body is the dialect's (`EnqueueResult.answer`): `conflicted` for Oban,
    `duplicate` for Zizq, `deduplicated` for BullMQ and OJS's ignore,
    `unique_skipped_as_duplicate` for River, `jid` (null for a job not pushed) for
    sidekiq; Faktory's duplicate is a 409 with its own code, NOTUNIQUE, sidekiq's
    under on_conflict raise one with SidekiqUniqueJobs::Conflict.
    """
    if result.outcome in (Outcome.ACCEPTED, Outcome.REPLACED) and result.job is not None:
        location = f"{JOBS_PATH}/{result.job_id}"
        return Answer(201, result.answer, {"Location": location})
    if result.outcome in (Outcome.IGNORED, Outcome.UPDATED):
        return Answer(200, result.answer)
    if result.outcome is Outcome.REJECTED:
        return ApiError(
            409,
            result.error.code if result.error else DUPLICATE,
            result.error.message if result.error else "a duplicate of a live job",
            details={
                "existing_job_id": result.existing_job_id,
                "existing_job_state": result.existing_job_state,
                "unique_key": result.unique_key,
            },
        )
    code = result.error.code if result.error else INVALID_REQUEST
    message = result.error.message if result.error else f"the job was decided {result.outcome}"
    if code == TENANT_LIMIT_EXCEEDED:
        return _tenant_limit(message, result.record.get("details") or {})
    return ApiError(_INVALID_STATUS.get(code, 400), _HTTP_CODE.get(code, code), message)


def _tenant_limit(message: str, details: dict[str, Any]) -> ApiError:
    """OJS multi-tenancy §8.2: 429 with Retry-After, and the limit beside the code."""
    spec = {k: details.get(k) for k in ("tenant_id", "limit", "current", "maximum")}
    return ApiError(
        429, errors.TENANT_LIMIT_EXCEEDED, message, retryable=True, details=details,
        headers={"Retry-After": str(details.get("retry_after_seconds", 1))}, fields=spec,
    )  # fmt: skip


def for_client_error(exc: ClientError) -> ApiError:
    """Local validation is the caller's fault (400); the rest is ours, and worth a retry."""
    if isinstance(exc, InvalidJob):
        return ApiError(413 if exc.code == PAYLOAD_TOO_LARGE else 400, exc.code, exc.message)
    if isinstance(exc, EnqueueTimeout):
        return ApiError(
            504, errors.TIMEOUT, f"no decision in time ({exc.message}); it may still come",
            retryable=True,
        )  # fmt: skip
    return ApiError(503, errors.UNAVAILABLE, str(exc), retryable=True)


def batch_item(outcome: Any, request_id: str) -> dict[str, Any]:
    """One batch item. OJS: the job (new, or under `ignore` the existing one, with
    `deduplicated`); a refused job (a duplicate under `reject`, invalid, no decision in
    time) is no job: `{"error": {...}, "status", ...}` with no id, type or state, so a
    client reading jobs cannot take it for one. A dialect's item: its status and what a
    single POST would have said."""
    if isinstance(outcome, EnqueueResult) and outcome.dialect != OJS:
        answer = for_result(outcome)
        if isinstance(answer, ApiError):
            return {"status": answer.status, **answer.envelope(request_id)}
        return {"status": answer.status, **answer.body}
    if isinstance(outcome, EnqueueResult) and outcome.outcome is Outcome.REJECTED:
        # Refused: no job was created, so the item is no job (no id, type or state) but
        # the error, and the live job it duplicates by reference.
        refused = for_result(outcome)
        assert isinstance(refused, ApiError)
        return {
            "error": refused.envelope(request_id)["error"], "status": refused.status,
            "deduplicated": True, "existing_job_id": outcome.existing_job_id,
            "existing_job_state": outcome.existing_job_state,
        }  # fmt: skip
    if isinstance(outcome, EnqueueResult) and outcome.job is not None:
        job = dict(outcome.job)
        job.pop("route", None)
        job.pop("partition", None)
        job["deduplicated"] = outcome.answer.get("deduplicated") is True  # ignore, debounce
        return job
    if isinstance(outcome, EnqueueResult):  # invalid, decided by the processor
        answer = for_result(outcome)
        if isinstance(answer, ApiError):
            return {"error": answer.envelope(request_id)["error"], "status": answer.status}
    error = for_client_error(outcome) if isinstance(outcome, ClientError) else ApiError(
        504, errors.TIMEOUT, "no decision in time", retryable=True
    )  # fmt: skip
    return {"error": error.envelope(request_id)["error"], "status": error.status}
