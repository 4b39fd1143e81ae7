"""Lists of jobs read from the view: the jobs a filter names, a page at a time.

Which jobs a filter names is the core's rule (core/job_filter.py), each job in its
state now (a scheduled or retryable job that is due is available, as the view lists
it: view/apply.py); here a page of them is read from the view's index (by state, then
queue, then id), so a page filtered by state and queue reads that page's keys and no
more. The dead letter
jobs (the discarded ones) are one listing for every route that lists them.

Each listing takes `sees`, the queues the caller may see, and `tenants`, the tenants
whose jobs it may see (http/access.py's Scope; None: every queue, every job): a job of
another queue or tenant is left out before the page is cut, and out of the total, so
pages neither end early nor skip a job.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Collection, Iterator
from typing import Any

from gateway.core import State
from gateway.core.job_filter import JobFilter
from gateway.view.store import JobView

DEAD = State.DISCARDED  # a dead letter job is a discarded one
Sees = Callable[[str], bool] | None  # the queues a caller may see; None: every queue
Tenants = Collection[str] | None  # the tenants whose jobs it may see; None: every job


def jobs_page(
    view: JobView, chosen: JobFilter, first: int, count: int,
    sort: str | None = None, descending: bool = False, sees: Sees = None,
    tenants: Tenants = None,
) -> tuple[list[dict[str, Any]], int]:  # fmt: skip
    """`count` jobs from the `first` of those the filter names, and how many it names.
    Filtered by state and queue only, it reads that page's index keys and the ones before
    it, and counts by the view's counters; a type or time filter, or a sort (by
    `scheduled_at`), reads every job state and queue match."""
    if sort is None and chosen.by_index():
        total = _count(view, chosen, sees, tenants)
        # Skipped by id: only the page's records are read.
        ids = itertools.islice(ids_of(view, chosen, sees, tenants), first, first + count)
        return [job for job in map(view.get, ids) if job is not None], total
    every = list(matching(view, chosen, sees, tenants))
    if sort is not None:
        every.sort(key=lambda j: str(j.get("scheduled_at") or ""), reverse=descending)
    return every[first : first + count], len(every)


def dead_letters(
    view: JobView, chosen: JobFilter, first: int, count: int, sees: Sees = None,
    tenants: Tenants = None,
) -> tuple[list[dict[str, Any]], int]:  # fmt: skip
    """`count` dead letter jobs from the `first` of those the filter (queue, type) names,
    by queue then id, and how many it names. Counted by their index keys, with the ones
    this process's answers just moved (JobView.in_state), so a list right after a retry
    or a delete agrees with it."""
    ids = view.in_state(DEAD, chosen.queue, sees, tenants)
    if chosen.type is None:
        listed = list(ids)
        page = listed[first : first + count]
        return [job for job in map(view.get, page) if job is not None], len(listed)
    now = now_ms()
    named = [job for job in map(view.get, ids) if job is not None and chosen.matches(job, now)]
    return named[first : first + count], len(named)


def ids_of(
    view: JobView, chosen: JobFilter, sees: Sees = None, tenants: Tenants = None
) -> Iterator[str]:
    """The ids of the jobs in the filter's states and queue, in the index's order."""
    for state in chosen.states():
        yield from view.in_state(state, chosen.queue, sees, tenants)


def matching(
    view: JobView, chosen: JobFilter, sees: Sees = None, tenants: Tenants = None
) -> Iterator[dict[str, Any]]:
    """The jobs the filter names, in the index's order (state, (tenant,) queue, id)."""
    now = now_ms()
    for job in map(view.get, ids_of(view, chosen, sees, tenants)):
        if job is not None and chosen.matches(job, now):
            yield job


def now_ms() -> int:
    """The time a listing's jobs are in their states at: the view's clock, the wall's."""
    return time.time_ns() // 1_000_000


def _count(view: JobView, chosen: JobFilter, sees: Sees, tenants: Tenants) -> int:
    known = view.queues(tenants)
    queue = chosen.queue
    named = [queue] if queue in known else [] if queue else list(known)
    counted = [known[name] for name in named if sees is None or sees(name)]
    return sum(q["counts"].get(s, 0) for q in counted for s in chosen.states())
