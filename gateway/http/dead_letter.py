"""The dead letter routes: lists read from the view, changes asked of the processor.

A dead letter job is a `discarded` one (its retries exhausted, or a failure
that was not retryable). The list reads the view's state index; retry asks
the processor for `job.enqueued` (discarded → available, attempt reset, a
rule of the core) and delete for `job.deleted` (the job removed for good: a
tombstone on job_states). A job the view does not hold as discarded is no
dead letter job here (404); whether it may move is the processor's answer.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from gateway.core import EventOutcome, GatewayError, State
from gateway.core.job_filter import parse_filter
from gateway.http import errors, transitions
from gateway.http.answers import Answer
from gateway.http.binding import Binding
from gateway.http.errors import ApiError
from gateway.http.jobs import shown
from gateway.http.plumbing import int_param

PAGE_PARAMS = ("limit", "offset")
DEFAULT_LIMIT = 50
MAX_LIMIT = 1000
DEAD = State.DISCARDED  # a dead letter job is a discarded one
LIST_QUERY = ("queue", "limit", "offset")


def page_of(request: Request) -> tuple[int, int] | ApiError:
    """`limit` (1..1000, default 50) and `offset` (default 0) from the query."""
    values = []
    for name, default, low, high in (
        ("limit", DEFAULT_LIMIT, 1, MAX_LIMIT),
        ("offset", 0, 0, 2**31 - 1),
    ):
        value = int_param(request.query_params.get(name), name, default, low, high)
        if isinstance(value, ApiError):
            return value
        values.append(value)
    return values[0], values[1]


def pagination(total: int, limit: int, offset: int) -> dict[str, Any]:
    return {"total": total, "limit": limit, "offset": offset, "has_more": offset + limit < total}


async def list_dead(request: Request, binding: Binding, _: str) -> Answer | ApiError:
    page = page_of(request)
    if isinstance(page, ApiError):
        return page
    limit, offset = page
    chosen = parse_filter({"queue": request.query_params.get("queue") or None}, fields=("queue",))
    if isinstance(chosen, GatewayError):
        return ApiError(400, chosen.code, chosen.message)
    ids = list(binding.view.in_state(DEAD, chosen.queue))
    jobs = []
    for job_id in ids[offset : offset + limit]:
        job = binding.view.get(job_id)
        if job is not None:
            jobs.append(shown(job))
    return Answer(200, {"jobs": jobs, "pagination": pagination(len(ids), limit, offset)})


async def retry(request: Request, binding: Binding, _: str) -> Answer | ApiError:
    """Ask the processor to enqueue a dead letter job again (attempt reset)."""
    job = _dead(binding, request.path_params["job_id"])
    if isinstance(job, ApiError):
        return job
    ack = await transitions.ask(binding, job, "job.enqueued")
    if isinstance(ack, ApiError):
        return ack
    refused = transitions.refused(ack, job["id"], "retry the dead letter job")
    if refused is not None:
        return refused
    moved = ack.record["job"]
    transitions.answered(binding, moved)
    return Answer(200, {"job": shown(moved)})


async def delete(request: Request, binding: Binding, _: str) -> Answer | ApiError:
    """Ask the processor to remove a dead letter job for good; GET answers 404 from then on."""
    job = _dead(binding, request.path_params["job_id"])
    if isinstance(job, ApiError):
        return job
    ack = await transitions.ask(binding, job, "job.deleted")
    if isinstance(ack, ApiError):
        return ack
    if ack.outcome is not EventOutcome.APPLIED:
        refused = transitions.refused(ack, job["id"], "delete the dead letter job")
        assert refused is not None
        return refused
    binding.view.provisional(job["id"], None)
    return Answer(200, {"deleted": True, "job_id": job["id"]})


def _dead(binding: Binding, job_id: str) -> dict[str, Any] | ApiError:
    job = binding.view.get(job_id)
    if job is None or job.get("state") != DEAD:
        details: dict[str, Any] = {"resource_type": "dead_letter_job", "resource_id": job_id}
        if job is not None:
            details["current_state"] = job.get("state")
        return ApiError(
            404, errors.NOT_FOUND, f"no dead letter job {job_id} (a discarded job) is known",
            details=details,
        )  # fmt: skip
    return job
