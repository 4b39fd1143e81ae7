"""The serve view's bound: finished jobs are dropped by the processor's retention rule."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from gateway.core.jobs import job_expires_at
from gateway.core.times import format_rfc3339
from gateway.view.store import JobView

T0 = 1_770_000_000_000
RETENTION = 60_000


def job(job_id: str, state: str, **fields: Any) -> dict[str, Any]:
    return {"id": job_id, "queue": "q", "state": state, "priority": 0, **fields}


def record(offset: int, value: dict[str, Any]) -> tuple[int, int, bytes, bytes]:
    return (0, offset, str(value["id"]).encode(), orjson.dumps(value))


def test_finished_jobs_are_swept_once_their_retention_has_passed(tmp_path: Path) -> None:
    view = JobView(tmp_path, RETENTION)
    done = job("a", "completed", completed_at=format_rfc3339(T0))
    gone = job("b", "cancelled", cancelled_at=format_rfc3339(T0 + 10))
    live = job("c", "available", created_at=format_rfc3339(T0))
    view.apply([record(0, done), record(1, gone), record(2, live)], T0 + 20)
    assert view.get("a") == done and view.get("b") == gone
    assert view.sweep(T0 + RETENTION - 1) == 0  # nothing has expired yet
    assert view.sweep(T0 + RETENTION) == 1  # the rule the processor's store applies
    assert view.get("a") is None and view.get("b") == gone
    assert job_expires_at(gone, RETENTION) == T0 + 10 + RETENTION
    assert view.sweep(T0 + 10 * RETENTION) == 1
    assert view.get("b") is None and view.get("c") == live  # live jobs stay
    assert list(view.waiting("q")) == ["c"]
    assert view.offsets() == {0: 3}
    view.close()


def test_a_record_already_past_its_expiry_is_not_kept(tmp_path: Path) -> None:
    # A fresh view reading the compacted topic from the start meets the last record of
    # every job that expired long ago: it keeps none of them.
    view = JobView(tmp_path, RETENTION)
    old = job("a", "completed", completed_at=format_rfc3339(T0))
    view.apply([record(0, old)], T0 + RETENTION + 1)
    assert view.get("a") is None and view.offsets() == {0: 1}
    view.close()


def test_a_job_that_finishes_again_is_swept_by_its_latest_record(tmp_path: Path) -> None:
    view = JobView(tmp_path, RETENTION)
    active = job("a", "active")
    view.apply([record(0, active)], T0)
    done = job("a", "completed", completed_at=format_rfc3339(T0 + 5))
    view.apply([record(1, done)], T0 + 5)
    assert view.sweep(T0 + RETENTION + 4) == 0
    assert view.sweep(T0 + RETENTION + 5) == 1 and view.get("a") is None
    view.close()


# -- provisional entries: answered jobs before their records are read ---------


def test_an_answered_job_shows_until_its_own_record_is_read(tmp_path: Path) -> None:
    view = JobView(tmp_path, RETENTION)
    view.apply([record(0, job("a", "available"))], T0)
    view.provisional("a", job("a", "active"))
    assert view.get("a") == job("a", "active")
    # An older record read after the answer does not take the job back.
    view.apply([record(1, job("a", "available", priority=1))], T0)
    assert view.get("a") == job("a", "active")
    # Its own record (fields in any order) ends the entry; later records show as read.
    view.apply([(0, 2, b"a", orjson.dumps(dict(reversed(job("a", "active").items()))))], T0)
    view.apply([record(3, job("a", "completed"))], T0)
    assert view.get("a") == job("a", "completed")


def test_an_answer_whose_record_was_read_first_leaves_no_entry(tmp_path: Path) -> None:
    view = JobView(tmp_path, RETENTION)
    view.apply([record(0, job("a", "active")), record(1, job("a", "completed"))], T0)
    view.provisional("a", job("a", "active"))  # answered with the commit, read late
    assert view.get("a") == job("a", "completed")


def test_a_deleted_job_is_gone_until_its_tombstone(tmp_path: Path) -> None:
    view = JobView(tmp_path, RETENTION)
    view.apply([record(0, job("a", "discarded"))], T0)
    view.provisional("a", None)
    assert view.get("a") is None
    view.apply([(0, 1, b"a", None)], T0)
    assert view.get("a") is None
    view.apply([record(2, job("a", "available"))], T0)  # the entry went with the tombstone
    assert view.get("a") == job("a", "available")


def test_fetch_order_offers_answered_jobs_among_the_committed(tmp_path: Path) -> None:
    view = JobView(tmp_path, RETENTION)
    view.apply([record(0, job("a", "available")), record(1, job("b", "available"))], T0)
    view.provisional("c", job("c", "available", priority=5))
    view.provisional("a", job("a", "active"))  # claimed: no longer waiting
    assert list(view.waiting("q")) == ["c", "a", "b"]
    assert view.get("a") == job("a", "active")


def test_a_tenant_s_fetch_order_reads_its_own_part_of_the_queue(tmp_path: Path) -> None:
    view = JobView(tmp_path, RETENTION)
    acme, globex = {"meta": {"tenant_id": "acme"}}, {"meta": {"tenant_id": "globex"}}
    view.apply([
        record(0, job("a1", "available", **acme)), record(1, job("g1", "available", **globex)),
        record(2, job("n1", "available")), record(3, job("a2", "available", priority=3, **acme)),
        record(4, job("g2", "available", priority=9, **globex)),
    ], T0)  # fmt: skip
    view.provisional("a3", job("a3", "available", priority=5, **acme))
    assert list(view.waiting("q", {"acme"})) == ["a3", "a2", "a1"]
    assert list(view.waiting("q", {"acme", "globex"})) == ["g2", "a3", "a2", "a1", "g1"]
    assert list(view.waiting("q")) == ["g2", "a3", "a2", "a1", "g1", "n1"]
    view.apply([record(5, job("a2", "active", **acme))], T0)  # claimed: out of both
    assert list(view.waiting("q", {"acme"})) == ["a3", "a1"]
    assert list(view.waiting("q", set())) == []


def test_a_scheduled_job_is_listed_and_counted_as_available_once_due(tmp_path: Path) -> None:
    """As GET shows it: every listing, filter and count agrees."""
    view = JobView(tmp_path, RETENTION)
    acme = {"tenant_id": "acme"}
    later = job("s", "scheduled", meta=acme, scheduled_at=format_rfc3339(T0 + 1_000))
    past = job("p", "scheduled", scheduled_at=format_rfc3339(T0 - 1))
    retry = job("r", "retryable")  # no backoff recorded: due at once
    view.apply([record(0, later), record(1, past), record(2, retry)], T0)

    def listed() -> dict[str, list[str]]:
        return {s: list(view.in_state(s)) for s in ("available", "scheduled", "active")}

    def counts() -> dict[str, int]:
        return {s: n for s, n in view.queues()["q"]["counts"].items() if n}

    assert listed() == {"available": ["p", "r"], "scheduled": ["s"], "active": []}
    assert counts() == {"available": 2, "scheduled": 1}
    assert view.sweep(T0 + 999) == 0
    assert view.sweep(T0 + 1_000) == 1
    assert listed() == {"available": ["p", "r", "s"], "scheduled": [], "active": []}
    assert counts() == {"available": 3}
    assert list(view.in_state("available", tenants=["acme"])) == ["s"]
    assert view.tenants()["acme"]["queues"] == {"q": {"available": 1, "scheduled": 0}}
    # Each one's next version takes it out of the state it was listed in.
    started = [job(i, "active") for i in ("s", "p")] + [job("r", "scheduled")]
    view.apply([record(3 + n, j) for n, j in enumerate(started)], T0 + 2_000)
    assert listed() == {"available": [], "scheduled": ["r"], "active": ["p", "s"]}
    assert counts() == {"active": 2, "scheduled": 1}
    view.close()
