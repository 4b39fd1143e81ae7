"""The admin API the official OJS Admin UI reads (`/ojs/v1/admin/...`, `/ojs/v1/unique-jobs`).

Everything here is read from this process's view (the job_states topic
materialised) and every change is asked of the processor, as on the other
routes: the admin API decides nothing. Lists are paged as the UI reads them,
`{"items": [...], "pagination": {"total", "page", "per_page"}}`. What spans queues
(lists, stats, workers, crons, unique keys) holds only the queues the caller sees, and
only its tenants' jobs (access.scope). The jobs, the dead letter list and bulk actions
are admin_jobs.py's.

Workers. The gateway has no worker registry: a worker is known by the jobs it
runs. A fetch that names its `worker_id` has it kept on each job it takes while
the job is active, so the workers listed are those running a job now, each with
its queues, how many jobs it runs, when it took the first and when it last
renewed a lease (its heartbeat): of the jobs the caller sees.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from starlette.requests import Request

from gateway import wire
from gateway.core import INVALID_REQUEST, State
from gateway.core.concurrency import limit_of
from gateway.core.job_filter import JobFilter
from gateway.core.lifecycle import shown_state
from gateway.core.periods import format_period
from gateway.core.queue_rates import policy_in
from gateway.core.rate_policy import RateLimit
from gateway.core.successor import SUCCESSOR_OF
from gateway.core.times import format_rfc3339, parse_rfc3339
from gateway.http import access, errors
from gateway.http.access import Scope
from gateway.http.answers import Answer
from gateway.http.binding import Binding
from gateway.http.errors import ApiError
from gateway.http.shared import (
    cron_for_admin_ui,
    page_of,
    paused_queues,
    query_filter,
    seen_crons,
    seen_queues,
    sees_cron,
    settled,
)
from gateway.view import queue_stats
from gateway.view.listing import matching, now_ms

# The UI's cards: these states, each always present.
STATES = tuple(str(s) for s in State)
# What the dashboard's chart may be narrowed to (the UI's client sends both).
HISTORY_FILTER = ("queue", "since")
_STARTED = time.time()


def _listed(
    request: Request, every: list[Any], shape: Callable[[Any], Any], **beside: Any
) -> Answer:
    """The request's page of `every`, each item shaped, in the paged shape."""
    page = page_of(request, numbered=True)
    chosen = [shape(item) for item in page.of(every)]
    return Answer(200, {**page.paged(chosen, len(every)), **beside})


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


async def stats(request: Request, binding: Binding, _: str) -> Answer:
    """The dashboard: queues, workers running a job, jobs per state, and the last five
    minutes' completions and failures per minute."""
    await settled(binding)
    scope = access.scope()
    known = seen_queues(binding, scope)
    counts = {s: sum(q["counts"].get(s, 0) for q in known.values()) for s in STATES}
    throughput = _per_minute(binding, known if scope.tenants is None else {}, _now_ms())
    return Answer(200, {
        "queues": len(known), "workers": len(_workers(binding, scope)), "jobs": counts,
        "throughput": throughput, "uptime_seconds": round(time.time() - _STARTED),
    })  # fmt: skip


async def stats_history(request: Request, binding: Binding, _: str) -> Answer:
    """The dashboard's chart: jobs completed (`processed`), attempts failed and jobs
    enqueued, over every queue (or `queue`), for each `period` (1m, 5m, the default, 15m or
    1h) of the minutes the view keeps (queue_stats.KEEP_MINUTES), from the one holding
    `since` if given, oldest first."""
    period = request.query_params.get("period") or "5m"
    width = queue_stats.PERIODS.get(period)
    if width is None:
        raise ApiError(
            400, INVALID_REQUEST, f"period must be one of {', '.join(queue_stats.PERIODS)}"
        )
    chosen = query_filter(request, HISTORY_FILTER)
    await settled(binding, chosen.queue)
    names = binding.view.queues() if chosen.queue is None else [chosen.queue]
    scope = access.scope()
    if scope.tenants is not None:
        names = []  # the activity buckets count every tenant's jobs of a queue
    buckets = [b for name in names if scope.sees(name) for b in binding.view.queue_activity(name)]
    data = queue_stats.history(buckets, _now_ms(), width, chosen.since)
    return Answer(200, {"period": period, "data": data})


async def queues(request: Request, binding: Binding, _: str) -> Answer:
    await settled(binding)
    scope = access.scope()
    known, now, every = seen_queues(binding, scope), _now_ms(), scope.tenants is None
    return _listed(
        request, sorted(known), lambda name: _queue(binding, name, known[name], now, every)
    )


async def queue(request: Request, binding: Binding, _: str) -> Answer:
    name = request.path_params["name"]
    access.permit(name)
    tenants = access.scope().tenants
    known = binding.view.queues(tenants).get(name)
    if known is None:
        raise ApiError(404, errors.NOT_FOUND, f"queue {name} has had no job")
    shown = _queue(binding, name, known, _now_ms(), tenants is None)
    limits = policy_in(binding.view.controls(wire.queue_rate_key(name)).get(""))
    if limits is not None:  # the admin API's queue configuration (§6.2): what is set
        shown["configuration"] = _configuration(limits)
    return Answer(200, shown)


def _configuration(limits: RateLimit) -> dict[str, Any]:
    """A queue's rate limit as the admin API shows a queue's configuration: its concurrency
    and `rate_limit` {limit, period}, each when set."""
    shown: dict[str, Any] = {}
    if limits.concurrency is not None:
        shown["concurrency"] = limits.concurrency
    if limits.limit is not None and limits.period_ms is not None:
        shown["rate_limit"] = {"limit": limits.limit, "period": format_period(limits.period_ms)}
    return shown


def _queue(
    binding: Binding, name: str, known: dict[str, Any], now_ms: int, every: bool
) -> dict[str, Any]:
    """A queue as the UI reads it; its throughput (of every tenant's jobs) only to a
    caller that sees `every` tenant."""
    paused = name in paused_queues(binding)
    return {
        "name": name, "state": "paused" if paused else "active", "paused": paused,
        "counts": {s: known["counts"].get(s, 0) for s in STATES},
        "throughput": _per_minute(binding, {name: known} if every else {}, now_ms),
        "created_at": known["created_at"],
    }  # fmt: skip


def _per_minute(binding: Binding, known: dict[str, Any], now_ms: int) -> dict[str, float]:
    """Completions and failed attempts per minute over the last five minutes."""
    buckets = [b for name in known for b in binding.view.queue_activity(name)]
    return queue_stats.per_minute(buckets, now_ms)


async def crons(request: Request, binding: Binding, _: str) -> Answer:
    """The crons as the UI's Cron Jobs page reads them, a page at a time (cron.py), those
    whose jobs go to a queue the caller sees."""
    known = seen_crons(binding, access.scope())
    return _listed(request, sorted(known), lambda name: cron_for_admin_ui(known[name]))


async def cron_detail(request: Request, binding: Binding, _: str) -> Answer:
    name = request.path_params["name"]
    cron = binding.view.controls(wire.CRON_KEY_PREFIX).get(name)
    if cron is None or not sees_cron(access.scope(), cron):
        raise ApiError(404, errors.NOT_FOUND, f"no cron {name} is registered")
    return Answer(200, cron_for_admin_ui(cron))


async def dead_stats(request: Request, binding: Binding, _: str) -> Answer:
    by_queue: dict[str, int] = {}
    by_error: dict[str, int] = {}
    stamps = []
    dead = JobFilter(state=State.DISCARDED)
    scope = access.scope()
    for job in matching(binding.view, dead, scope.queue_filter, scope.tenants):
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


async def workers(request: Request, binding: Binding, _: str) -> Answer:
    found = sorted(_workers(binding, access.scope()).values(), key=lambda w: str(w["id"]))
    summary = {"total": len(found), "running": len(found), "quiet": 0, "stale": 0}
    return _listed(request, found, lambda worker: worker, summary=summary)


def _workers(binding: Binding, scope: Scope) -> dict[str, dict[str, Any]]:
    """The workers running a job now, by the worker_id their fetches named, told from the
    jobs `scope` sees."""
    found: dict[str, dict[str, Any]] = {}
    for job_id in binding.view.in_state(str(State.ACTIVE), None, scope.queue_filter, scope.tenants):
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


async def unique_jobs(request: Request, binding: Binding, _: str) -> Answer:
    """The keys live jobs of the queues the caller sees hold (a job with a unique key that
    has not finished), by state; a key's pending successor names the job it follows
    (`successor_of`), and a job with a concurrency limit shows it beside its key's
    active jobs."""
    scope = access.scope()
    live = matching(binding.view, JobFilter(live=True), scope.queue_filter, scope.tenants)
    held = [job for job in live if job.get("unique_key")]
    running: dict[str, int] = {}

    now = now_ms()

    def shaped(job: dict[str, Any]) -> dict[str, Any]:
        out = {
            "key": job["unique_key"], "job_id": job["id"], "type": job.get("type"),
            "queue": job.get("queue"), "state": shown_state(job, now),
        }  # fmt: skip
        if job.get("state") == State.PENDING and SUCCESSOR_OF in job:
            out[SUCCESSOR_OF] = job[SUCCESSOR_OF]
        limit, key = limit_of(job), str(job["unique_key"])
        if limit is not None:
            if key not in running:
                running[key] = binding.view.active_under(key)
            out["concurrency"] = {"limit": limit, "active": running[key]}
        return out

    return _listed(request, held, shaped)
