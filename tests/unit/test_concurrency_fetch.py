"""Fetch and per-key concurrency: the view counts a key's active jobs (its `a/` index, kept
by `apply` and rebuilt with the view), fetch never proposes a job whose key has no free
slot, proposes it once a slot frees, and a claim the processor refuses as full (a view
behind it) stops that key for the fetch without an error."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson

from gateway.core import EventOutcome, parse_event
from gateway.core.engine import entry_of
from gateway.core.lifecycle import on_key
from gateway.http.answers import Answer
from gateway.http.binding import HttpSettings
from gateway.http.workers import fetch
from gateway.sdk import EventAck
from gateway.view.store import JobView
from tests.unit.test_http_edge import post_request

KEY = "b" * 64
CREATED = "2026-01-01T00:00:00.000Z"


def a_job(
    job_id: str, state: str = "available", key: str | None = KEY, limit: int | None = 2
) -> dict[str, Any]:
    job: dict[str, Any] = {"id": job_id, "type": "t", "queue": "q", "state": state,
                           "created_at": CREATED, "enqueued_at": CREATED, "attempt": 0,
                           "max_attempts": 1, "unique_key": key}  # fmt: skip
    if key is not None and limit is not None:
        job["unique_concurrency"] = limit
    return job


class Processor:
    """The truth of each job, moved by the core's own rule (`on_key` with the key's
    entries), as the processor would; the view reads a job's record only when `commit`."""

    def __init__(self, view: JobView, jobs: list[dict[str, Any]]) -> None:
        self.view = view
        self.jobs = {j["id"]: j for j in jobs}
        self.claims: list[str] = []
        self.offset = 0

    def commit(self, *job_ids: str) -> None:
        records: list[tuple[int, int, bytes, bytes | None]] = []
        for job_id in job_ids:
            records.append((0, self.offset, job_id.encode(), orjson.dumps(self.jobs[job_id])))
            self.offset += 1
        self.view.apply(records, time.time_ns() // 1_000_000)

    def move(self, job_id: str, event_type: str) -> Any:
        job = self.jobs[job_id]
        entries = [entry_of(j) for j in self.jobs.values() if j["unique_key"] == KEY]
        event = parse_event({"job_id": job_id, "type": event_type})
        now = time.time_ns() // 1_000_000
        result, _ = on_key(job, entries if job["unique_key"] else (), event, now)
        if result.outcome is EventOutcome.APPLIED and result.job is not None:
            self.jobs[job_id] = result.job
        return result

    async def publish_event(self, event: dict[str, Any], **_: Any) -> Any:
        if event["type"] != "job.started":
            return None
        self.claims.append(event["job_id"])
        result = self.move(event["job_id"], "job.started")
        record = {"outcome": str(result.outcome), "job_id": result.job_id,
                  "previous_state": str(result.previous_state), "state": str(result.state),
                  "job": result.job}  # fmt: skip
        if result.error is not None:
            record["error"] = {"code": result.error.code, "message": result.error.message}
        return EventAck.from_record(record)


def setup(tmp_path: Path, jobs: list[dict[str, Any]]) -> tuple[Any, Processor]:
    view = JobView(tmp_path / "view")
    processor = Processor(view, jobs)
    processor.commit(*(j["id"] for j in jobs))
    binding = SimpleNamespace(settings=HttpSettings(), view=view, client=processor, claims={})
    return binding, processor


def fetched(binding: Any, count: int) -> list[str]:
    answer = asyncio.run(fetch(post_request({"queues": ["q"], "count": count}), binding, "r"))
    assert isinstance(answer, Answer) and answer.status == 200, answer
    return [j["id"] for j in answer.body["jobs"]]


def test_the_view_counts_a_key_s_active_jobs_and_rebuilds_the_count(tmp_path: Path) -> None:
    binding, processor = setup(tmp_path, [a_job("k1", "active"), a_job("k2"), a_job("k3")])
    view = binding.view
    assert view.active_under(KEY) == 1 and view.active_under("c" * 64) == 0
    processor.jobs["k1"]["state"] = "completed"
    processor.jobs["k2"]["state"] = "active"
    processor.jobs["k3"]["state"] = "active"
    processor.commit("k1", "k2", "k3")
    assert view.active_under(KEY) == 2
    view.provisional("k3", {**processor.jobs["k3"], "state": "completed"})  # an ack's answer
    assert view.active_under(KEY) == 1
    view.close()
    rebuilt = JobView(tmp_path / "again")
    rebuilt.apply([(0, i, j.encode(), orjson.dumps(processor.jobs[j]))
                   for i, j in enumerate(("k1", "k2", "k3"))], 0)  # fmt: skip
    assert rebuilt.active_under(KEY) == 2
    rebuilt.close()


def test_fetch_never_proposes_a_job_of_a_full_key_and_does_once_a_slot_frees(
    tmp_path: Path,
) -> None:
    jobs = [a_job("k1", "active"), a_job("k2"), a_job("k3"), a_job("k4"), a_job("free", key=None)]
    binding, processor = setup(tmp_path, jobs)
    # One slot of two is free: one job of the key, and the job without a key.
    assert sorted(fetched(binding, 5)) == ["free", "k2"]
    assert sorted(processor.claims) == ["free", "k2"]
    processor.commit("k2", "free")
    assert fetched(binding, 5) == [] and len(processor.claims) == 2  # the key is full
    processor.move("k1", "job.completed")
    processor.commit("k1")
    assert fetched(binding, 5) == ["k3"]  # a slot freed: the next waiting job runs
    assert processor.claims[2:] == ["k3"]
    binding.view.close()


def test_a_claim_another_fetch_of_this_process_has_in_flight_takes_its_slot(
    tmp_path: Path,
) -> None:
    binding, processor = setup(tmp_path, [a_job("k1", "active"), a_job("k2"), a_job("k3")])
    binding.claims["k2"] = time.monotonic() + 5  # another fetch is claiming k2 now
    assert fetched(binding, 5) == [] and processor.claims == []
    binding.claims.clear()
    assert fetched(binding, 5) in (["k2"], ["k3"])
    binding.view.close()


def test_a_claim_refused_as_full_stops_the_key_for_the_fetch_without_an_error(
    tmp_path: Path,
) -> None:
    waiting = [a_job("k3"), a_job("k4"), a_job("k5"), a_job("free", key=None)]
    binding, processor = setup(tmp_path, waiting)
    # Started elsewhere, committed after this view read: the processor knows, the view not.
    processor.jobs.update(x1=a_job("x1", "active"), x2=a_job("x2", "active"))
    assert fetched(binding, 5) == ["free"]
    # Two proposals within the view's count, both refused as full; k5 is never asked.
    assert sorted(processor.claims) == ["free", "k3", "k4"]
    assert [processor.jobs[j]["state"] for j in ("k3", "k4", "k5")] == ["available"] * 3
    binding.view.close()


def test_the_admin_list_of_unique_keys_shows_a_limit_beside_the_active_jobs(
    tmp_path: Path,
) -> None:
    from starlette.requests import Request

    from gateway.http.admin import unique_jobs

    jobs = [a_job("k1", "active"), a_job("k2"), a_job("free", key="c" * 64, limit=None)]
    binding, _ = setup(tmp_path, jobs)
    scope = {"type": "http", "method": "GET", "path": "/", "query_string": b"", "headers": []}
    answer = asyncio.run(unique_jobs(Request(scope), binding, "r"))
    assert isinstance(answer, Answer) and answer.status == 200
    shown = {item["job_id"]: item.get("concurrency") for item in answer.body["items"]}
    assert shown == {"k1": {"limit": 2, "active": 1}, "k2": {"limit": 2, "active": 1},
                     "free": None}  # fmt: skip
    binding.view.close()
