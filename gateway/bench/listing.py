"""The admin job listing on a large view: a page of 50 jobs filtered by queue and state.

A view (the one `gateway serve` keeps) is filled with N jobs, spread over ten
queues and five states, through its own `apply`, as job_states records would
fill it; then `view.listing.jobs_page` (what `GET /ojs/v1/admin/jobs?queue=&state=`
reads) is timed for the first page, a page 100 deep and the last page of one
queue's jobs in one state, each a median over ROUNDS calls with its spread.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import orjson

from gateway.core import State
from gateway.core.job_filter import JobFilter
from gateway.core.times import format_rfc3339
from gateway.view.listing import jobs_page
from gateway.view.store import JobView

QUEUES = 10
STATES = ("available", "scheduled", "active", "retryable", "completed")
PER_PAGE = 50
ROUNDS = 7
LISTED = JobFilter(queue="q0", state=State.AVAILABLE)
_BATCH = 5_000
_T0 = 1_770_000_000_000


@dataclass
class Listing:
    jobs: int
    matching: int  # the jobs of the queue and state listed
    fill_seconds: float
    pages_ms: dict[int, tuple[float, float, float]]  # page -> median, min, max ms


def measure(jobs: int, workdir: Path) -> Listing:
    with tempfile.TemporaryDirectory(dir=workdir) as scratch:
        view = JobView(Path(scratch) / "view")
        started = time.monotonic()
        batch = []
        for n in range(jobs):
            batch.append(_record(n))
            if len(batch) == _BATCH:
                view.apply(batch, _T0)
                batch = []
        if batch:
            view.apply(batch, _T0)
        filled = time.monotonic() - started
        _, matching = jobs_page(view, LISTED, 0, PER_PAGE)
        last = max(1, -(-matching // PER_PAGE))
        pages = {}
        for number in sorted({1, min(100, last), last}):
            times = []
            for _ in range(ROUNDS):
                at = time.perf_counter()
                jobs_page(view, LISTED, (number - 1) * PER_PAGE, PER_PAGE)
                times.append((time.perf_counter() - at) * 1000)
            pages[number] = (statistics.median(times), min(times), max(times))
        view.close()
    return Listing(jobs, matching, filled, pages)


def _record(n: int) -> tuple[int, int, bytes, bytes | None]:
    """Job n: queue q<n mod 10>, state by n mod 5 (queue q0 holds available ones only)."""
    job_id = f"019b0a4c-{n >> 16 & 0xFFFF:04x}-7{n >> 4 & 0xFFF:03x}-8000-{n:012x}"
    at = format_rfc3339(_T0 + n)
    job = {
        "id": job_id, "type": "bench.list", "queue": f"q{n % QUEUES}",
        "state": STATES[n % len(STATES)], "created_at": at, "enqueued_at": at,
    }  # fmt: skip
    return n % 8, n // 8, job_id.encode(), orjson.dumps(job)
