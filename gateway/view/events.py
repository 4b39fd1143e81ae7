"""OJS lifecycle events, derived from the job states the view reads, and served.

The processor decides every transition and writes each job's new state to
`job_states`; the view reads it with the job's previous version beside it.
Which OJS events (ojs-events.md, section 3) that pair amounts to is the core's
rule (`core.transition_events`); `derive` puts each in the OJS event envelope.
A tombstone (a job deleted or past its retention) emits nothing.
A rate key's published state amounts to rate_limit events (rate_events.py).
The event's `time` is the transition's own stamp in the record (started_at,
completed_at, ...), never this process's clock; its `id` names the job_states
record it came from, so it is the same on every serve process.

Which events a process keeps is event_feed.py's; where a reader stands,
event_cursor.py's; GET /ojs/v1/events (http/events_route.py) serves them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.core import transition_events
from gateway.core.tenants import tenant_of
from gateway.core.times import parse_rfc3339
from gateway.view.apply import Change
from gateway.view.rate_events import derive_rate, dropped_event, is_rate_state

SOURCE = "ojs://gateway/job_states"
# Event type -> the job field holding the transition's time.
_STAMP = {
    "job.enqueued": "enqueued_at",
    "job.scheduled": "created_at",
    "job.started": "started_at",
    "job.completed": "completed_at",
    "job.failed": "error.occurred_at",
    "job.retrying": "error.occurred_at",
    "job.discarded": "discarded_at",
    "job.cancelled": "cancelled_at",
    "job.heartbeat": "lease_expires_at",
    "cron.triggered": "meta.cron_triggered_at",
}


def derive(change: Change) -> list[dict[str, Any]]:
    """The OJS events one job_states record amounts to (none, one or two; a rate key's
    state: rate_events.py)."""
    partition, offset, before, after = change
    if is_rate_state(after) or is_rate_state(before):
        return derive_rate(partition, offset, before, after)
    if after is None:
        return []
    was = None if before is None else before.get("state")
    found = [
        _envelope(kind, f"evt_{partition}-{offset}-{index}", was, after)
        for index, kind in enumerate(transition_events(before, after))
    ]
    dropped = dropped_event(partition, offset, was, after)
    return found if dropped is None else [*found, dropped]


def _envelope(kind: str, event_id: str, was: Any, job: Mapping[str, Any]) -> dict[str, Any]:
    data: dict[str, Any] = {
        "job_id": job.get("id"), "job_type": job.get("type"), "queue": job.get("queue"),
        "from": was, "to": job.get("state"), "attempt": job.get("attempt"),
    }  # fmt: skip
    tenant = tenant_of(job)
    if tenant is not None:
        data["tenant_id"] = tenant
    error = job.get("error")
    if kind == "job.completed":
        data["duration_ms"] = _between(job.get("started_at"), job.get("completed_at"))
        data["result"] = job.get("result")
    elif kind in ("job.failed", "job.retrying"):
        data["error"] = error
        if kind == "job.retrying":
            data["max_attempts"] = job.get("max_attempts")
            data["next_retry_at"] = job.get("next_attempt_at")
    elif kind == "job.discarded":
        data["total_attempts"] = job.get("attempt")
        data["last_error"] = error
    elif kind == "job.scheduled":
        data["scheduled_at"] = job.get("scheduled_at")
    elif kind == "job.heartbeat":
        data["visible_until"] = job.get("lease_expires_at")
    elif kind == "cron.triggered":  # OJS cron 9.1's fields the job carries
        meta = job.get("meta") or {}
        data["cron_name"] = meta.get("cron_name")
        data["scheduled_time"] = meta.get("cron_slot")
        data["actual_time"] = meta.get("cron_triggered_at")
    return {
        "specversion": "1.0",
        "id": event_id,
        "type": kind,
        "source": SOURCE,
        "time": _stamp(kind, job),
        "subject": job.get("id"),
        "datacontenttype": "application/json",
        "data": data,
    }


def _stamp(kind: str, job: Mapping[str, Any]) -> Any:
    field, _, sub = _STAMP[kind].partition(".")
    value = job.get(field)
    if sub:
        value = value.get(sub) if isinstance(value, Mapping) else None
    return value or job.get("completed_at") or job.get("enqueued_at") or job.get("created_at")


def _between(start: Any, end: Any) -> int | None:
    a = parse_rfc3339(start) if isinstance(start, str) else None
    b = parse_rfc3339(end) if isinstance(end, str) else None
    return None if a is None or b is None else max(b - a, 0)
