"""The per-principal enqueue rate (OJS security SEC-014, http/enqueue_rate.py) and the cell
rate it counts with (core/gcra.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core import gcra
from gateway.http import shared
from gateway.http.enqueue_rate import EnqueueRate
from tests.unit.test_tenants import App


@settings(max_examples=300, deadline=None)
@given(
    limit=st.integers(1, 20),
    period=st.sampled_from([7, 1000, 3000]),
    arrivals=st.lists(
        st.tuples(st.integers(0, 300), st.integers(1, 4)), min_size=1, max_size=150
    ),  # fmt: skip
)
def test_no_window_of_k_periods_admits_more_than_k_plus_one_bursts(limit, period, arrivals):
    tat, now, admitted = 0, 0, list[tuple[int, int]]()
    for gap, count in arrivals:
        now += gap
        after, retry = gcra.admit(tat, limit, period, now, count)
        if retry is None:
            tat = after
            admitted.append((now, count))
            assert gcra.held(tat, limit, period, now) <= limit
        else:
            assert after == tat and (retry == -1) == (count > limit)
            if retry >= 0:  # it fits at the time it names, not a millisecond before
                assert gcra.admit(tat, limit, period, retry, count)[1] is None
                assert (
                    retry == now or gcra.admit(tat, limit, period, retry - 1, count)[1] is not None
                )
    for k in (1, 3):
        for i, (start, _) in enumerate(admitted):
            inside = sum(n for t, n in admitted[i:] if t < start + k * period)
            assert inside <= (k + 1) * limit - 1


@pytest.fixture
def app(tmp_path: Path) -> Any:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(shared, "QUEUE_SETTLE_S", 0.0)
        made = App(tmp_path, {"a": [], "b": []})
        made.app.state.binding.enqueue_rate = EnqueueRate(3)
        yield made
        made.view.close()


def test_a_principal_over_its_rate_is_429_with_when_and_the_headers_say_so(app: App) -> None:
    job = {"type": "r.job", "args": []}
    answers = [app.enqueue(job, who="a") for _ in range(3)]
    assert [a.status_code for a in answers] == [201, 201, 201]
    assert [a.headers["X-RateLimit-Remaining"] for a in answers] == ["2", "1", "0"]
    assert all(a.headers["X-RateLimit-Limit"] == "3" for a in answers)
    assert int(answers[0].headers["X-RateLimit-Reset"]) > 1_700_000_000
    over = app.enqueue(job, who="a")
    assert over.status_code == 429 and over.headers["Retry-After"] == "1"
    error = over.json()["error"]
    assert error["code"] == "rate_limited" and error["retryable"] is True
    assert error["details"] == {"limit": 3, "window_seconds": 1, "retry_after_seconds": 1}
    assert "principal 'a'" in error["message"]
    # Another principal has its own.
    assert app.enqueue(job, who="b").status_code == 201
    # A batch counts its jobs; one larger than the burst never fits.
    batch = app.call("POST", "/ojs/v1/jobs/batch", who="b", json={"jobs": [job] * 4})
    assert batch.status_code == 400 and "a batch of 4 jobs" in batch.json()["error"]["message"]
    fits = app.call("POST", "/ojs/v1/jobs/batch", who="b", json={"jobs": [job] * 2})
    assert fits.status_code == 201 and fits.headers["X-RateLimit-Remaining"] == "0"


def test_no_limit_no_headers(app: App) -> None:
    app.app.state.binding.enqueue_rate = EnqueueRate(0)
    answer = app.enqueue({"type": "r.job", "args": []}, who="a")
    assert answer.status_code == 201 and "X-RateLimit-Limit" not in answer.headers
