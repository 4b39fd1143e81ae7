"""The admin API's jobs: the filtered list, one job's detail, the dead letter list and
bulk retry and cancel.

Which jobs a filter names is the core's rule (core/job_filter.py); here a
filter is read from the query or the body and a page of what it names is read
from the view (view/listing.py), of the queues and tenants the caller sees
(access.scope). Changes are asked of the processor job by job, as on the single-job
routes; a bulk change spans every queue, so only a principal that reaches every queue
asks one, and it touches only the jobs of the caller's tenants, if it names some.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from starlette.requests import Request

from gateway.core import INVALID_REQUEST, GatewayError
from gateway.core.actor import Actor
from gateway.core.job_filter import BULK_ACTIONS, FIELDS, bulk_filter, parse_filter
from gateway.http import access, errors, transitions
from gateway.http.answers import Answer
from gateway.http.binding import Binding
from gateway.http.caller import caller
from gateway.http.errors import ApiError
from gateway.http.plumbing import read_json, unknown_fields
from gateway.http.security import privileged
from gateway.http.shared import PAGING, page_of, query_filter, settled, shown
from gateway.view.listing import dead_letters, ids_of, jobs_page, now_ms

BULK_MAX = 1000  # jobs a bulk call asks about at most
# The query parameters each list takes: its filter's fields, paging, and the job list's sort.
JOBS_FILTER = FIELDS
DEAD_FILTER = ("queue", "type")
JOBS_QUERY = (*JOBS_FILTER, *PAGING, "sort", "order")
DEAD_QUERY = (*DEAD_FILTER, *PAGING)
DEAD_BULK_FILTER = ("queue", "type", "since", "until")
BULK_FIELDS = ("filter", "confirm")
_SUMMARY_FIELDS = ("id", "type", "queue", "state", "priority", "attempt", "created_at",
                   "completed_at", "scheduled_at")  # fmt: skip
_TIMELINE = ("created_at", "enqueued_at", "started_at", "scheduled_at", "completed_at",
             "cancelled_at", "discarded_at")  # fmt: skip


async def list_jobs(request: Request, binding: Binding, _: str) -> Answer:
    """Jobs filtered by queue, state, type and creation time, a page at a time;
    `sort=scheduled_at` (`order=asc|desc`) orders them by their scheduled time."""
    page = page_of(request, numbered=True)
    chosen = query_filter(request, JOBS_FILTER)
    query = request.query_params
    sort, order = query.get("sort") or None, query.get("order") or "asc"
    if sort not in (None, "scheduled_at") or order not in ("asc", "desc"):
        raise ApiError(400, INVALID_REQUEST, "sort may be scheduled_at, order asc or desc")
    await settled(binding, chosen.queue)
    scope = access.scope()
    found, total = jobs_page(
        binding.view, chosen, page.first, page.count, sort, order == "desc",
        scope.queue_filter, scope.tenants,
    )  # fmt: skip
    return Answer(200, page.paged([_summary(j) for j in found], total))


def _summary(job: dict[str, Any]) -> dict[str, Any]:
    told = shown(job)
    return {k: told[k] for k in _SUMMARY_FIELDS if told.get(k) is not None}


async def job_detail(request: Request, binding: Binding, _: str) -> Answer:
    """One job as the UI's drawer reads it: its fields at the top level, `meta`, `errors`
    (each with a `code`) and the `metadata` timeline."""
    job = await transitions.known_job(binding, request.path_params["job_id"])
    told = shown(job)
    detail = {
        **told,
        "meta": told.get("meta") if isinstance(told.get("meta"), dict) else {},
        "errors": [{"code": e.get("type"), **e} for e in told["errors"] if isinstance(e, dict)],
        "retry_policy": told.get("retry"),
        "metadata": {k: told[k] for k in _TIMELINE if told.get(k) is not None},
    }
    return Answer(200, detail)


async def list_dead(request: Request, binding: Binding, _: str) -> Answer:
    page = page_of(request, numbered=True)
    chosen = query_filter(request, DEAD_FILTER)
    scope = access.scope()
    found, total = dead_letters(
        binding.view, chosen, page.first, page.count, scope.queue_filter, scope.tenants
    )
    return Answer(200, page.paged([_summary(j) for j in found], total))


@privileged
async def bulk(request: Request, binding: Binding, request_id: str) -> Answer:
    """`POST /admin/jobs/bulk/{retry|cancel}` with `{"filter": {...}, "confirm": true}`."""
    action = request.path_params["action"]
    if action not in BULK_ACTIONS:
        raise ApiError(404, errors.NOT_FOUND, "a bulk action is retry or cancel")
    return await _bulk(request, binding, caller(request, request_id), action, FIELDS)


@privileged
async def retry_dead(request: Request, binding: Binding, request_id: str) -> Answer:
    """`POST /admin/dead-letter/retry` (the UI's Bulk Retry All): bulk retry of the dead
    letter jobs the filter names; it takes no `state`, they are the discarded ones."""
    return await _bulk(request, binding, caller(request, request_id), "retry", DEAD_BULK_FILTER)


async def _bulk(
    request: Request, binding: Binding, actor: Actor, action: str, fields: tuple[str, ...]
) -> Answer:
    """The first BULK_MAX jobs the filter names (core.job_filter.bulk_filter), each asked of
    the processor for `actor`, one answer each in `BulkResult`; `matched` counts every job
    named and `remaining` those left for another call. Without `confirm: true` nothing is
    done."""
    body = await read_json(request, binding.settings.max_body_bytes)
    if not isinstance(body, dict):
        raise ApiError(400, INVALID_REQUEST, 'the body must be {"filter": {...}, "confirm": true}')
    unknown_fields(body, BULK_FIELDS)
    if body.get("confirm") is not True:
        raise ApiError(400, INVALID_REQUEST,
                       f'a bulk {action} needs "confirm": true beside its "filter"')  # fmt: skip
    parsed = parse_filter(body.get("filter", {}), "filter.", fields)
    if isinstance(parsed, GatewayError):
        raise ApiError(400, parsed.code, parsed.message)
    chosen = bulk_filter(action, parsed)
    await settled(binding, chosen.queue)
    ids = ids_of(binding.view, chosen, tenants=access.scope().tenants)
    now = now_ms()
    found = (j for j in map(binding.view.get, ids) if j is not None and chosen.matches(j, now))
    asked = list(itertools.islice(found, BULK_MAX))
    # The rest are counted, not asked: by their index keys where state and queue decide.
    remaining = sum(1 for _ in (ids if chosen.by_index() else found))
    event = "job.enqueued" if action == "retry" else "job.cancelled"
    answers = await asyncio.gather(*(transitions.try_ask(binding, actor, j, event) for j in asked))
    failures = []
    for job, ack in zip(asked, answers, strict=True):
        refused = ack if isinstance(ack, ApiError) else transitions.refused(ack, job["id"], action)
        if refused is not None:
            failures.append({"job_id": job["id"], "error": refused.message})
        else:
            transitions.answered(binding, ack.record["job"])  # type: ignore[union-attr]
    return Answer(200, {
        "action": action, "matched": len(asked) + remaining,
        "succeeded": len(asked) - len(failures), "failed": len(failures), "errors": failures,
        "remaining": remaining,
    })  # fmt: skip
