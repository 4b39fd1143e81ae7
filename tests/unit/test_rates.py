"""Rate limits' one rule (core/rates.py): the shapes a rate limit is read in, the sliding
window's edges, and, over any sequence of claims and permits given back, the invariants:
no window of one period holds more than `limit` starts of permits not given back unused,
and no more than `concurrency` permits are ever held."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core.envelope import envelope_or_raise
from gateway.core.errors import Invalid
from gateway.core.jobs import accepted_job
from gateway.core.rate_policy import (
    Override,
    RateLimit,
    parse_override,
    parse_rate_limit,
    policy_of,
    short_period,
)
from gateway.core.rates import (
    RATE_LIMITED,
    Permit,
    RateState,
    decide,
    idle_at,
    inspect,
    permit_refusal,
    permits,
    release,
    set_override,
)
from gateway.core.times import parse_rfc3339

T0 = 1_770_000_000_000
PER_SECOND = RateLimit("k", None, 1, 1000)


def parsed(raw: Any, queue: str = "q") -> RateLimit | None:
    return parse_rate_limit(raw, queue, "rate_limit")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"max_per_second": 1}, RateLimit("queue:q", None, 1, 1000)),
        ({"key": "k", "rate": 1, "period": "second"}, RateLimit("k", None, 1, 1000)),
        ({"key": "k", "rate": 3, "period": "minute"}, RateLimit("k", None, 3, 60_000)),
        ({"key": "k", "concurrency": 1}, RateLimit("k", 1, None, None)),
        (
            {
                "key": "k",
                "concurrency": 2,
                "rate": {"limit": 5, "period": "PT1S"},
                "on_limit": "wait",
            },
            RateLimit("k", 2, 5, 1000),
        ),  # fmt: skip
        ({"key": "k", "rate": 2, "period": 10}, RateLimit("k", None, 2, 10_000)),
    ],
)
def test_the_shapes_clients_send_are_read(raw: Any, expected: RateLimit) -> None:
    assert parsed(raw) == expected
    # The normalised form is read back as the same limit.
    assert policy_of(expected.to_dict()) == expected


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        (5, "rate_limit must be an object"),
        ({"key": "k"}, "needs concurrency, rate or max_per_second"),
        ({"key": "bad key", "concurrency": 1}, "rate_limit.key"),
        ({"key": "k", "concurrency": -1}, "rate_limit.concurrency"),
        ({"key": "k", "concurrency": True}, "rate_limit.concurrency"),
        ({"key": "k", "rate": 0, "period": "second"}, "rate_limit.rate"),
        ({"key": "k", "rate": 1}, "rate_limit.period is required"),
        ({"key": "k", "rate": 1, "period": "P1M"}, "rate_limit.period"),
        ({"key": "k", "rate": 1, "period": "P2D"}, "at most a day"),
        ({"key": "k", "rate": {"limit": 1}}, "rate_limit.rate.period"),
        ({"key": "k", "rate": {"limit": 1, "period": "PT1S", "x": 1}}, "rate_limit.rate.x"),
        ({"max_per_second": 1, "rate": 1, "period": "second"}, "not both"),
        ({"key": "k", "concurrency": 1, "limit": 3}, "rate_limit.limit is not a field"),
        ({"key": "k", "concurrency": 1, "on_limit": "later"}, "rate_limit.on_limit"),
        ({"key": "k", "concurrency": 1, "on_limit": "later"}, "on_limit must be"),
        ({"key": "k", "throttle": {"limit": 1, "period": "PT1S"}}, "throttle is not supported"),
    ],
)
def test_a_bad_rate_limit_is_refused_naming_the_field(raw: Any, named: str) -> None:
    with pytest.raises(Invalid) as refused:
        parsed(raw)
    assert named in refused.value.error.message
    assert refused.value.error.code in ("invalid_request", "unsupported_option")


def test_the_accepted_job_carries_the_limit_normalised_from_either_place() -> None:
    limit = {"max_per_second": 1}
    for body in (
        {"type": "a.b", "args": [], "options": {"queue": "rl", "rate_limit": limit}},
        {"type": "a.b", "args": [], "queue": "rl", "rate_limit": limit},
    ):
        job = accepted_job(envelope_or_raise(body), "id", None, T0, None)
        assert job["rate_limit"] == {
            "key": "queue:rl", "rate": {"limit": 1, "period": "PT1S"}, "on_limit": "wait",
        }  # fmt: skip
    plain = accepted_job(envelope_or_raise({"type": "a.b", "args": []}), "id", None, T0, None)
    assert "rate_limit" not in plain
    forged = {"type": "a.b", "args": [], "rate_permit": {"key": "k", "id": "0-1"}}
    assert "rate_permit" not in accepted_job(envelope_or_raise(forged), "id", None, T0, None)
    with pytest.raises(Invalid, match="differ"):
        envelope_or_raise({"type": "a.b", "args": [], "rate_limit": {"max_per_second": 1},
                           "options": {"rate_limit": {"max_per_second": 2}}})  # fmt: skip


def test_the_window_slides_and_a_start_one_period_old_no_longer_counts() -> None:
    state, refusal = decide(None, PER_SECOND, "j1", "p1", T0)
    assert refusal is None
    state = release(state, "p1", unused=False, now_ms=T0 + 10)
    for at in (T0 + 1, T0 + 500, T0 + 999):
        _, refusal = decide(state, PER_SECOND, "j2", "p2", at)
        assert refusal is not None and refusal.strategy == "rate"
        assert refusal.retry_at_ms == T0 + 1000
    _, refusal = decide(state, PER_SECOND, "j2", "p2", T0 + 1000)
    assert refusal is None


def test_a_start_late_in_a_wall_second_still_holds_the_next_one_back() -> None:
    # A fixed window aligned to seconds would let the second claim through at x.05 s.
    state, _ = decide(None, PER_SECOND, "j1", "p1", T0 + 950)
    _, refusal = decide(state, PER_SECOND, "j2", "p2", T0 + 1050)
    assert refusal is not None


def test_concurrency_counts_permits_held_until_given_back() -> None:
    policy = RateLimit("k", 1, None, None)
    state, refusal = decide(None, policy, "j1", "p1", T0)
    assert refusal is None
    _, refusal = decide(state, policy, "j2", "p2", T0 + 60_000)
    assert refusal is not None and refusal.strategy == "concurrency"
    assert refusal.retry_at_ms is None
    state = release(state, "p1", unused=False, now_ms=T0 + 60_001)
    assert idle_at(state) == 0  # nothing held, no window: the key is deleted
    _, refusal = decide(state, policy, "j2", "p2", T0 + 60_002)
    assert refusal is None


def test_a_permit_given_back_unused_takes_its_start_back() -> None:
    state, _ = decide(None, PER_SECOND, "j1", "p1", T0)
    state = release(state, "p1", unused=True, now_ms=T0 + 1)
    assert state.starts == () and state.holders == ()
    _, refusal = decide(state, PER_SECOND, "j2", "p2", T0 + 2)
    assert refusal is None


def test_concurrency_zero_pauses_the_key() -> None:
    _, refusal = decide(None, RateLimit("k", 0, None, None), "j1", "p1", T0)
    assert refusal is not None


def test_the_state_round_trips_and_says_what_fetch_may_propose() -> None:
    policy = RateLimit("k", 2, 5, 1000)
    state, _ = decide(None, policy, "j1", "p1", T0)
    assert RateState.load(state.dump()) == state
    assert RateState.load(b"not json") is None and RateState.load({"policy": 1}) is None
    assert permits(state, policy, T0 + 1) == 1  # concurrency 2, one held
    assert permits(None, policy, T0) == 2
    shown = inspect("k", state, T0 + 1, 3)
    assert shown["concurrency"] == {"limit": 2, "active": 1, "available": 1}
    assert shown["rate"]["current_count"] == 1 and shown["limit"] == 5
    assert shown["waiting"] == shown["waiting_count"] == 3 and shown["override"] is None
    assert inspect("k", None, T0, 0)["active"] == 0


def test_a_claim_needs_a_permit_of_each_key_it_needs() -> None:
    job = {"id": "j", "rate_limit": PER_SECOND.to_dict()}
    own = (PER_SECOND,)
    refused = permit_refusal(job, (), own)
    assert refused is not None and refused.code == RATE_LIMITED
    assert permit_refusal(job, (Permit("k", "p", T0),), own) is None
    assert permit_refusal(job, (Permit("other", "p", T0),), own) is not None
    assert permit_refusal({"id": "j"}, (), ()) is None
    assert permit_refusal({"id": "j"}, (Permit("k", "p", T0),), ()) is not None
    # Its queue's key too (core/queue_rates.py): both, in any order, and no other.
    both = (RateLimit("queue:q", concurrency=1), PER_SECOND)
    assert permit_refusal(job, (Permit("k", "p", T0),), both) is not None
    held = (Permit("k", "p", T0), Permit("queue:q", "r", T0))
    assert permit_refusal(job, held, both) is None


step = st.one_of(
    st.tuples(st.just("claim"), st.integers(0, 400)),
    st.tuples(st.just("used"), st.integers(0, 400)),
    st.tuples(st.just("unused"), st.integers(0, 400)),
)


@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, 3),
    st.integers(1, 4),
    st.sampled_from([100, 250, 1000]),
    st.lists(step, max_size=60),
)
def test_no_window_holds_more_than_the_limit_and_no_more_than_concurrency_run(
    concurrency: int, limit: int, period: int, steps: list[tuple[str, int]]
) -> None:
    policy = RateLimit("k", concurrency, limit, period)
    state: RateState | None = None
    now, n = T0, 0
    granted: dict[str, int] = {}  # permit -> start time
    returned_unused: set[str] = set()
    for action, gap in steps:
        now += gap
        if action == "claim":
            n += 1
            state, refusal = decide(state, policy, f"j{n}", f"p{n}", now)
            if refusal is None:
                granted[f"p{n}"] = now
        elif state is not None and state.holders:
            permit = state.holders[gap % len(state.holders)][0]
            state = release(state, permit, action == "unused", now)
            if action == "unused":
                returned_unused.add(permit)
        else:
            continue
        # Bounded: what a decision or a release leaves is in the window and within limits.
        assert len(state.holders) <= concurrency
        assert len(state.starts) <= limit
        assert all(at > now - period for at, _ in state.starts)
    starts = sorted(at for p, at in granted.items() if p not in returned_unused)
    for i in range(len(starts) - limit):
        assert starts[i + limit] - starts[i] >= period


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"concurrency": 0}, Override(0)),
        (
            {
                "concurrency": 1,
                "rate": {"limit": 2, "period": "PT1M"},
                "expires_at": "2026-02-13T13:00:00Z",
            },
            Override(1, 2, 60_000, parse_rfc3339("2026-02-13T13:00:00Z")),
        ),  # fmt: skip
        ({"limit": 10, "period": "10s"}, Override(None, 10, 10_000)),
        ({"limit": 3, "period": "5m", "expires_at": None}, Override(None, 3, 300_000)),
        ({"limit": 3, "period": "1h"}, Override(None, 3, 3_600_000)),
    ],
)
def test_an_override_is_read_in_the_spec_s_shape_and_the_admin_ui_s(
    raw: Any, expected: Override
) -> None:
    assert parse_override(raw) == expected
    assert parse_override(expected.to_dict()) == expected  # as the home keeps it


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ({}, "needs concurrency"),
        ({"limit": 0, "period": "1s"}, "from 1 to"),
        ({"limit": 1, "concurrency": 2}, "not both"),
        ({"limit": 1, "period": "2y"}, "ISO 8601"),
        ({"concurrency": -1}, "from 0 to"),
        ({"concurrency": 1, "expires_at": "soon"}, "RFC 3339"),
        ({"concurrency": 1, "until": "x"}, "until is not a field"),
        ({"limit": 1, "period": "1s", "rate": {"limit": 1, "period": "PT1S"}}, "not both"),
        ([], "an object"),
    ],
)
def test_an_override_that_is_not_one_is_refused_naming_why(raw: Any, says: str) -> None:
    with pytest.raises(Invalid) as refused:
        parse_override(raw)
    assert says in refused.value.error.message and refused.value.error.code == "invalid_request"


def test_an_override_replaces_what_it_names_until_it_ends_by_event_time() -> None:
    policy = RateLimit("k", 2, 5, 1000)
    paused = set_override(None, "k", Override(0, expires_at_ms=T0 + 10_000), T0)
    state, refusal = decide(paused, policy, "j1", "p1", T0 + 1)
    assert refusal is not None and refusal.strategy == "concurrency" and refusal.limit == 0
    assert permits(state, policy, T0 + 2) == 0
    shown = inspect("k", state, T0 + 2, 0)
    assert shown["override"]["concurrency"] == 0 and shown["concurrency"]["limit"] == 0
    assert shown["rate"]["limit"] == 5  # what the override does not name stays the job's
    assert idle_at(state) == T0 + 10_000
    # At its end, by the home's clock, the job's own limits apply again, and it is gone.
    state, refusal = decide(state, policy, "j1", "p2", T0 + 10_000)
    assert refusal is None and state.override is None
    assert inspect("k", state, T0 + 10_000, 0)["override"] is None
    # A rate override: one start a second, whatever the job says; cleared, five again.
    slow = set_override(state, "k", Override(None, 1, 1000), T0 + 10_001)
    assert decide(slow, policy, "j2", "p3", T0 + 10_002)[1] is not None
    assert decide(set_override(slow, "k", None, T0 + 10_002), policy, "j2", "p3",
                  T0 + 10_002)[1] is None  # fmt: skip
    kept = set_override(None, "k", Override(1), T0)
    assert idle_at(kept) is None and RateState.load(kept.dump()) == kept


def test_the_admin_ui_s_flat_forms_read_and_shown() -> None:
    # A key limited by concurrency alone is shown `limit` with no period: sent back so, it
    # is a concurrency override.
    assert parse_override({"limit": 4, "period": None}) == Override(concurrency=4)
    assert [short_period(ms) for ms in (1000, 10_000, 60_000, 300_000, 3_600_000, 1500)] == [
        "1s", "10s", "1m", "5m", "1h", "1500ms"
    ]  # fmt: skip
