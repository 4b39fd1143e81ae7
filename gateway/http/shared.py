"""What several routes share: a job as OJS shows it, pages of a list, filters from the
query, the queues and crons a caller sees, and the waits that let a count include this
process's own answers."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from starlette.requests import Request

from gateway import wire
from gateway.core import GatewayError, job_effective_state
from gateway.core.envelope import DEFAULT_QUEUE
from gateway.core.job_filter import JobFilter, parse_filter
from gateway.core.retry import with_ojs_retry
from gateway.core.tenants import tenant_of
from gateway.http.access import Scope
from gateway.http.binding import Binding
from gateway.http.errors import ApiError
from gateway.http.plumbing import int_param

T = TypeVar("T")

INTERNAL_FIELDS = ("route", "partition")
# A page of a list is asked by `limit` and `offset` (the OJS lists) or by `page` and
# `per_page` (the admin API's lists).
PAGE_PARAMS = ("limit", "offset")
PAGING = ("page", "per_page")
DEFAULT_PER_PAGE = 50
MAX_PER_PAGE = 1000
_MAX_INT32 = 2**31 - 1
QUEUE_SETTLE_S = 2.0
_SETTLE_POLL_S = 0.02


def shown(job: dict[str, Any], now_ms: int | None = None) -> dict[str, Any]:
    """A job as OJS shows it, with what the client sent given back in the shape it sent:
    a due scheduled or retryable job is available (due at `now_ms`, else now); `retry` is
    the OJS retry object (ISO 8601 intervals, or the `_ms` integers if the client sent
    those under options.retry); `unique` is the policy as sent (top-level or under
    options); `errors` lists every failed attempt's error kept (oldest first), else the
    last one; no internal fields."""
    now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    state = str(job_effective_state(job, now))
    out = {k: v for k, v in job.items() if k not in INTERNAL_FIELDS} | {"state": state}
    raw_options = job.get("options")
    options: dict[str, Any] = raw_options if isinstance(raw_options, dict) else {}
    out = with_ojs_retry(out)
    if out.get("unique") is None and options.get("unique") is not None:
        out["unique"] = options["unique"]
    errors_kept = job.get("errors")
    if isinstance(errors_kept, list):
        out["errors"] = errors_kept
    else:
        out["errors"] = [job["error"]] if job.get("error") else []
    return out


@dataclass(frozen=True, slots=True)
class Page:
    """Which items of a list an answer holds: `count` of them from the `first` (from 0),
    and its `pagination` in the shape it was asked in (`numbered`: page and per_page)."""

    first: int
    count: int
    numbered: bool = False

    @staticmethod
    def by_number(number: int, per_page: int) -> Page:
        return Page((number - 1) * per_page, per_page, numbered=True)

    def of(self, items: Sequence[T]) -> list[T]:
        return list(items[self.first : self.first + self.count])

    def pagination(self, total: int) -> dict[str, Any]:
        if self.numbered:
            return {"total": total, "page": self.first // self.count + 1, "per_page": self.count}
        end = self.first + self.count
        return {"total": total, "limit": self.count, "offset": self.first, "has_more": end < total}

    def paged(self, items: list[Any], total: int) -> dict[str, Any]:
        """The admin API's shape of a list: its items and their pagination."""
        return {"items": items, "pagination": self.pagination(total)}


def page_of(request: Request, numbered: bool = False, default: int = DEFAULT_PER_PAGE) -> Page:
    """The page the query asks for: `limit` (1..MAX_PER_PAGE, default `default`) and
    `offset` (default 0), or, `numbered`, `page` (from 1) and `per_page` (1..MAX_PER_PAGE)."""
    query = request.query_params
    if numbered:
        number = int_param(query.get("page"), "page", 1, 1, _MAX_INT32)
        per_page = int_param(query.get("per_page"), "per_page", default, 1, MAX_PER_PAGE)
        return Page.by_number(number, per_page)
    limit = int_param(query.get("limit"), "limit", default, 1, MAX_PER_PAGE)
    offset = int_param(query.get("offset"), "offset", 0, 0, _MAX_INT32)
    return Page(offset, limit)


def query_filter(request: Request, fields: tuple[str, ...]) -> JobFilter:
    """The filter the query states in `fields` (an empty value is no filter, as a form
    sends it); the route refuses other parameters before this (endpoint's `query`)."""
    query = request.query_params
    chosen = parse_filter({f: query[f] or None for f in fields if f in query}, fields=fields)
    if isinstance(chosen, GatewayError):
        raise ApiError(400, chosen.code, chosen.message)
    return chosen


async def settled(binding: Binding, queue: str | None = None) -> None:
    """Once the view holds every job of `queue` (or of any queue) this process answered
    for, or QUEUE_SETTLE_S has passed: counts then include the caller's own changes."""
    deadline = time.monotonic() + QUEUE_SETTLE_S
    while binding.view.answered_pending(queue) and time.monotonic() < deadline:
        await asyncio.sleep(_SETTLE_POLL_S)


def paused_queues(binding: Binding) -> dict[str, dict[str, Any]]:
    """The queues the processor published as paused, by name, as this view has read them."""
    published = binding.view.controls(wire.QUEUE_KEY_PREFIX)
    return {name: state for name, state in published.items() if state.get("paused")}


def seen_queues(binding: Binding, scope: Scope) -> dict[str, dict[str, Any]]:
    """The queues the view has seen a job of (JobView.queues), of those `scope` sees, and
    their counts of the jobs it sees (of its tenants, if it is bound to some)."""
    known = binding.view.queues(scope.tenants)
    return {name: q for name, q in known.items() if scope.sees(name)}


def seen_crons(binding: Binding, scope: Scope) -> dict[str, dict[str, Any]]:
    """The crons as this view holds them, by name, of those `scope` sees (sees_cron)."""
    crons = binding.view.controls(wire.CRON_KEY_PREFIX)
    return {name: cron for name, cron in crons.items() if sees_cron(scope, cron)}


def sees_cron(scope: Scope, cron: dict[str, Any]) -> bool:
    """Whether `scope` sees a cron: its jobs go to a queue it sees, of a tenant it sees
    (the one its template's meta names, or none)."""
    return scope.sees_named(cron_queue(cron), tenant_of(cron["job_template"]))


def cron_queue(cron: dict[str, Any]) -> str:
    """The queue a cron's jobs go to: its template's, else the default queue (each job
    core.crons.firing_job makes carries the template's options)."""
    return str(cron["job_template"]["options"].get("queue") or DEFAULT_QUEUE)


def cron_for_admin_ui(cron: dict[str, Any]) -> dict[str, Any]:
    """A cron in the official OJS Admin UI's shape (its CronJob): named by `id`, its
    expression as `schedule`, its template's queue."""
    return {**cron, "id": cron["name"], "schedule": cron["expression"], "queue": cron_queue(cron)}
