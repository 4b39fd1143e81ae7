"""What a claim its rate key refused does to its job, under the job's `on_limit` (OJS rate
limiting §6): `wait` leaves it available; `reschedule` schedules it for when a permit is
expected (the key's home tells when time alone frees one, else RESCHEDULE_MS on); `drop`
discards it with a `rate_limited` error, not retried. Only a job still waiting for its first
claim moves: one a worker took meanwhile, or that left, is as it was.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.core.job_events import FAILED, JobEvent
from gateway.core.lifecycle import job_effective_state
from gateway.core.moves import EventResult, applied
from gateway.core.rate_policy import RESCHEDULE, WAIT
from gateway.core.rates import RATE_LIMITED
from gateway.core.states import State

RESCHEDULE_MS = 1000  # when no time is known at which a permit frees


def on_limit_move(
    job: Mapping[str, Any], on_limit: str, retry_at_ms: int | None, key: str, now_ms: int
) -> EventResult | None:
    """The job moved by its refused claim at `now_ms`; None when it stays as it is."""
    if on_limit == WAIT or job_effective_state(job, now_ms) is not State.AVAILABLE:
        return None
    job_id, unique_key = str(job["id"]), job.get("unique_key")
    stored, attempt = State(job["state"]), int(job.get("attempt") or 0)
    if on_limit == RESCHEDULE:
        at = max(retry_at_ms if retry_at_ms is not None else now_ms + RESCHEDULE_MS, now_ms + 1)
        event = JobEvent(job_id, unique_key, State.SCHEDULED, "job.scheduled", scheduled_at=at)
        return applied(job, stored, State.SCHEDULED, event, now_ms, attempt)
    failure = {
        "type": RATE_LIMITED, "retryable": False,
        "message": f"dropped: its rate key {key} was at its limit when it was claimed",
    }  # fmt: skip
    event = JobEvent(job_id, unique_key, None, FAILED, failure=failure)
    return applied(job, stored, State.DISCARDED, event, now_ms, attempt)
