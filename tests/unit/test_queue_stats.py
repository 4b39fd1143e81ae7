"""A queue's last hour: what each job_states record shows a job did, counted by minute."""

from __future__ import annotations

from typing import Any

import orjson

from gateway.core.times import format_rfc3339
from gateway.view import queue_stats
from gateway.view.store import JobView

T0 = 1_770_000_000_000
JOB_ID = "019b0a4c-1f00-7000-8000-000000000001"


def job(state: str, **fields: Any) -> dict[str, Any]:
    return {"id": JOB_ID, "type": "a.b", "queue": "q", "state": state, **fields}


STARTED = job("active", enqueued_at=format_rfc3339(T0), started_at=format_rfc3339(T0 + 400))
DONE = {**STARTED, "state": "completed", "completed_at": format_rfc3339(T0 + 1_400)}
FAILED = {**STARTED, "state": "retryable",
          "error": {"type": "x", "occurred_at": format_rfc3339(T0 + 900)}}  # fmt: skip


def totals(*records: dict[str, Any], now_ms: int = T0 + 60_000) -> dict[str, Any]:
    buckets: dict[bytes, bytes] = {}
    before = None
    for record in records:
        for key, delta in queue_stats.activity(before, record).items():
            buckets[key] = queue_stats.merged(buckets.get(key), delta)
        before = record
    return queue_stats.last_hour(sorted(buckets.items()), now_ms)


def test_a_run_counts_its_wait_and_its_duration_once():
    stats = totals(job("available"), STARTED, STARTED, DONE)  # STARTED twice: a heartbeat
    assert stats["completed_last_hour"] == 1 and stats["failed_last_hour"] == 0
    assert (stats["avg_wait_ms"], stats["avg_duration_ms"]) == (400, 1_000)
    assert stats["throughput_per_second"] == round(1 / 3600, 4)


def test_a_failed_attempt_counts_where_its_error_occurred():
    assert totals(job("available"), STARTED, FAILED)["failed_last_hour"] == 1


def test_only_the_last_hour_counts():
    assert totals(STARTED, DONE, now_ms=T0 + 61 * 60_000)["completed_last_hour"] == 0
    empty = totals()
    assert empty["avg_duration_ms"] is None and empty["avg_wait_ms"] is None


def test_the_view_keeps_the_buckets_and_sweeps_old_ones(tmp_path):
    view = JobView(tmp_path / "view")
    records = [job("available"), STARTED, DONE]
    for offset, record in enumerate(records):
        view.apply([(0, offset, JOB_ID.encode(), orjson.dumps(record))], T0)

    def completed(queue: str) -> int:
        return queue_stats.last_hour(view.queue_activity(queue), T0 + 60_000)["completed_last_hour"]

    assert (completed("q"), completed("other")) == (1, 0)
    assert (
        queue_stats.per_minute(view.queue_activity("q"), T0 + 60_000)["processed_per_minute"] == 0.2
    )
    view.sweep(T0 + (queue_stats.KEEP_MINUTES + 2) * 60_000)
    assert completed("q") == 0
    view.close()


def test_the_history_counts_each_point_of_the_kept_minutes():
    created = job("available", created_at=format_rfc3339(T0 + 100))
    buckets: dict[bytes, bytes] = {}
    before = None
    started = {**STARTED, "created_at": created["created_at"]}
    for record in (created, started, FAILED, started, DONE):
        for key, delta in queue_stats.activity(before, record).items():
            buckets[key] = queue_stats.merged(buckets.get(key), delta)
        before = record
    points = queue_stats.history(sorted(buckets.items()), T0 + 10 * 60_000, 5)
    assert len(points) == queue_stats.KEEP_MINUTES // 5
    assert [p["timestamp"] for p in points] == sorted(p["timestamp"] for p in points)
    totals = {k: sum(p[k] for p in points) for k in ("processed", "failed", "enqueued")}
    assert totals == {"processed": 1, "failed": 1, "enqueued": 1}
    [point] = [p for p in points if p["enqueued"]]
    assert point["timestamp"] == format_rfc3339(T0 // 300_000 * 300_000)
