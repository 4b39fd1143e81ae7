"""OJS rate limiting's events (RL-006) derived from a rate key's published states
(view/rate_events.py), and served with the lifecycle events."""

from __future__ import annotations

from typing import Any

import orjson

from gateway.core.rate_policy import RateLimit
from gateway.core.rates import RateState, decide, release
from gateway.view.events import derive

T0 = 1_770_000_000_000


def as_published(state: RateState | None) -> dict[str, Any] | None:
    return None if state is None else orjson.loads(state.dump())  # type: ignore[no-any-return]


def events(before: RateState | None, after: RateState | None) -> list[dict[str, Any]]:
    return derive((3, 17, as_published(before), as_published(after)))


def test_a_grant_that_fills_the_key_is_exceeded_and_a_permit_given_back_released() -> None:
    policy = RateLimit("k", concurrency=2)
    one, refusal = decide(None, policy, "job-1", "0-1", T0)
    assert refusal is None and events(None, one) == []  # one of two: room left
    two, _ = decide(one, policy, "job-2", "0-2", T0 + 5)
    [full] = events(one, two)
    assert full["type"] == "rate_limit.exceeded" and full["id"] == "evt_3-17-r0"
    assert full["data"] == {"key": "k", "strategy": "concurrency", "limit": 2, "current": 2}
    assert full["time"] is not None and full["subject"] == "k"
    back = release(two, "0-1", False, T0 + 9)
    [released] = events(two, back)
    assert released["type"] == "rate_limit.released"
    assert released["data"] == {"key": "k", "strategy": "concurrency", "job_id": "job-1"}
    assert len(events(back, None)) == 1  # the key deleted: the last holder's release


def test_a_rate_that_fills_its_window_is_exceeded_by_rate() -> None:
    policy = RateLimit("r", limit=1, period_ms=1000)
    one, _ = decide(None, policy, "job-1", "0-1", T0)
    [full] = events(None, one)
    assert full["data"] == {"key": "r", "strategy": "rate", "limit": 1, "current": 1}


def test_a_job_s_state_is_still_a_job_s_events() -> None:
    job = {"id": "j", "type": "t", "queue": "q", "state": "available", "enqueued_at": "x"}
    assert [e["type"] for e in derive((0, 1, None, job))] == ["job.enqueued"]
