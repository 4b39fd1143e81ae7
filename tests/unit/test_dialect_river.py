"""River (`"river"`): InsertOpts.UniqueOpts, as tables, stories and properties.

The rules follow River's own code: internal/dbunique (the key: kind, args,
period bucket, queue), insert_opts.go (validation, the default and required
states, isEmpty) and the unique index over each row's own unique_states.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.core import Judge, OnConflict, Outcome, State, decide, parse_request
from gateway.core.errors import GatewayError
from gateway.core.holder import GO_ZERO_TIME_MS, StatesKind, StatesRule, bucket_start
from gateway.core.times import format_rfc3339
from tests.unit.test_dialects import DAY, HOUR, MINUTE, T0, Story, ids, parsed

DEFAULT = frozenset(State) - {State.CANCELLED, State.DISCARDED}
REQUIRED = ["available", "pending", "running", "scheduled"]


def insert(unique_opts: dict[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
    """client.Insert(ctx, SortArgs{...}, &river.InsertOpts{UniqueOpts: ...})."""
    out: dict[str, Any] = {"dialect": "river", "kind": "sort", "args": {"strings": ["a", "b"]},
                           **fields}  # fmt: skip
    if unique_opts is not None:
        out["unique_opts"] = unique_opts
    return out


def refused(raw: dict[str, Any], code: str = "invalid_request") -> str:
    error = parse_request(raw)
    assert isinstance(error, GatewayError), error
    assert error.code == code, error
    return error.message


# --- Go's time.Truncate ----------------------------------------------------------------------


def go_truncate(at_ms: int, period_ms: int) -> int:
    """time.Truncate as Go computes it: the remainder since the zero time, 0001-01-01 UTC."""
    zero = datetime(1, 1, 1, tzinfo=UTC)
    at = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=at_ms)
    since = (at - zero) // timedelta(milliseconds=1)
    return at_ms - since % period_ms


instants = st.integers(0, 253_402_300_799_999 - 1)  # up to the end of year 9999
periods = st.integers(1, 400 * 86_400).map(lambda s: s * 1000)


@given(instants, periods)
def test_a_bucket_starts_at_the_time_truncated_as_go_truncates_it(at: int, period: int) -> None:
    start = bucket_start(at, period)
    assert start == go_truncate(at, period)
    assert start <= at < start + period
    assert (start - GO_ZERO_TIME_MS) % period == 0
    assert bucket_start(start, period) == start and bucket_start(start + period, period) != start


@given(instants, st.sampled_from([1, 2, 5, 60, 300, 3600, 7200, 21_600, 86_400]))
def test_a_period_that_divides_a_day_buckets_as_the_unix_epoch_does(at: int, seconds: int) -> None:
    period = seconds * 1000
    assert bucket_start(at, period) == at - at % period


@given(instants, instants, periods)
def test_two_times_share_a_bucket_iff_their_starts_are_equal(a: int, b: int, period: int) -> None:
    same = bucket_start(a, period) == bucket_start(b, period)
    assert same is ((a - GO_ZERO_TIME_MS) // period == (b - GO_ZERO_TIME_MS) // period)


def test_a_week_bucket_starts_on_monday_as_go_s_does() -> None:
    # The zero time was a Monday, so Go's 7-day buckets start on Mondays (the epoch's on
    # Thursdays).
    start = bucket_start(T0, 7 * DAY)
    assert datetime.fromtimestamp(start / 1000, UTC).weekday() == 0
    assert start != T0 - T0 % (7 * DAY)


# --- the mapping -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("opts", "states", "period"),
    [
        ({"by_args": True}, DEFAULT, None),
        ({"by_queue": True}, DEFAULT, None),
        ({"by_period": 900}, DEFAULT, 900_000),
        ({"by_state": REQUIRED + ["retryable"]}, frozenset(State) - {State.CANCELLED,
                                                                     State.DISCARDED,
                                                                     State.COMPLETED}, None),
        ({"by_state": REQUIRED + ["retryable", "completed", "cancelled", "discarded"]},
         frozenset(State), None),
    ],
)  # fmt: skip
def test_unique_opts_map_onto_a_holder_rule(
    opts: dict[str, Any], states: frozenset[State], period: int | None
) -> None:
    request = parsed(insert(opts))
    assert request.holder_rule == StatesRule(StatesKind.RIVER, "unique_opts", states,
                                             period_ms=period)  # fmt: skip
    policy = request.policy
    assert policy is not None and (policy.judge, policy.on_conflict) == (
        Judge.HOLDER, OnConflict.IGNORE,
    )  # fmt: skip


@pytest.mark.parametrize(
    "opts", [None, {}, {"exclude_kind": True}, {"by_args": False, "by_queue": False}]
)
def test_without_a_unique_dimension_the_job_is_not_unique(opts: dict[str, Any] | None) -> None:
    request = parsed(insert(opts))
    assert request.policy is None and request.unique_key is None


def test_the_job_fields_map_onto_the_job() -> None:
    at = format_rfc3339(T0 + HOUR)
    env = parsed(insert(queue="sorting", priority=2, max_attempts=3, scheduled_at=at,
                        metadata={"team": "a"}, tags=["x1"])).envelope  # fmt: skip
    assert (env.type, env.queue, env.priority, env.max_attempts) == ("sort", "sorting", 2, 3)
    assert (env.scheduled_at, env.meta, env.tags) == (T0 + HOUR, {"team": "a"}, ["x1"])
    assert "kind" not in env.raw and "metadata" not in env.raw and env.raw["meta"] == {"team": "a"}
    defaults = parsed(insert()).envelope
    assert (defaults.queue, defaults.priority, defaults.max_attempts) == ("default", 1, 25)


def test_the_key_is_kind_args_period_and_queue() -> None:
    def key(opts: dict[str, Any], **fields: Any) -> str | None:
        return parsed(insert(opts, **fields)).unique_key

    by_args = {"by_args": True}
    assert key(by_args) == key(by_args, args={"strings": ["a", "b"]}, queue="other")
    assert key(by_args) != key(by_args, args={"strings": ["b", "a"]})
    assert key(by_args) != key(by_args, kind="other")
    assert key({**by_args, "exclude_kind": True}) == key({**by_args, "exclude_kind": True},
                                                         kind="other")  # fmt: skip
    by_queue = {"by_queue": True}
    assert key(by_queue) != key(by_queue, queue="other")
    assert key(by_queue) == key(by_queue, args={"n": 1})
    # The period's bucket is matched at decision time; the key says only that there is one.
    assert (
        key({"by_period": 60})
        == key({"by_period": 3600})
        != key({"by_queue": False, "by_state": REQUIRED + ["retryable"]})
    )
    # by_state changes no key: River's unique index is over each row's own states.
    assert key({"by_args": True, "by_state": REQUIRED + ["retryable", "completed"]}) == key(by_args)


_values = st.integers(-(2**53) + 1, 2**53 - 1) | st.text(max_size=5)


@given(st.dictionaries(st.text(max_size=5), _values, max_size=6), st.randoms())
def test_args_count_whatever_the_order_of_their_keys(args: dict[str, Any], rnd: Any) -> None:
    items = list(args.items())
    rnd.shuffle(items)
    one = parsed(insert({"by_args": True}, args=args)).unique_key
    assert one == parsed(insert({"by_args": True}, args=dict(items))).unique_key


def test_by_args_names_the_fields_tagged_unique() -> None:
    def key(args: dict[str, Any], tagged: list[str]) -> str | None:
        return parsed(insert({"by_args": tagged}, args=args)).unique_key

    one = key({"customer_id": "c1", "trace_id": "t1"}, ["customer_id"])
    assert one == key({"customer_id": "c1", "trace_id": "t2"}, ["customer_id"])
    assert one != key({"customer_id": "c2", "trace_id": "t1"}, ["customer_id"])
    # A sub-object's tagged field, by its path; one missing counts as absent.
    nested = key({"customer": {"id": "c1", "name": "n"}}, ["customer.id"])
    assert nested == key({"customer": {"id": "c1", "name": "other"}}, ["customer.id"])
    assert key({"a": 1}, ["a", "b"]) == key({"a": 1, "c": 2}, ["a", "b"])
    assert key({"a": 1}, ["a"]) == key({"a": 1}, ["a", "b"])  # River skips an undefined value


# --- the stories -------------------------------------------------------------------------------


def test_a_duplicate_is_skipped_returning_the_existing_job() -> None:
    story = Story()
    first = story.submit(insert({"by_args": True}), T0)
    again = story.submit(insert({"by_args": True}), T0 + 1)
    assert again.outcome is Outcome.IGNORED and ids(again) == ids(first) and again.error is None


def test_default_states_hold_through_completion_but_not_cancellation() -> None:
    story = Story()
    first = story.submit(insert({"by_args": True}), T0)
    story.event(ids(first), T0 + 1, type="job.started")
    story.event(ids(first), T0 + 2, type="job.completed")
    assert story.submit(insert({"by_args": True}), T0 + DAY).outcome is Outcome.IGNORED
    other = Story()
    cancelled = other.submit(insert({"by_args": True}), T0)
    other.event(ids(cancelled), T0 + 1, type="job.cancelled")
    assert other.submit(insert({"by_args": True}), T0 + 2).outcome is Outcome.ACCEPTED


def test_the_holder_s_states_decide_not_the_newcomer_s() -> None:
    story = Story()
    with_cancelled = {"by_args": True, "by_state": REQUIRED + ["retryable", "cancelled"]}
    first = story.submit(insert(with_cancelled), T0)
    story.event(ids(first), T0 + 1, type="job.cancelled")
    assert story.submit(insert({"by_args": True}), T0 + 2).outcome is Outcome.IGNORED
    other = Story()
    plain = other.submit(insert({"by_args": True}), T0)
    other.event(ids(plain), T0 + 1, type="job.cancelled")
    assert other.submit(insert(with_cancelled), T0 + 2).outcome is Outcome.ACCEPTED


def test_by_period_is_unique_within_a_bucket_of_the_insert_time() -> None:
    story = Story()
    hour = {"by_period": 3600}
    start = T0 - T0 % HOUR
    first = story.submit(insert(hour), start + 30 * MINUTE)
    assert story.submit(insert(hour), start + HOUR - 1).outcome is Outcome.IGNORED
    second = story.submit(insert(hour), start + HOUR)
    assert second.outcome is Outcome.ACCEPTED
    assert story.submit(insert(hour), start + 2 * HOUR - 1).outcome is Outcome.IGNORED
    assert ids(first) != ids(second)


def test_by_period_buckets_by_the_scheduled_time_when_there_is_one() -> None:
    story = Story()
    hour = {"by_period": 3600}
    start = T0 - T0 % HOUR
    later = format_rfc3339(start + 5 * HOUR + 10 * MINUTE)
    first = story.submit(insert(hour, scheduled_at=later), start)
    assert story.submit(insert(hour), start + 1).outcome is Outcome.ACCEPTED  # this hour's
    again = story.submit(insert(hour, scheduled_at=format_rfc3339(start + 5 * HOUR)), start + 2)
    assert again.outcome is Outcome.IGNORED and ids(again) == ids(first)


def test_buckets_of_different_periods_meet_when_their_starts_are_equal() -> None:
    # River keys by the bucket's start alone: an hourly and a daily job starting at midnight
    # share a key.
    story = Story()
    midnight = T0 - T0 % DAY
    story.submit(insert({"by_period": 86_400}), midnight + 5 * HOUR)
    assert story.submit(insert({"by_period": 3600}), midnight + 30 * MINUTE).outcome is (
        Outcome.IGNORED
    )
    assert story.submit(insert({"by_period": 3600}), midnight + HOUR).outcome is Outcome.ACCEPTED


def test_the_decision_records_the_bucket_it_was_decided_in() -> None:
    decision = decide((), parsed(insert({"by_period": 3600})), T0 + 1, seed=b"s")
    assert decision.policy is not None and decision.policy.bucket_start == T0 - T0 % HOUR
    assert decision.policy.to_dict()["bucket_start"] == T0 - T0 % HOUR
    assert decision.holder is not None and decision.holder.since == T0 - T0 % HOUR


# --- refusals ---------------------------------------------------------------------------------


def test_by_state_without_retryable_is_refused_by_name() -> None:
    message = refused(insert({"by_args": True, "by_state": REQUIRED}), "unsupported_option")
    assert message.startswith("unique_opts.by_state without retryable is not supported yet: ")


def test_a_pending_job_is_refused_by_name() -> None:
    message = refused(insert({"by_args": True}, pending=True), "unsupported_option")
    assert message.startswith("pending is not supported yet: ")


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"dialect": "river", "args": {}}, "kind is required"),
        (insert(args=[1]), "args must be an object"),
        (insert({"by_args": True, "by_kind": True}), "unique_opts.by_kind is not a River"),
        (insert({"by_period": 0.5}), "at least 1"),
        (insert({"by_period": 1.5}), "a whole number of seconds"),
        (insert({"by_period": -60}), "a whole number of seconds"),
        (insert({"by_queue": "yes"}), "unique_opts.by_queue must be true or false"),
        (insert({"by_args": "yes"}), "unique_opts.by_args must be true, false or the names"),
        (insert({"by_args": []}), "must name at least one field"),
        (insert({"by_args": ["a..b"]}), "must name at least one field"),
        (insert({"by_state": ["available", "pending", "running"]}),
         "must contain all required states, missing: scheduled"),
        (insert({"by_state": REQUIRED + ["active"]}), 'River calls it "running"'),
        (insert({"by_state": []}), "missing: available, pending, running, scheduled"),
        (insert(priority=5), "priority must be an integer from 1 to 4"),
        ({**insert(), "unique_opts": []}, "unique_opts must be an object"),
    ],
)  # fmt: skip
def test_bad_options_are_refused_as_river_refuses_them(raw: dict[str, Any], message: str) -> None:
    assert message in refused(raw)
