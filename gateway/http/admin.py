"""The admin API the official OJS Admin UI reads (`/ojs/v1/admin/...`, `/ojs/v1/unique-jobs`).

Everything here is read from this process's view (the job_states topic
materialised) and every change is asked of the processor, as on the other
routes: the admin API decides nothing. Lists are paged as the UI reads them,
`{"items": [...], "pagination": {"total", "page", "per_page"}}`, from the
view's indexes (jobs by state, then queue, then id), so a page filtered by
state and queue reads that page's keys and no more.

Workers. The gateway has no worker registry: a worker is known by the jobs it
runs. A fetch that names its `worker_id` has it kept on each job it takes while
the job is active, so the workers listed are those running a job now, each with
its queues, how many jobs it runs, when it took the first and when it last
renewed a lease (its heartbeat).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Iterator
from typing import Any

from starlette.requests import Request

from gateway import wire
from gateway.core import INVALID_REQUEST, TERMINAL_STATES, State
from gateway.core.times import format_rfc3339, parse_rfc3339
from gateway.http import dead_letter, errors, jobs, queue_stats, transitions
from gateway.http.answers import Answer
from gateway.http.binding import Binding
from gateway.http.cron import for_admin_ui
from gateway.http.errors import ApiError
from gateway.http.plumbing import int_param, read_json
from gateway.http.queues import paused_queues, settled
from gateway.http.view import JobView

DEFAULT_PER_PAGE = 50
BULK_MAX = 1000  # jobs a bulk call asks about at most
MAX_PER_PAGE = 1000
# The UI's cards: these states, each always present.
STATES = tuple(str(s) for s in State)
_STARTED = time.time()
_SUMMARY_FIELDS = ("id", "type", "queue", "state", "priority", "attempt", "created_at",
                   "completed_at", "scheduled_at")  # fmt: skip
_TIMELINE = ("created_at", "enqueued_at", "started_at", "scheduled_at", "completed_at",
             "cancelled_at", "discarded_at")  # fmt: skip


def _page(request: Request) -> tuple[int, int] | ApiError:
    page = int_param(request.query_params.get("page"), "page", 1, 1, 2**31 - 1)
    if isinstance(page, ApiError):
        return page
    per_page = int_param(
        request.query_params.get("per_page"), "per_page", DEFAULT_PER_PAGE, 1, MAX_PER_PAGE
    )
    if isinstance(per_page, ApiError):
        return per_page
    return page, per_page


def _paged(items: list[Any], total: int, page: int, per_page: int) -> dict[str, Any]:
    return {"items": items, "pagination": {"total": total, "page": page, "per_page": per_page}}


def _listed(
    request: Request, every: list[Any], shape: Callable[[Any], Any], **beside: Any
) -> Answer | ApiError:
    """The request's page of `every`, each item shaped, in the paged shape."""
    page = _page(request)
    if isinstance(page, ApiError):
        return page
    number, per_page = page
    chosen = [shape(item) for item in every[(number - 1) * per_page : number * per_page]]
    return Answer(200, {**_paged(chosen, len(every), number, per_page), **beside})


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


async def stats(request: Request, binding: Binding, _: str) -> Answer | ApiError:
    """The dashboard: queues, workers running a job, jobs per state, and the last five
    minutes' completions and failures per minute."""
    await settled(binding)
    known = binding.view.queues()
    counts = {s: sum(q["counts"].get(s, 0) for q in known.values()) for s in STATES}
    throughput = _per_minute(binding, known, _now_ms())
    return Answer(200, {
        "queues": len(known), "workers": len(_workers(binding)), "jobs": counts,
        "throughput": throughput, "uptime_seconds": round(time.time() - _STARTED),
    })  # fmt: skip


async def stats_history(request: Request, binding: Binding, _: str) -> Answer | ApiError:
    """The dashboard's chart: jobs completed (`processed`), attempts failed and jobs
    enqueued, over every queue, for each `period` (1m, 5m, the default, 15m or 1h) of the
    minutes the view keeps (queue_stats.KEEP_MINUTES), oldest first."""
    period = request.query_params.get("period", "5m")
    width = queue_stats.PERIODS.get(period)
    if width is None:
        return ApiError(
            400, INVALID_REQUEST, f"period must be one of {', '.join(queue_stats.PERIODS)}"
        )
    await settled(binding)
    buckets = [b for name in binding.view.queues() for b in binding.view.queue_activity(name)]
    return Answer(200, {"period": period, "data": queue_stats.history(buckets, _now_ms(), width)})


async def queues(request: Request, binding: Binding, _: str) -> Answer | ApiError:
    await settled(binding)
    known, now = binding.view.queues(), _now_ms()
    return _listed(request, sorted(known), lambda name: _queue(binding, name, known[name], now))


async def queue(request: Request, binding: Binding, _: str) -> Answer | ApiError:
    name = request.path_params["name"]
    known = binding.view.queues().get(name)
    if known is None:
        return ApiError(404, errors.NOT_FOUND, f"queue {name} has had no job")
    return Answer(200, _queue(binding, name, known, _now_ms()))


def _queue(binding: Binding, name: str, known: dict[str, Any], now_ms: int) -> dict[str, Any]:
    paused = name in paused_queues(binding)
    return {
        "name": name, "state": "paused" if paused else "active", "paused": paused,
        "counts": {s: known["counts"].get(s, 0) for s in STATES},
        "throughput": _per_minute(binding, {name: known}, now_ms),
        "created_at": known["created_at"],
    }  # fmt: skip


def _per_minute(binding: Binding, known: dict[str, Any], now_ms: int) -> dict[str, float]:
    """Completions and failed attempts per minute over the last five minutes."""
    buckets = [b for name in known for b in binding.view.queue_activity(name)]
    return queue_stats.per_minute(buckets, now_ms)


async def crons(request: Request, binding: Binding, _: str) -> Answer | ApiError:
    """The crons as the UI's Cron Jobs page reads them, a page at a time (cron.py)."""
    known = binding.view.controls(wire.CRON_KEY_PREFIX)
    return _listed(request, sorted(known), lambda name: for_admin_ui(known[name]))


async def cron_detail(request: Request, binding: Binding, _: str) -> Answer | ApiError:
    name = request.path_params["name"]
    cron = binding.view.controls(wire.CRON_KEY_PREFIX).get(name)
    if cron is None:
        return ApiError(404, errors.NOT_FOUND, f"no cron {name} is registered")
    return Answer(200, for_admin_ui(cron))


async def list_jobs(request: Request, binding: Binding, _: str) -> Answer | ApiError:
    """Jobs filtered by queue, state and type, a page at a time; `sort=scheduled_at`
    (`order=asc|desc`) orders them by their scheduled time."""
    page = _page(request)
    if isinstance(page, ApiError):
        return page
    number, per_page = page
    query = request.query_params
    state, queue_name, job_type = query.get("state"), query.get("queue"), query.get("type")
    if state is not None and state not in STATES:
        return ApiError(400, INVALID_REQUEST, f"state must be one of {', '.join(STATES)}")
    sort, order = query.get("sort"), query.get("order", "asc")
    if sort not in (None, "scheduled_at") or order not in ("asc", "desc"):
        return ApiError(400, INVALID_REQUEST, "sort may be scheduled_at, order asc or desc")
    await settled(binding, queue_name)
    items, total = jobs_page(binding.view, state, queue_name, job_type, number, per_page,
                             sort, order == "desc")  # fmt: skip
    return Answer(200, _paged(items, total, number, per_page))


def jobs_page(
    view: JobView, state: str | None, queue_name: str | None, job_type: str | None,
    number: int, per_page: int, sort: str | None = None, descending: bool = False,
) -> tuple[list[dict[str, Any]], int]:  # fmt: skip
    """A page of job summaries and how many match. Filtered by state and queue only, it
    reads that page's index keys and the ones before it; a type filter or a sort reads
    every job the other filters match."""
    first = (number - 1) * per_page
    if sort is None and job_type is None:
        total = _count(view, state, queue_name)
        # Skipped by id: only the page's records are read.
        ids = itertools.islice(_ids(view, state, queue_name), first, first + per_page)
        chosen = [job for job in map(view.get, ids) if job is not None]
    else:
        every = list(_matching(view, state, queue_name, job_type))
        if sort is not None:
            every.sort(key=lambda j: str(j.get("scheduled_at") or ""), reverse=descending)
        total, chosen = len(every), every[first : first + per_page]
    return [_summary(j) for j in chosen], total


def _ids(view: JobView, state: str | None, queue_name: str | None) -> Iterator[str]:
    for each in [state] if state else STATES:
        yield from view.in_state(each, queue_name)


def _matching(
    view: JobView, state: str | None, queue_name: str | None, job_type: str | None
) -> Iterator[dict[str, Any]]:
    for job in map(view.get, _ids(view, state, queue_name)):
        if job is not None and (job_type is None or job.get("type") == job_type):
            yield job


def _count(view: JobView, state: str | None, queue_name: str | None) -> int:
    known = view.queues()
    chosen = [known[queue_name]] if queue_name in known else [] if queue_name else known.values()
    return sum(q["counts"].get(s, 0) for q in chosen for s in ([state] if state else STATES))


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


async def bulk(request: Request, binding: Binding, _: str) -> Answer | ApiError:
    """`POST /admin/jobs/bulk/{retry|cancel}` with `{"filter": {queue, state, type},
    "confirm": true}`: each matching job asked of the processor (BULK_MAX at most a call),
    one answer each in `BulkResult`. Without `confirm: true` nothing is done (400)."""
    action = request.path_params["action"]
    if action not in ("retry", "cancel"):
        return ApiError(404, errors.NOT_FOUND, "a bulk action is retry or cancel")
    body = await read_json(request, binding.settings.max_body_bytes)
    if isinstance(body, ApiError):
        return body
    if not isinstance(body, dict) or body.get("confirm") is not True:
        return ApiError(400, INVALID_REQUEST,
                        f'a bulk {action} needs "confirm": true beside its "filter"')  # fmt: skip
    wanted = body.get("filter") or {}
    if not isinstance(wanted, dict):
        return ApiError(400, INVALID_REQUEST, "filter must be an object")
    state = wanted.get("state") or (str(State.DISCARDED) if action == "retry" else None)
    if state is not None and state not in STATES:
        return ApiError(400, INVALID_REQUEST, f"state must be one of {', '.join(STATES)}")
    event = "job.enqueued" if action == "retry" else "job.cancelled"
    found = _matching(binding.view, state, wanted.get("queue"), wanted.get("type"))
    if action == "cancel" and state is None:
        found = (j for j in found if j["state"] not in TERMINAL_STATES)
    chosen = list(itertools.islice(found, BULK_MAX))
    answers = await asyncio.gather(*(transitions.ask(binding, j, event) for j in chosen))
    failures = []
    for job, ack in zip(chosen, answers, strict=True):
        refused = ack if isinstance(ack, ApiError) else transitions.refused(ack, job["id"], action)
        if refused is not None:
            failures.append({"job_id": job["id"], "error": refused.message})
        else:
            transitions.answered(binding, ack.record["job"])  # type: ignore[union-attr]
    return Answer(200, {
        "action": action, "matched": len(chosen), "succeeded": len(chosen) - len(failures),
        "failed": len(failures), "errors": failures,
    })  # fmt: skip


async def list_dead(request: Request, binding: Binding, _: str) -> Answer | ApiError:
    page = _page(request)
    if isinstance(page, ApiError):
        return page
    query = request.query_params
    items, total = jobs_page(
        binding.view, dead_letter.DEAD, query.get("queue"), query.get("type"), *page
    )
    return Answer(200, _paged(items, total, *page))


async def dead_stats(request: Request, binding: Binding, _: str) -> Answer | ApiError:
    by_queue: dict[str, int] = {}
    by_error: dict[str, int] = {}
    stamps = []
    for job in _matching(binding.view, dead_letter.DEAD, None, None):
        by_queue[job["queue"]] = by_queue.get(job["queue"], 0) + 1
        error = job.get("error")
        kind = str(error.get("type")) if isinstance(error, dict) else "unknown"
        by_error[kind] = by_error.get(kind, 0) + 1
        if isinstance(job.get("discarded_at"), str):
            stamps.append(job["discarded_at"])
    ordered = sorted(stamps, key=lambda s: parse_rfc3339(s) or 0)
    return Answer(200, {
        "total": sum(by_queue.values()), "by_queue": by_queue, "by_error_type": by_error,
        "oldest_at": ordered[0] if ordered else None,
        "newest_at": ordered[-1] if ordered else None,
    })  # fmt: skip


async def workers(request: Request, binding: Binding, _: str) -> Answer | ApiError:
    found = sorted(_workers(binding).values(), key=lambda w: str(w["id"]))
    summary = {"total": len(found), "running": len(found), "quiet": 0, "stale": 0}
    return _listed(request, found, lambda worker: worker, summary=summary)


def _workers(binding: Binding) -> dict[str, dict[str, Any]]:
    """The workers running a job now, by the worker_id their fetches named."""
    found: dict[str, dict[str, Any]] = {}
    for job_id in binding.view.in_state(str(State.ACTIVE)):
        job = binding.view.get(job_id)
        worker_id = None if job is None else job.get("worker_id")
        if not isinstance(worker_id, str) or job is None:
            continue
        worker = found.setdefault(worker_id, {
            "id": worker_id, "state": "running", "queues": [], "active_jobs": 0,
            "started_at": job.get("started_at"), "last_heartbeat_at": job.get("started_at"),
        })  # fmt: skip
        worker["active_jobs"] += 1
        if job["queue"] not in worker["queues"]:
            worker["queues"].append(job["queue"])
        worker["started_at"] = _edge(min, worker["started_at"], job.get("started_at"))
        worker["last_heartbeat_at"] = _edge(max, worker["last_heartbeat_at"], _renewed(job))
    return found


def _renewed(job: dict[str, Any]) -> str | None:
    """When the job's lease was last set: its start, or the heartbeat since."""
    expires, lease = _ms(job.get("lease_expires_at")), job.get("visibility_timeout_ms")
    if expires and isinstance(lease, int):
        return format_rfc3339(expires - lease)
    return job.get("started_at")


def _edge(pick: Callable[..., Any], a: str | None, b: str | None) -> str | None:
    """The earlier (`min`) or later (`max`) of two stamps, either of which may be absent."""
    present = [stamp for stamp in (a, b) if isinstance(stamp, str)]
    return pick(present, key=_ms) if present else None


def _ms(stamp: object) -> int:
    return (parse_rfc3339(stamp) if isinstance(stamp, str) else None) or 0


async def unique_jobs(request: Request, binding: Binding, _: str) -> Answer | ApiError:
    """The keys live jobs hold (a job with a unique key that has not finished), by state."""
    held = [
        job
        for state in STATES
        if state not in TERMINAL_STATES
        for job in _matching(binding.view, state, None, None)
        if job.get("unique_key")
    ]
    return _listed(request, held, lambda j: {
        "key": j["unique_key"], "job_id": j["id"], "type": j.get("type"),
        "queue": j.get("queue"), "state": j.get("state"),
    })  # fmt: skip
