"""The admin API's jobs: the filtered list, one job's detail, the dead letter list and
bulk retry and cancel.

Which jobs a filter names is the core's rule (core/job_filter.py); here a
filter is read from the query or the body and a page of what it names is read
from the view's index (by state, then queue, then id), so a page filtered by
state and queue reads that page's keys and no more. Changes are asked of the
processor job by job, as on the single-job routes.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from starlette.requests import Request

from gateway.core import INVALID_REQUEST, GatewayError, State
from gateway.core.job_filter import BULK_ACTIONS, FIELDS, JobFilter, bulk_filter, parse_filter
from gateway.http import errors, jobs, transitions
from gateway.http.answers import Answer
from gateway.http.binding import Binding
from gateway.http.errors import ApiError
from gateway.http.plumbing import int_param, read_json, unknown_fields
from gateway.http.queues import settled
from gateway.http.view import JobView

DEFAULT_PER_PAGE = 50
MAX_PER_PAGE = 1000
BULK_MAX = 1000  # jobs a bulk call asks about at most
PAGING = ("page", "per_page")
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


def page_of(request: Request) -> tuple[int, int] | ApiError:
    """`page` (from 1) and `per_page` (1..MAX_PER_PAGE, default 50) from the query."""
    page = int_param(request.query_params.get("page"), "page", 1, 1, 2**31 - 1)
    if isinstance(page, ApiError):
        return page
    per_page = int_param(
        request.query_params.get("per_page"), "per_page", DEFAULT_PER_PAGE, 1, MAX_PER_PAGE
    )
    if isinstance(per_page, ApiError):
        return per_page
    return page, per_page


def paged(items: list[Any], total: int, page: int, per_page: int) -> dict[str, Any]:
    return {"items": items, "pagination": {"total": total, "page": page, "per_page": per_page}}


def query_filter(request: Request, fields: tuple[str, ...]) -> JobFilter | ApiError:
    """The filter the query states in `fields` (an empty value is no filter, as a form
    sends it); the route refuses other parameters before this (endpoint's `query`)."""
    query = request.query_params
    chosen = parse_filter({f: query[f] or None for f in fields if f in query}, fields=fields)
    return _refused(chosen) if isinstance(chosen, GatewayError) else chosen


def _refused(error: GatewayError) -> ApiError:
    return ApiError(400, error.code, error.message)


async def list_jobs(request: Request, binding: Binding, _: str) -> Answer | ApiError:
    """Jobs filtered by queue, state, type and creation time, a page at a time;
    `sort=scheduled_at` (`order=asc|desc`) orders them by their scheduled time."""
    page = page_of(request)
    if isinstance(page, ApiError):
        return page
    chosen = query_filter(request, JOBS_FILTER)
    if isinstance(chosen, ApiError):
        return chosen
    query = request.query_params
    sort, order = query.get("sort") or None, query.get("order") or "asc"
    if sort not in (None, "scheduled_at") or order not in ("asc", "desc"):
        return ApiError(400, INVALID_REQUEST, "sort may be scheduled_at, order asc or desc")
    await settled(binding, chosen.queue)
    items, total = jobs_page(binding.view, chosen, *page, sort, order == "desc")
    return Answer(200, paged(items, total, *page))


def jobs_page(
    view: JobView, chosen: JobFilter, number: int, per_page: int,
    sort: str | None = None, descending: bool = False,
) -> tuple[list[dict[str, Any]], int]:  # fmt: skip
    """A page of job summaries and how many match. Filtered by state and queue only, it
    reads that page's index keys and the ones before it; a type or time filter, or a
    sort, reads every job state and queue match."""
    first = (number - 1) * per_page
    if sort is None and chosen.by_index():
        total = _count(view, chosen)
        # Skipped by id: only the page's records are read.
        ids = itertools.islice(_ids(view, chosen), first, first + per_page)
        found = [job for job in map(view.get, ids) if job is not None]
    else:
        every = list(matching(view, chosen))
        if sort is not None:
            every.sort(key=lambda j: str(j.get("scheduled_at") or ""), reverse=descending)
        total, found = len(every), every[first : first + per_page]
    return [_summary(j) for j in found], total


def _ids(view: JobView, chosen: JobFilter) -> Iterator[str]:
    for state in chosen.states():
        yield from view.in_state(state, chosen.queue)


def matching(view: JobView, chosen: JobFilter) -> Iterator[dict[str, Any]]:
    """The jobs the filter names, in the index's order (state, queue, id)."""
    for job in map(view.get, _ids(view, chosen)):
        if job is not None and chosen.matches(job):
            yield job


def _count(view: JobView, chosen: JobFilter) -> int:
    known = view.queues()
    queue = chosen.queue
    counted = [known[queue]] if queue in known else [] if queue else known.values()
    return sum(q["counts"].get(s, 0) for q in counted for s in chosen.states())


def _shown(job: dict[str, Any]) -> dict[str, Any]:
    """The job as OJS shows it, but in its recorded state: the admin lists, filters and
    counts jobs by the state their record holds (a retryable job whose retry is due is
    retryable here, available to GET and fetch), so a row agrees with its filter."""
    return {**jobs.shown(job), "state": job["state"]}


def _summary(job: dict[str, Any]) -> dict[str, Any]:
    shown = _shown(job)
    return {k: shown[k] for k in _SUMMARY_FIELDS if shown.get(k) is not None}


async def job_detail(request: Request, binding: Binding, _: str) -> Answer | ApiError:
    """One job as the UI's drawer reads it: its fields at the top level, `meta`, `errors`
    (each with a `code`) and the `metadata` timeline."""
    job_id = request.path_params["job_id"]
    job = await binding.job(job_id)
    if job is None:
        return transitions.not_found(job_id)
    shown = _shown(job)
    detail = {
        **shown,
        "meta": shown.get("meta") if isinstance(shown.get("meta"), dict) else {},
        "errors": [{"code": e.get("type"), **e} for e in shown["errors"] if isinstance(e, dict)],
        "retry_policy": shown.get("retry"),
        "metadata": {k: shown[k] for k in _TIMELINE if shown.get(k) is not None},
    }
    return Answer(200, detail)


async def list_dead(request: Request, binding: Binding, _: str) -> Answer | ApiError:
    page = page_of(request)
    if isinstance(page, ApiError):
        return page
    chosen = query_filter(request, DEAD_FILTER)
    if isinstance(chosen, ApiError):
        return chosen
    items, total = jobs_page(binding.view, replace(chosen, state=State.DISCARDED), *page)
    return Answer(200, paged(items, total, *page))


async def bulk(request: Request, binding: Binding, _: str) -> Answer | ApiError:
    """`POST /admin/jobs/bulk/{retry|cancel}` with `{"filter": {...}, "confirm": true}`."""
    action = request.path_params["action"]
    if action not in BULK_ACTIONS:
        return ApiError(404, errors.NOT_FOUND, "a bulk action is retry or cancel")
    return await _bulk(request, binding, action, FIELDS)


async def retry_dead(request: Request, binding: Binding, _: str) -> Answer | ApiError:
    """`POST /admin/dead-letter/retry` (the UI's Bulk Retry All): bulk retry of the dead
    letter jobs the filter names; it takes no `state`, they are the discarded ones."""
    return await _bulk(request, binding, "retry", DEAD_BULK_FILTER)


async def _bulk(
    request: Request, binding: Binding, action: str, fields: tuple[str, ...]
) -> Answer | ApiError:
    """The first BULK_MAX jobs the filter names (core.job_filter.bulk_filter), each asked of
    the processor, one answer each in `BulkResult`; `matched` counts every job named and
    `remaining` those left for another call. Without `confirm: true` nothing is done."""
    body = await read_json(request, binding.settings.max_body_bytes)
    if isinstance(body, ApiError):
        return body
    if not isinstance(body, dict):
        return ApiError(400, INVALID_REQUEST, 'the body must be {"filter": {...}, "confirm": true}')
    unknown = unknown_fields(body, BULK_FIELDS)
    if unknown is not None:
        return unknown
    if body.get("confirm") is not True:
        return ApiError(400, INVALID_REQUEST,
                        f'a bulk {action} needs "confirm": true beside its "filter"')  # fmt: skip
    parsed = parse_filter(body.get("filter", {}), "filter.", fields)
    if isinstance(parsed, GatewayError):
        return _refused(parsed)
    chosen = bulk_filter(action, parsed)
    await settled(binding, chosen.queue)
    ids = _ids(binding.view, chosen)
    found = (j for j in map(binding.view.get, ids) if j is not None and chosen.matches(j))
    asked = list(itertools.islice(found, BULK_MAX))
    # The rest are counted, not asked: by their index keys where state and queue decide.
    remaining = sum(1 for _ in (ids if chosen.by_index() else found))
    event = "job.enqueued" if action == "retry" else "job.cancelled"
    answers = await asyncio.gather(*(transitions.ask(binding, j, event) for j in asked))
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
