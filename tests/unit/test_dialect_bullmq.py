"""BullMQ (`"bullmq"`): Queue.add(name, data, opts), every option as a table or a story.

The stories follow BullMQ's own deduplication guide (docs/gitbook/guide/jobs/
deduplication.md) and its Lua scripts: who holds a deduplication id or a job id,
in which states, for how long.
"""

from __future__ import annotations

from typing import Any

import pytest

from gateway.core import Judge, OnConflict, Outcome, State, parse_request
from gateway.core.errors import GatewayError
from gateway.core.holder import StatesKind, StatesRule
from gateway.core.times import format_rfc3339
from tests.unit.test_dialects import HOUR, T0, S, Story, ids, parsed

TERMINAL = {State.COMPLETED, State.CANCELLED, State.DISCARDED}


def add(dedup: dict[str, Any] | None = None, **opts: Any) -> dict[str, Any]:
    """myQueue.add('house', {color: 'white'}, opts) on the queue paint."""
    if dedup is not None:
        opts["deduplication"] = dedup
    return {"dialect": "bullmq", "queue": "paint", "name": "house",
            "data": {"color": "white"}, "opts": opts}  # fmt: skip


def unsupported(raw: dict[str, Any]) -> str:
    error = parse_request(raw)
    assert isinstance(error, GatewayError), error
    assert error.code == "unsupported_option", error
    assert "is not supported yet" in error.message
    return error.message


def invalid(raw: dict[str, Any]) -> str:
    error = parse_request(raw)
    assert isinstance(error, GatewayError), error
    assert error.code == "invalid_request", error
    return error.message


# --- the mapping -------------------------------------------------------------------------------


def test_the_job_fields_map_onto_the_job() -> None:
    request = parsed(add(priority=3, attempts=5))
    env = request.envelope
    assert (env.type, env.queue, env.args) == ("house", "paint", {"color": "white"})
    assert (env.priority, env.max_attempts, env.scheduled_in) == (3, 5, None)
    assert request.policy is None and request.unique_key is None  # no jobId, no deduplication
    assert env.raw["opts"] == {"priority": 3, "attempts": 5}  # opts travel with the job
    assert "name" not in env.raw and "data" not in env.raw
    assert parsed(add()).envelope.max_attempts == 1  # BullMQ's default: one attempt
    assert parsed(add(attempts=0)).envelope.max_attempts == 1


@pytest.mark.parametrize(
    ("dedup", "states", "lock_ms"),
    [
        ({"id": "customValue"}, frozenset(State) - TERMINAL, None),  # Simple mode
        ({"id": "customValue", "ttl": 0}, frozenset(State) - TERMINAL, None),
        ({"id": "customValue", "ttl": 5000}, frozenset(State) - {State.CANCELLED}, 5000),
        ({"id": "customValue", "extend": False, "replace": False}, frozenset(State) - TERMINAL,
         None),
    ],
)  # fmt: skip
def test_deduplication_maps_onto_a_holder_rule(
    dedup: dict[str, Any], states: frozenset[State], lock_ms: int | None
) -> None:
    request = parsed(add(dedup))
    assert request.holder_rule == StatesRule(StatesKind.BULLMQ, "deduplication", states, lock_ms)
    policy = request.policy
    assert policy is not None
    assert (policy.judge, policy.on_conflict, policy.states) == (
        Judge.HOLDER, OnConflict.IGNORE, states,
    )  # fmt: skip
    assert request.dialect == "bullmq" and request.duplicate_code == "duplicate"


@pytest.mark.parametrize(
    ("opts", "states"),
    [
        ({}, frozenset(State) - {State.CANCELLED}),
        ({"removeOnComplete": True}, frozenset(State) - {State.CANCELLED, State.COMPLETED}),
        ({"removeOnFail": True}, frozenset(State) - {State.CANCELLED, State.DISCARDED}),
        ({"removeOnComplete": False, "removeOnFail": False}, frozenset(State) - {State.CANCELLED}),
    ],
)
def test_a_job_id_is_held_while_bullmq_keeps_the_job(
    opts: dict[str, Any], states: frozenset[State]
) -> None:
    request = parsed(add(jobId="house-42", **opts))
    assert request.holder_rule == StatesRule(StatesKind.BULLMQ, "jobId", states)


def test_keys_are_per_queue_and_per_kind_of_id() -> None:
    def key(raw: dict[str, Any]) -> str | None:
        return parsed(raw).unique_key

    dedup = key(add({"id": "x"}))
    assert dedup == key(add({"id": "x", "ttl": 10}))  # the ttl is the holder's, not the key's
    assert dedup == key({**add({"id": "x"}), "name": "other", "data": {"n": 1}})
    assert dedup != key({**add({"id": "x"}), "queue": "other"})
    assert dedup != key(add({"id": "y"}))
    assert dedup != key(add(jobId="x"))  # a job id and a deduplication id never meet
    assert key(add(jobId="x")) != key({**add(jobId="x"), "queue": "other"})


# --- the stories -------------------------------------------------------------------------------


def test_simple_mode_holds_until_the_job_completes() -> None:
    story = Story()
    first = story.submit(add({"id": "customValue"}), T0)
    again = story.submit(add({"id": "customValue"}), T0 + HOUR)
    assert again.outcome is Outcome.IGNORED and ids(again) == ids(first)
    story.event(ids(first), T0 + HOUR + 1, type="job.started")
    assert story.submit(add({"id": "customValue"}), T0 + HOUR + 2).outcome is Outcome.IGNORED
    story.event(ids(first), T0 + HOUR + 3, type="job.completed")
    assert story.submit(add({"id": "customValue"}), T0 + HOUR + 4).outcome is Outcome.ACCEPTED


@pytest.mark.parametrize("end", ["job.discarded", "job.cancelled"])
def test_simple_mode_ends_when_the_job_fails_or_is_removed(end: str) -> None:
    story = Story()
    first = story.submit(add({"id": "customValue"}), T0)
    story.event(ids(first), T0 + 1, type=end)
    assert story.submit(add({"id": "customValue"}), T0 + 2).outcome is Outcome.ACCEPTED


def test_simple_mode_a_retrying_job_keeps_the_id() -> None:
    story = Story()
    first = story.submit(add({"id": "customValue"}, attempts=3), T0)
    story.event(ids(first), T0 + 1, type="job.started")
    story.event(ids(first), T0 + 2, type="job.failed", attempt=1)
    assert story.state_of(ids(first)) is State.RETRYABLE
    assert story.submit(add({"id": "customValue"}), T0 + 3).outcome is Outcome.IGNORED
    # With attempts 1 (BullMQ's default) the first failure is final: the id is free.
    once = Story()
    only = once.submit(add({"id": "customValue"}), T0)
    once.event(ids(only), T0 + 1, type="job.started")
    once.event(ids(only), T0 + 2, type="job.failed", attempt=1)
    assert once.state_of(ids(only)) is None  # finally failed and let go: its entry is dropped
    assert once.submit(add({"id": "customValue"}), T0 + 3).outcome is Outcome.ACCEPTED


def test_throttle_mode_ignores_for_the_ttl_whatever_the_job_does() -> None:
    story = Story()
    first = story.submit(add({"id": "customValue", "ttl": 5000}), T0)
    story.event(ids(first), T0 + 1, type="job.started")
    story.event(ids(first), T0 + 2, type="job.completed")  # done; the key keeps its TTL
    again = story.submit(add({"id": "customValue", "ttl": 5000}), T0 + 4999)
    assert again.outcome is Outcome.IGNORED and ids(again) == ids(first)
    assert story.submit(add({"id": "customValue", "ttl": 5000}), T0 + 5 * S).outcome is (
        Outcome.ACCEPTED
    )


def test_throttle_mode_ends_when_the_job_is_removed() -> None:
    story = Story()
    first = story.submit(add({"id": "customValue", "ttl": 5000}), T0)
    story.event(ids(first), T0 + 1, type="job.cancelled")
    assert story.submit(add({"id": "customValue", "ttl": 5000}), T0 + 2).outcome is (
        Outcome.ACCEPTED
    )


def test_the_holder_s_mode_rules_not_the_newcomer_s() -> None:
    # Simple mode first: a newcomer's ttl does not shorten the holder's hold.
    story = Story()
    first = story.submit(add({"id": "k"}), T0)
    assert story.submit(add({"id": "k", "ttl": 10}), T0 + HOUR).outcome is Outcome.IGNORED
    story.event(ids(first), T0 + HOUR + 1, type="job.completed")
    # Throttle next: its ttl holds even against a simple-mode newcomer, job done or not.
    second = story.submit(add({"id": "k", "ttl": 5000}), T0 + HOUR + 2)
    assert second.outcome is Outcome.ACCEPTED
    story.event(ids(second), T0 + HOUR + 3, type="job.completed")
    assert story.submit(add({"id": "k"}), T0 + HOUR + 4).outcome is Outcome.IGNORED
    assert story.submit(add({"id": "k"}), T0 + HOUR + 2 + 5000).outcome is Outcome.ACCEPTED


def test_a_delay_schedules_the_job_and_the_ttl_counts_from_the_add() -> None:
    story = Story()
    first = story.submit(add({"id": "k", "ttl": 5000}, delay=HOUR), T0)
    assert first.job is not None and first.job["state"] == "scheduled"
    assert first.job["scheduled_at"] == format_rfc3339(T0 + HOUR)
    assert story.submit(add({"id": "k"}), T0 + 4999).outcome is Outcome.IGNORED
    assert story.submit(add({"id": "k"}), T0 + 5000).outcome is Outcome.ACCEPTED


def test_a_job_id_is_added_once_while_the_job_is_kept() -> None:
    story = Story()
    first = story.submit(add(jobId="house-42"), T0)
    story.event(ids(first), T0 + 1, type="job.completed")
    again = story.submit(add(jobId="house-42"), T0 + 6 * 24 * HOUR)  # kept: completed jobs stay
    assert again.outcome is Outcome.IGNORED and ids(again) == ids(first)
    assert story.submit(add(jobId="house-43"), T0 + 2).outcome is Outcome.ACCEPTED


def test_a_job_id_removed_on_complete_is_free_once_the_job_completes() -> None:
    story = Story()
    first = story.submit(add(jobId="house-42", removeOnComplete=True), T0)
    assert story.submit(add(jobId="house-42"), T0 + 1).outcome is Outcome.IGNORED
    story.event(ids(first), T0 + 2, type="job.completed")
    assert story.submit(add(jobId="house-42"), T0 + 3).outcome is Outcome.ACCEPTED


def test_a_removed_job_frees_its_id() -> None:
    story = Story()
    first = story.submit(add(jobId="house-42"), T0)
    story.event(ids(first), T0 + 1, type="job.cancelled")
    assert story.submit(add(jobId="house-42"), T0 + 2).outcome is Outcome.ACCEPTED


# --- refusals ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "option"),
    [
        (add({"id": "k"}, jobId="j-1"), "opts.jobId with opts.deduplication"),
        (add(jobId="j-1", removeOnComplete=100), "opts.removeOnComplete"),
        (add(jobId="j-1", removeOnFail={"age": 3600}), "opts.removeOnFail"),
    ],
)  # fmt: skip
def test_options_the_gateway_lacks_are_refused_by_name(raw: dict[str, Any], option: str) -> None:
    assert unsupported(raw).startswith(option)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"dialect": "bullmq", "data": {}}, "name is required"),
        ({**add(), "data": 3}, "data must be a JSON object or array"),
        ({**add(), "opts": []}, "opts must be an object"),
        (add(debounce={"id": "k"}), "opts.debounce has been removed"),
        (add({"ttl": 5}), "opts.deduplication.id must be provided"),
        (add({"id": ""}), "opts.deduplication.id must be provided"),
        (add({"id": "k", "delay": 5}), "opts.deduplication.delay is not a BullMQ"),
        (add({"id": "k", "ttl": -1}), "opts.deduplication.ttl must be"),
        (add({"id": "k", "ttl": 1.5}), "opts.deduplication.ttl must be"),
        (add({"id": "k", "extend": "yes"}), "opts.deduplication.extend must be true or false"),
        (add({"id": "k", "replace": 1}), "opts.deduplication.replace must be true or false"),
        (add({"id": "k"}, parent={"id": "p", "queue": "q"}), "cannot be used together"),
        (add(jobId="42"), "cannot be integers"),
        (add(jobId="a:b"), "cannot contain :"),
        (add(jobId=""), "opts.jobId must be a non-empty string"),
        (add(priority=1.5), "should not be float"),
        (add(priority=2**21), "should be between 0 and 2097151"),
        (add(delay=-1), "opts.delay must be"),
        (add(attempts="3"), "opts.attempts must be an integer"),
    ],
)
def test_bad_options_are_refused_as_bullmq_refuses_them(raw: dict[str, Any], message: str) -> None:
    assert message in invalid(raw)


def test_job_ids_bullmq_accepts() -> None:
    for job_id in ("house-42", "012", "12abc", "-0", "repeat:key:1"):
        assert parsed(add(jobId=job_id)).unique_key is not None


# --- debounce mode (deduplication extend and replace) -------------------------------------------


def debounced(i: int, **dedup: Any) -> dict[str, Any]:
    """The guide's debounce mode: add('house1', {color: `white ${i}`}, {deduplication:
    {id, ttl: 5000, extend, replace}, delay: 5000})."""
    raw = add({"id": "customValue", "ttl": 5000, **dedup}, delay=5000)
    return {**raw, "data": {"color": f"white {i}"}}


def test_the_guide_s_debounce_mode_keeps_one_job_with_the_last_data() -> None:
    story = Story()
    first = story.submit(debounced(1, extend=True, replace=True), T0)
    assert first.outcome is Outcome.ACCEPTED
    for i in range(2, 11):  # nine more within the delay: each replaces the delayed job
        later = story.submit(debounced(i, extend=True, replace=True), T0 + i * 100)
        assert later.outcome is Outcome.UPDATED and ids(later) == ids(first)
        assert later.debounced is not None and later.debounced.lock_restarted
    [entry] = story.entries[first.unique_key or ""]
    assert entry.scheduled_at == T0 + 1000 + 5000  # the last add's delay, from the last add
    assert later.job is not None and later.job["args"] == {"color": "white 10"}
    assert entry.holder is not None and entry.holder.since == T0 + 1000  # extend: ttl restarted


def test_replace_without_extend_keeps_the_ttl_so_a_later_add_makes_a_new_job() -> None:
    story = Story()
    first = story.submit(debounced(1, replace=True), T0)
    moved = story.submit(debounced(2, replace=True), T0 + 4 * S)
    assert moved.outcome is Outcome.UPDATED and moved.job is not None
    assert moved.job["scheduled_at"] == format_rfc3339(T0 + 9 * S)
    # The ttl counts from the first add (BullMQ's KEEPTTL): at 5 s the id is free again.
    later = story.submit(debounced(3, replace=True), T0 + 5 * S)
    assert later.outcome is Outcome.ACCEPTED and ids(later) != ids(first)


def test_replace_moves_only_a_delayed_job_a_waiting_or_active_one_is_a_duplicate() -> None:
    story = Story()
    first = story.submit(add({"id": "k", "replace": True}, delay=1000), T0)
    # Its delay passed: BullMQ moved it to wait; a duplicate is ignored, the job untouched.
    waiting = story.submit(add({"id": "k", "replace": True}, delay=1000), T0 + 2 * S)
    assert waiting.outcome is Outcome.IGNORED and waiting.debounced is None
    story.event(ids(first), T0 + 3 * S, type="job.started")
    active = story.submit(add({"id": "k", "replace": True}, delay=1000), T0 + 4 * S)
    assert active.outcome is Outcome.IGNORED and ids(active) == ids(first)


def test_extend_alone_restarts_the_ttl_of_the_holder_on_every_duplicate() -> None:
    story = Story()
    first = story.submit(add({"id": "k", "ttl": 5000, "extend": True}), T0)
    for at in (4 * S, 8 * S, 12 * S):  # each within 5 s of the one before
        again = story.submit(add({"id": "k", "ttl": 5000, "extend": True}), T0 + at)
        assert again.outcome is Outcome.IGNORED and ids(again) == ids(first)
        assert again.debounced is not None and again.debounced.run_at is None
    after = story.submit(add({"id": "k", "ttl": 5000, "extend": True}), T0 + 17 * S)
    assert after.outcome is Outcome.ACCEPTED
    # Without extend the ttl counts from the add: the same adds make a new job at 5 s.
    story = Story()
    story.submit(add({"id": "k", "ttl": 5000}), T0)
    assert story.submit(add({"id": "k", "ttl": 5000}), T0 + 4 * S).outcome is Outcome.IGNORED
    assert story.submit(add({"id": "k", "ttl": 5000}), T0 + 8 * S).outcome is Outcome.ACCEPTED
