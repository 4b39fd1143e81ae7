"""The dead letter routes: lists read from the view, changes asked of the processor.

A dead letter job is a `discarded` one (its retries exhausted, or a failure
that was not retryable). The lists (the OJS one here, the admin API's in
admin_jobs.py) read the view's one dead letter listing (view/listing.py); retry
asks the processor for `job.enqueued` (discarded → available, attempt reset, a
rule of the core) and delete for `job.deleted` (the job removed for good: a
tombstone on job_states). A job the view does not hold as discarded is no dead
letter job here (404); whether it may move is the processor's answer.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from gateway.core import EventOutcome
from gateway.http import access, errors, transitions
from gateway.http.answers import Answer
from gateway.http.binding import Binding
from gateway.http.caller import caller
from gateway.http.security import privileged
from gateway.http.shared import page_of, query_filter, shown
from gateway.view.listing import DEAD, dead_letters

LIST_QUERY = ("queue", "limit", "offset")


async def list_dead(request: Request, binding: Binding, _: str) -> Answer:
    page = page_of(request)
    chosen = query_filter(request, ("queue",))
    scope = access.scope()
    jobs, total = dead_letters(
        binding.view, chosen, page.first, page.count, scope.queue_filter, scope.tenants
    )
    return Answer(200, {"jobs": [shown(job) for job in jobs], "pagination": page.pagination(total)})


@privileged
async def retry(request: Request, binding: Binding, request_id: str) -> Answer:
    """Ask the processor to enqueue a dead letter job again (attempt reset)."""
    job = _dead(binding, request.path_params["job_id"])
    ack = await transitions.ask(binding, caller(request, request_id), job, "job.enqueued")
    moved = transitions.moved(binding, ack, job["id"], "retry the dead letter job")
    return Answer(200, {"job": shown(moved)})


@privileged
async def delete(request: Request, binding: Binding, request_id: str) -> Answer:
    """Ask the processor to remove a dead letter job for good; GET answers 404 from then on."""
    job = _dead(binding, request.path_params["job_id"])
    ack = await transitions.ask(binding, caller(request, request_id), job, "job.deleted")
    if ack.outcome is not EventOutcome.APPLIED:
        refused = transitions.refused(ack, job["id"], "delete the dead letter job")
        assert refused is not None
        raise refused
    binding.view.provisional(job["id"], None)
    return Answer(200, {"deleted": True, "job_id": job["id"]})


def _dead(binding: Binding, job_id: str) -> dict[str, Any]:
    """The dead letter job; 404 for any other, and for one of a queue the caller does not
    see or of another tenant (access.scope), as for no job at all."""
    job = binding.view.get(job_id)
    if job is not None and not access.scope().sees_job(job):
        job = None
    if job is None or job.get("state") != DEAD:
        more = {} if job is None else {"current_state": job.get("state")}
        raise errors.not_found(
            "dead_letter_job", job_id, f"no dead letter job {job_id} (a discarded job) is known",
            **more,
        )  # fmt: skip
    return job
