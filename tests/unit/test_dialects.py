"""Dialects: every example of the Oban, Zizq and Faktory pages as a table or a story.

Lifecycle steps are job-state events applied by the core (`core.on_key`, through
tests/support.apply_event), as the processor applies them.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.core import (
    Decision,
    Entry,
    EventOutcome,
    GatewayError,
    Judge,
    OnConflict,
    Outcome,
    PeriodFrom,
    Request,
    State,
    audit_fields,
    decide,
    fingerprint,
    parse_event,
    parse_policy,
    parse_request,
)
from gateway.core.dialects import oban
from gateway.core.times import format_rfc3339
from tests.support import KeyEvent, apply_event

T0 = 1_770_000_000_000
S = 1000
MINUTE = 60 * S
HOUR = 60 * MINUTE
DAY = 24 * HOUR


def parsed(raw: dict[str, Any]) -> Request:
    request = parse_request(raw)
    assert isinstance(request, Request), request
    return request


def refused(raw: dict[str, Any]) -> str:
    error = parse_request(raw)
    assert isinstance(error, GatewayError), error
    assert error.code == "invalid_request"
    return error.message


class Story:
    """One key's entries through requests and job events, as the processor keeps them."""

    def __init__(self) -> None:
        self.entries: dict[str, tuple[Entry, ...]] = {}
        self.keys: dict[str, str] = {}  # job id -> key
        self.count = 0

    def submit(self, raw: dict[str, Any], now: int) -> Decision:
        self.count += 1
        request = parsed(raw)
        key = request.unique_key
        decision = decide(self.entries.get(key or "", ()), request, now, seed=b"%d" % self.count)
        if key is not None:
            self.entries[key] = decision.entries
            if decision.job is not None:
                self.keys[str(decision.job["id"])] = key
        return decision

    def event(self, job_id: str, now: int, **fields: Any) -> None:
        """Apply one event. A step the transition table allows only from active (complete,
        retry, discard) is preceded by a worker taking the job, as it would be."""
        result = self._apply(job_id, now, fields)
        if result.outcome is EventOutcome.REFUSED and self.state_of(job_id) is not State.ACTIVE:
            self._apply(job_id, now, {"type": "job.started"})
            result = self._apply(job_id, now, fields)
        assert result.outcome is not EventOutcome.REFUSED, result

    def _apply(self, job_id: str, now: int, fields: dict[str, Any]) -> KeyEvent:
        key = self.keys[job_id]
        event = parse_event({"job_id": job_id, "unique_key": key, **fields})
        assert not isinstance(event, GatewayError), event
        result = apply_event(self.entries[key], event, now)
        self.entries[key] = result.entries
        return result

    def state_of(self, job_id: str) -> State | None:
        entries = self.entries.get(self.keys[job_id], ())
        return next((e.state for e in entries if e.job_id == job_id), None)


def ids(decision: Decision) -> str:
    """The job the caller gets back: the new one, or the existing one."""
    job_id = audit_fields(decision)["job_id"]
    assert isinstance(job_id, str)
    return job_id


# --- the request shapes ------------------------------------------------------------------------


def test_without_a_dialect_field_a_request_is_ojs() -> None:
    request = parsed({"type": "email.send", "args": [], "unique": {}})
    assert request.dialect == "ojs"
    assert parsed({"dialect": "ojs", "type": "email.send", "args": []}).dialect == "ojs"


def test_an_unknown_dialect_is_refused_naming_the_known_ones() -> None:
    message = refused({"dialect": "resque", "class": "X"})
    assert message.startswith(
        'dialect must be one of "ojs", "oban", "oban-py", "zizq", "faktory", "bullmq", '
        '"sidekiq", "river"'
    )
    assert "dialect must be one of" in refused({"dialect": 3})


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"dialect": "oban", "args": {}}, "worker is required"),
        ({"dialect": "oban", "worker": "W", "args": [1]}, "args must be an object"),
        (
            {"dialect": "oban", "worker": "W", "priority": 10},
            "priority must be an integer from 0 to 9",
        ),
        ({"dialect": "oban", "worker": "W", "tags": "a"}, "tags must be an array of strings"),
        (
            {"dialect": "oban", "worker": "W", "unique": "yes"},
            "unique must be true, false or an object",
        ),
        (
            {"dialect": "oban", "worker": "W", "unique": {"group": "all"}},
            "unique.group is not an option of oban",
        ),
        (
            {"dialect": "oban-py", "worker": "W", "unique": {"states": ["available"]}},
            "unique.states is not an option of oban-py",
        ),
        (
            {"dialect": "oban-py", "worker": "W", "unique": {"timestamp": "scheduled_at"}},
            "unique.timestamp is not an option of oban-py",
        ),
        (
            {"dialect": "oban", "worker": "W", "unique": {"fields": ["type"]}},
            'unique.fields has "type"',
        ),
        (
            {"dialect": "oban", "worker": "W", "unique": {"fields": []}},
            "unique.fields must not be empty",
        ),
        (
            {"dialect": "oban", "worker": "W", "unique": {"fields": ["worker"], "keys": ["a"]}},
            "unique.keys picks keys of args or meta",
        ),
        (
            {"dialect": "oban", "worker": "W", "unique": {"states": ["active"]}},
            'Oban calls it "executing"',
        ),
        (
            {"dialect": "oban", "worker": "W", "unique": {"states": []}},
            "unique.states must not be empty",
        ),
        (
            {"dialect": "oban", "worker": "W", "unique": {"period": 0}},
            "unique.period must be a positive",
        ),
        (
            {"dialect": "oban", "worker": "W", "unique": {"period": None}},
            "unique.period must be seconds",
        ),
        (
            {"dialect": "oban", "worker": "W", "unique": {"period": [2, "fortnights"]}},
            "unique.period unit",
        ),
        (
            {"dialect": "oban", "worker": "W", "unique": {"timestamp": "updated_at"}},
            "unique.timestamp must be",
        ),
        (
            {"dialect": "oban-py", "worker": "W", "unique": {"group": "done"}},
            "unique.group must be one of",
        ),
        (
            {"dialect": "oban-py", "worker": "W", "unique": {"period": "PT1H"}},
            "unique.period must be a positive",
        ),
        (
            {"dialect": "oban", "worker": "W", "replace": {"scheduled": ["args"]}},
            "replace applies to unique jobs only",
        ),
        (
            {"dialect": "oban", "worker": "W", "unique": {"replace": {"scheduled": ["args"]}}},
            "replace is a job field in Oban, not a unique option: send it beside unique",
        ),
        (
            {"dialect": "oban-py", "worker": "W", "unique": {"replace": {"scheduled": ["args"]}}},
            "replace is a job field in Oban, not a unique option: send it beside unique",
        ),
        (
            {"dialect": "oban", "worker": "W", "unique": True, "replace": {"scheduled": ["state"]}},
            'replace.scheduled has "state"',
        ),
        (
            {"dialect": "oban", "worker": "W", "unique": True, "replace": {"running": ["args"]}},
            'replace has "running"',
        ),
        (
            {"dialect": "oban", "worker": "W", "unique": True, "replace": []},
            "replace must be an object",
        ),
        ({"dialect": "zizq", "payload": {}}, "type is required"),
        ({"dialect": "zizq", "type": "t", "payload": 3}, "payload must be a JSON object or array"),
        ({"dialect": "zizq", "type": "t", "uniqueKey": ""}, "uniqueKey must be a non-empty string"),
        (
            {"dialect": "zizq", "type": "t", "uniqueWhile": "active"},
            "uniqueWhile needs a uniqueKey",
        ),
        (
            {"dialect": "zizq", "type": "t", "uniqueKey": "k", "uniqueWhile": "always"},
            "uniqueWhile must be one of",
        ),
        ({"dialect": "faktory", "args": []}, "jobtype is required"),
        ({"dialect": "faktory", "jobtype": "T", "args": {"a": 1}}, "args must be an array"),
        ({"dialect": "faktory", "jobtype": "T", "custom": []}, "custom must be an object"),
        (
            {"dialect": "faktory", "jobtype": "T", "custom": {"unique_for": -1}},
            "custom.unique_for must be a positive",
        ),
        (
            {"dialect": "faktory", "jobtype": "T", "custom": {"unique_for": "600"}},
            "custom.unique_for must be a positive",
        ),
        (
            {"dialect": "faktory", "jobtype": "T", "custom": {"unique_for": float("inf")}},
            "custom.unique_for is inf, which is not a JSON number",
        ),
        (
            {"dialect": "faktory", "jobtype": "T", "custom": {"unique_for": 3_153_600_001}},
            "custom.unique_for must be from 0.001 s to 36500 days",
        ),
        (
            {
                "dialect": "faktory",
                "jobtype": "T",
                "custom": {"unique_for": 6, "unique_until": "end"},
            },
            "custom.unique_until must be",
        ),
        (
            {"dialect": "faktory", "jobtype": "T", "at": "tomorrow"},
            "at must be an RFC 3339 date-time",
        ),
    ],
)
def test_bad_dialect_requests_are_refused_with_a_message_naming_the_fix(
    raw: dict[str, Any], message: str
) -> None:
    assert message in refused(raw)


def test_oban_options_map_onto_the_canonical_policy() -> None:
    plain = parsed({"dialect": "oban", "worker": "W", "args": {"a": 1}, "unique": True})
    assert plain.policy is not None and plain.stores_job and plain.holder_rule is None
    assert plain.policy.period_ms == 60_000
    assert plain.policy.states == oban.GROUPS["successful"]
    assert State.CANCELLED not in plain.policy.states
    assert plain.policy.on_conflict is OnConflict.IGNORE
    assert plain.policy.period_from is PeriodFrom.CREATED_AT
    assert [str(k) for k in plain.policy.keys] == ["type", "queue", "args"]
    assert plain.envelope.max_attempts == 20 and plain.envelope.type == "W"

    infinite = parsed({"dialect": "oban", "worker": "W", "unique": {"period": "infinity"}})
    assert infinite.policy is not None and infinite.policy.period_ms is None
    for period, ms in [
        (30, 30_000),
        ([2, "minutes"], 120_000),
        ([1, "hour"], HOUR),
        ([3, "days"], 3 * DAY),
        ([1, "week"], 7 * DAY),
        ([5, "seconds"], 5000),
    ]:
        p = parsed({"dialect": "oban", "worker": "W", "unique": {"period": period}}).policy
        assert p is not None and p.period_ms == ms, period

    py = parsed({"dialect": "oban-py", "worker": "W", "unique": True}).policy
    assert py is not None
    assert py.period_ms is None and py.period_from is PeriodFrom.SCHEDULED_AT
    assert py.states == frozenset(State)
    assert parsed({"dialect": "oban-py", "worker": "W", "unique": {"period": None}}).policy == py


def test_oban_py_groups_map_to_states() -> None:
    def states(group: str) -> set[str]:
        raw = {"dialect": "oban-py", "worker": "W", "unique": {"group": group}}
        policy = parsed(raw).policy
        assert policy is not None
        return {str(s) for s in policy.states}

    live = {"scheduled", "available", "pending", "active", "retryable"}
    assert states("all") == live | {"completed", "cancelled", "discarded"}
    assert states("incomplete") == live
    assert states("scheduled") == {"scheduled"}
    assert states("successful") == live | {"completed"}


def test_oban_executing_is_ojs_active_and_replace_maps_worker_to_type() -> None:
    raw = {
        "dialect": "oban",
        "worker": "W",
        "unique": {"states": ["executing", "scheduled"]},
        "replace": {"executing": ["args"], "scheduled": ["worker", "priority", "max_attempts"]},
    }
    policy = parsed(raw).policy
    assert policy is not None
    assert policy.states == {State.ACTIVE, State.SCHEDULED}
    assert policy.on_conflict is OnConflict.UPDATE
    assert policy.fields_to_update(State.ACTIVE) == ("args",)
    assert policy.fields_to_update(State.SCHEDULED) == ("max_attempts", "priority", "type")
    assert policy.fields_to_update(State.AVAILABLE) == ()


@pytest.mark.parametrize("dialect", ["oban", "oban-py"])
def test_replace_inside_unique_is_refused_saying_where_it_goes(dialect: str) -> None:
    job = {"dialect": dialect, "worker": "W", "args": {"a": 1}}
    replace = {"scheduled": ["scheduled_at"]}
    message = refused({**job, "unique": {"period": 60, "replace": replace}})
    assert message.startswith("replace is a job field in Oban, not a unique option")
    # The example the message gives is a request that works, with the same replace.
    example = orjson.loads(message.split("e.g. ", 1)[1])
    assert example == {"unique": {"period": 60}, "replace": replace}
    policy = parsed({**job, **example}).policy
    assert policy is not None and policy.on_conflict is OnConflict.UPDATE
    assert policy.fields_to_update(State.SCHEDULED) == ("scheduled_at",)


def test_the_canonical_policy_of_a_dialect_round_trips_through_the_audit_record() -> None:
    from gateway.core import UniquePolicy

    raws: list[dict[str, Any]] = [
        {
            "dialect": "oban",
            "worker": "W",
            "args": {"url": "u"},
            "meta": {"url": "m"},
            "unique": {"fields": ["args", "meta"], "keys": ["url"], "timestamp": "scheduled_at"},
            "replace": {"scheduled": ["scheduled_at"]},
        },
        {"dialect": "oban-py", "worker": "W", "meta": {"a": 1}, "unique": {"fields": ["meta"]}},
        {"dialect": "zizq", "type": "t", "uniqueKey": "k", "uniqueWhile": "exists"},
        {"dialect": "faktory", "jobtype": "T", "args": [1], "custom": {"unique_for": 1.5}},
    ]
    for raw in raws:
        policy = parsed(raw).policy
        assert policy is not None
        assert UniquePolicy.from_dict(policy.to_dict()) == policy, raw


def test_ojs_refuses_the_canonical_strategy_update() -> None:
    error = parse_policy({"on_conflict": "update"})
    assert isinstance(error, GatewayError)
    assert '"reject", "replace", "replace_except_schedule", "ignore"' in error.message


# --- fingerprint spaces -----------------------------------------------------------------------


def test_faktory_shares_ojs_fingerprint_space() -> None:
    faktory = parsed(
        {
            "dialect": "faktory",
            "jobtype": "sync",
            "args": [1, 2],
            "queue": "q",
            "custom": {"unique_for": 600},
        }
    )
    ojs = parsed(
        {
            "type": "sync",
            "args": [1, 2],
            "queue": "q",
            "unique": {"keys": ["type", "queue", "args"]},
        }
    )
    assert faktory.unique_key == ojs.unique_key
    story = Story()
    first = story.submit(
        {
            "type": "sync",
            "args": [1, 2],
            "queue": "q",
            "unique": {"keys": ["type", "queue", "args"]},
        },
        T0,
    )
    second = story.submit(
        {
            "dialect": "faktory",
            "jobtype": "sync",
            "args": [1, 2],
            "queue": "q",
            "custom": {"unique_for": 600},
        },
        T0 + 1,
    )
    assert second.outcome is Outcome.REJECTED and second.existing is not None
    assert second.existing.job_id == ids(first)
    assert second.error is not None and second.error.code == "NOTUNIQUE"
    # And the other way: an OJS request meets the Faktory job's lock.
    story = Story()
    story.submit(
        {
            "dialect": "faktory",
            "jobtype": "sync",
            "args": [1, 2],
            "queue": "q",
            "custom": {"unique_for": 600},
        },
        T0,
    )
    again = story.submit(
        {
            "type": "sync",
            "args": [1, 2],
            "queue": "q",
            "unique": {"keys": ["type", "queue", "args"]},
        },
        T0 + 1,
    )
    assert again.outcome is Outcome.REJECTED and again.error is not None
    assert again.error.code == "duplicate"
    # Once the lock expired, the OJS newcomer is free even though the job is live.
    later = story.submit(
        {
            "type": "sync",
            "args": [1, 2],
            "queue": "q",
            "unique": {"keys": ["type", "queue", "args"]},
        },
        T0 + 600 * S,
    )
    assert later.outcome is Outcome.ACCEPTED


def test_oban_and_zizq_have_fingerprint_spaces_of_their_own() -> None:
    # One job type valid in every dialect (OJS types are lowercase segments).
    ojs = parsed({"type": "w", "args": {"a": 1}, "unique": {"keys": ["type", "queue", "args"]}})
    elixir = parsed({"dialect": "oban", "worker": "w", "args": {"a": 1}, "unique": True})
    python = parsed({"dialect": "oban-py", "worker": "w", "args": {"a": 1}, "unique": True})
    assert elixir.unique_key == python.unique_key != ojs.unique_key
    zizq = parsed({"dialect": "zizq", "type": "w", "payload": {"a": 1}, "uniqueKey": "w"})
    assert zizq.unique_key not in (ojs.unique_key, elixir.unique_key)
    for request in (elixir, zizq):
        assert request.unique_key is not None and len(request.unique_key) == 64
    story = Story()
    story.submit({"type": "w", "args": {"a": 1}, "unique": {"keys": ["type", "queue", "args"]}}, T0)
    assert (
        story.submit(
            {"dialect": "oban", "worker": "w", "args": {"a": 1}, "unique": True}, T0 + 1
        ).outcome
        is Outcome.ACCEPTED
    )


def test_oban_keys_pick_from_args_and_meta_and_tolerate_missing_names() -> None:
    def key(**fields: Any) -> str | None:
        return parsed({"dialect": "oban", "worker": "W", **fields}).unique_key

    unique = {"fields": ["worker", "args", "meta"], "keys": ["url"]}
    a = key(args={"url": "u", "user_id": 1}, meta={"trace": 1}, unique=unique)
    b = key(args={"user_id": 2, "url": "u"}, meta={"trace": 2}, unique=unique)
    c = key(args={"url": "v"}, unique=unique)
    assert a == b != c
    whole_meta = {"fields": ["worker", "meta"]}
    assert key(meta={"t": 1}, unique=whole_meta) != key(meta={"t": 2}, unique=whole_meta)
    without_worker = {"fields": ["args"]}
    assert (
        key(args={"x": 1}, unique=without_worker)
        == parsed(
            {"dialect": "oban", "worker": "Other", "args": {"x": 1}, "unique": without_worker}
        ).unique_key
    )


# --- Oban (Elixir) ---------------------------------------------------------------------------


def elixir(args: dict[str, Any] | None = None, unique: Any = True, **fields: Any) -> dict[str, Any]:
    return {
        "dialect": "oban",
        "worker": "MyApp.Business",
        "args": args or {"id": 1},
        "unique": unique,
        **fields,
    }


def test_elixir_unique_true_is_unique_for_60_seconds_in_all_but_cancelled_and_discarded() -> None:
    story = Story()
    first = story.submit(elixir(), T0)
    assert first.outcome is Outcome.ACCEPTED
    again = story.submit(elixir(), T0 + 59 * S)
    assert again.outcome is Outcome.IGNORED and ids(again) == ids(first)
    assert again.error is None  # a conflict is never an error
    story.event(ids(first), T0 + 59 * S + 1, state="completed")
    assert story.submit(elixir(), T0 + 59 * S + 2).outcome is Outcome.IGNORED  # completed counts
    assert story.submit(elixir(), T0 + 60 * S).outcome is Outcome.ACCEPTED  # the period is over


@pytest.mark.parametrize(
    ("state", "counts"),
    [
        ("scheduled", True),
        ("available", True),
        ("active", True),
        ("retryable", True),
        ("completed", True),
        ("cancelled", False),
        ("discarded", False),
    ],
)
def test_elixir_default_states(state: str, counts: bool) -> None:
    story = Story()
    first = story.submit(elixir(unique={"period": "infinity"}), T0)
    story.event(ids(first), T0 + 1, state=state, scheduled_at=format_rfc3339(T0 + HOUR))
    second = story.submit(elixir(unique={"period": "infinity"}), T0 + 2)
    assert second.outcome is (Outcome.IGNORED if counts else Outcome.ACCEPTED)


def test_elixir_infinity_holds_as_long_as_retained() -> None:
    story = Story()
    first = story.submit(elixir(unique={"period": "infinity"}), T0)
    story.event(ids(first), T0 + 1, state="completed")
    assert story.submit(elixir(unique={"period": "infinity"}), T0 + 6 * DAY).outcome is (
        Outcome.IGNORED
    )
    # The retention (7 days after it completed) ends the record, and with it the conflict.
    assert story.submit(elixir(unique={"period": "infinity"}), T0 + 7 * DAY + 1).outcome is (
        Outcome.ACCEPTED
    )


def test_elixir_the_complex_example() -> None:
    unique = {
        "period": [2, "minutes"],
        "timestamp": "scheduled_at",
        "keys": ["url"],
        "states": [
            "scheduled",
            "available",
            "executing",
            "retryable",
            "completed",
            "discarded",
            "cancelled",
        ],
        "fields": ["worker", "args"],
    }
    at = T0 + HOUR
    story = Story()
    first = story.submit(
        elixir(
            {"url": "https://a", "user": 1}, unique, queue="one", scheduled_at=format_rfc3339(at)
        ),
        T0,
    )
    assert first.outcome is Outcome.ACCEPTED
    # Across queues; only the url of args; the 2 minutes count from the scheduled time.
    other = elixir({"url": "https://a", "user": 2}, unique, queue="two")
    assert story.submit(other, T0 + 30 * MINUTE).outcome is Outcome.IGNORED
    story.event(ids(first), at + 10 * S, state="cancelled")
    assert story.submit(other, at + 119 * S).outcome is Outcome.IGNORED  # cancelled counts too
    assert story.submit(other, at + 120 * S).outcome is Outcome.ACCEPTED
    assert story.submit(elixir({"url": "https://b"}, unique), T0 + 1).outcome is Outcome.ACCEPTED


def test_elixir_timestamp_inserted_at_counts_from_creation() -> None:
    story = Story()
    unique = {"period": 120}
    story.submit(elixir(unique=unique, scheduled_at=format_rfc3339(T0 + HOUR)), T0)
    assert story.submit(elixir(unique=unique), T0 + 119 * S).outcome is Outcome.IGNORED
    assert story.submit(elixir(unique=unique), T0 + 120 * S).outcome is Outcome.ACCEPTED


def test_elixir_conflict_detection_reports_the_existing_job() -> None:
    story = Story()
    new = story.submit(elixir(), T0)
    assert new.outcome is Outcome.ACCEPTED and new.job is not None
    conflict = story.submit(elixir(), T0 + 1)
    assert conflict.outcome is Outcome.IGNORED
    existing = conflict.existing_job
    assert existing is not None and existing["id"] == new.job["id"]
    assert existing["args"] == {"id": 1} and existing["type"] == "MyApp.Business"


def test_elixir_replace_max_attempts_and_priority_of_a_scheduled_job() -> None:
    story = Story()
    at = format_rfc3339(T0 + HOUR)
    first = story.submit(elixir(scheduled_at=at, max_attempts=3, priority=3), T0)
    replace = {"scheduled": ["max_attempts", "priority"]}
    update = story.submit(
        elixir(max_attempts=5, priority=0, replace=replace, scheduled_at=at), T0 + 1
    )
    assert update.outcome is Outcome.UPDATED and update.error is None
    assert update.job is not None and update.job["id"] == ids(first)
    assert update.job["max_attempts"] == 5 and update.job["priority"] == 0
    assert update.job["state"] == "scheduled" and update.job["args"] == {"id": 1}
    assert audit_fields(update)["updated_fields"] == [
        {"field": "max_attempts", "from": 3, "to": 5},
        {"field": "priority", "from": 3, "to": 0},
    ]
    assert audit_fields(update)["job_id"] == ids(first)
    # The stored job is updated too: the same request again changes nothing.
    assert (
        story.submit(
            elixir(max_attempts=5, priority=0, replace=replace, scheduled_at=at), T0 + 2
        ).outcome
        is Outcome.IGNORED
    )
    [entry] = story.entries[story.keys[ids(first)]]
    assert entry.max_attempts == 5
    # Not scheduled any more: no update, just the conflict.
    story.event(ids(first), T0 + 3, state="available")
    late = story.submit(elixir(max_attempts=9, replace=replace, scheduled_at=at), T0 + 4)
    assert late.outcome is Outcome.IGNORED


def test_elixir_replace_scheduled_at_bumps_the_scheduled_time() -> None:
    story = Story()
    first = story.submit(elixir(scheduled_at=format_rfc3339(T0 + HOUR)), T0)
    bump = elixir(scheduled_at=format_rfc3339(T0 + 1 + S), replace={"scheduled": ["scheduled_at"]})
    update = story.submit(bump, T0 + 1)
    assert update.outcome is Outcome.UPDATED and update.job is not None
    assert update.job["scheduled_at"] == format_rfc3339(T0 + 1 + S)
    [entry] = story.entries[story.keys[ids(first)]]
    assert entry.scheduled_at == T0 + 1 + S and entry.state is State.SCHEDULED


def test_elixir_replace_in_executing_updates_args() -> None:
    story = Story()
    unique = {"keys": ["id"]}
    first = story.submit(elixir({"id": 1, "v": "old"}, unique), T0)
    story.event(ids(first), T0 + 1, type="job.started")
    update = story.submit(
        elixir({"id": 1, "v": "new"}, unique, replace={"executing": ["args"]}), T0 + 2
    )
    assert update.outcome is Outcome.UPDATED and update.job is not None
    assert update.job["args"] == {"id": 1, "v": "new"} and update.job["state"] == "active"
    assert story.state_of(ids(first)) is State.ACTIVE


def test_elixir_replace_worker_and_queue_keep_the_key() -> None:
    story = Story()
    unique = {"fields": ["args"]}
    first = story.submit(elixir(unique=unique, scheduled_at=format_rfc3339(T0 + HOUR)), T0)
    raw = {
        "dialect": "oban",
        "worker": "MyApp.Other",
        "args": {"id": 1},
        "queue": "fast",
        "unique": unique,
        "scheduled_at": format_rfc3339(T0 + HOUR),
        "replace": {"scheduled": ["worker", "queue"]},
    }
    update = story.submit(raw, T0 + 1)
    assert update.outcome is Outcome.UPDATED and update.job is not None
    assert (update.job["type"], update.job["queue"]) == ("MyApp.Other", "fast")
    assert [c.field for c in update.changes] == ["queue", "type"]
    [entry] = story.entries[story.keys[ids(first)]]
    assert (entry.type, entry.queue) == ("MyApp.Other", "fast")


# --- Oban (Python) ----------------------------------------------------------------------------


def python(args: dict[str, Any] | None = None, unique: Any = True, **fields: Any) -> dict[str, Any]:
    return {
        "dialect": "oban-py",
        "worker": "MyWorker",
        "queue": "default",
        "args": args or {"id": 1},
        "unique": unique,
        **fields,
    }


@pytest.mark.parametrize("state", ["completed", "cancelled", "discarded", "active", "retryable"])
def test_python_unique_true_holds_in_every_state_while_retained(state: str) -> None:
    story = Story()
    first = story.submit(python(), T0)
    story.event(ids(first), T0 + 1, state=state)
    second = story.submit(python(), T0 + 5 * DAY)
    assert second.outcome is Outcome.IGNORED and ids(second) == ids(first)


def test_python_unique_true_ends_with_the_record() -> None:
    story = Story()
    first = story.submit(python(), T0)
    story.event(ids(first), T0 + 1, state="completed")
    assert story.submit(python(), T0 + 7 * DAY + 1).outcome is Outcome.ACCEPTED


def test_python_period_counts_from_the_scheduled_time() -> None:
    story = Story()
    at = T0 + HOUR
    first = story.submit(python({"id": 1}, {"period": 300}, scheduled_at=format_rfc3339(at)), T0)
    assert first.outcome is Outcome.ACCEPTED
    assert story.submit(python({"id": 1}, {"period": 300}), at + 299 * S).outcome is Outcome.IGNORED
    assert story.submit(python({"id": 1}, {"period": 300}), at + 300 * S).outcome is (
        Outcome.ACCEPTED
    )
    # An immediate job is scheduled when it is inserted.
    story = Story()
    story.submit(python({"id": 2}, {"period": 300}), T0)
    assert story.submit(python({"id": 2}, {"period": 300}), T0 + 300 * S).outcome is (
        Outcome.ACCEPTED
    )


def test_python_the_complex_example() -> None:
    unique = {"period": 120, "keys": ["url"], "group": "all", "fields": ["worker", "args"]}
    story = Story()
    first = story.submit(python({"url": "https://a", "user_id": 1}, unique, queue="q1"), T0)
    story.event(ids(first), T0 + 1, state="discarded")
    dup = story.submit(python({"url": "https://a", "user_id": 2}, unique, queue="q2"), T0 + 60 * S)
    assert dup.outcome is Outcome.IGNORED and ids(dup) == ids(first)
    assert story.submit(python({"url": "https://a"}, unique), T0 + 120 * S).outcome is (
        Outcome.ACCEPTED
    )


def test_python_ten_unique_jobs_are_ten_jobs() -> None:
    story = Story()
    outcomes = [
        story.submit(python({"user_id": i}, True, queue="emails", worker="EmailWorker"), T0).outcome
        for i in range(1, 11)
    ]
    assert outcomes == [Outcome.ACCEPTED] * 10


def test_python_fields_and_keys_example() -> None:
    story = Story()
    whole = {"fields": ["worker", "queue", "args"]}
    story.submit(python({"url": "...", "user_id": 1}, whole), T0)
    assert story.submit(python({"url": "...", "user_id": 2}, whole), T0 + 1).outcome is (
        Outcome.ACCEPTED
    )
    story = Story()
    by_url = {"keys": ["url"], "fields": ["worker", "queue", "args"]}
    story.submit(python({"url": "...", "user_id": 1}, by_url), T0)
    assert story.submit(python({"url": "...", "user_id": 2}, by_url), T0 + 1).outcome is (
        Outcome.IGNORED
    )


@pytest.mark.parametrize(
    ("group", "state", "counts"),
    [
        ("incomplete", "available", True),
        ("incomplete", "completed", False),
        ("scheduled", "scheduled", True),
        ("scheduled", "available", False),
        ("successful", "completed", True),
        ("successful", "cancelled", False),
        ("successful", "discarded", False),
        ("all", "cancelled", True),
    ],
)
def test_python_groups(group: str, state: str, counts: bool) -> None:
    story = Story()
    first = story.submit(python(unique={"group": group}), T0)
    story.event(ids(first), T0 + 1, state=state, scheduled_at=format_rfc3339(T0 + HOUR))
    second = story.submit(python(unique={"group": group}), T0 + 2)
    assert second.outcome is (Outcome.IGNORED if counts else Outcome.ACCEPTED)


# --- Zizq ------------------------------------------------------------------------------------


def zizq(
    scope: str | None = "active", key: str = "send_email:welcome:42", **fields: Any
) -> dict[str, Any]:
    out = {
        "dialect": "zizq",
        "type": "send_email",
        "queue": "emails",
        "payload": {"userId": 42, "template": "welcome"},
        "uniqueKey": key,
        **fields,
    }
    if scope is not None:
        out["uniqueWhile"] = scope
    return out


def test_zizq_the_enqueue_example_duplicate_false_then_true() -> None:
    story = Story()
    result1 = story.submit(zizq(), T0)
    result2 = story.submit(zizq(), T0 + 1)
    assert result1.outcome is Outcome.ACCEPTED
    assert result2.outcome is Outcome.IGNORED and ids(result2) == ids(result1)
    assert result2.error is None


def test_zizq_the_key_is_global_across_types_and_queues() -> None:
    story = Story()
    first = story.submit(zizq(), T0)
    other = story.submit(zizq(type="push_notification", queue="push", payload={"x": 1}), T0 + 1)
    assert other.outcome is Outcome.IGNORED and ids(other) == ids(first)
    assert story.submit(zizq(key="another"), T0 + 2).outcome is Outcome.ACCEPTED


def test_zizq_queued_is_the_default_and_ends_when_a_worker_takes_the_job() -> None:
    story = Story()
    first = story.submit(zizq(scope=None), T0)
    assert story.submit(zizq(scope=None), T0 + 1).outcome is Outcome.IGNORED
    story.event(ids(first), T0 + 2, type="job.started")  # in_flight
    second = story.submit(zizq(scope=None), T0 + 3)
    assert second.outcome is Outcome.ACCEPTED
    # The first fails and goes back to the queue for a retry: it does not re-take the key.
    story.event(ids(first), T0 + 4, type="job.failed", attempt=1)
    story.event(ids(first), T0 + 5, type="job.enqueued")
    assert story.state_of(ids(first)) is State.AVAILABLE
    third = story.submit(zizq(scope=None), T0 + 6)
    assert third.outcome is Outcome.IGNORED and ids(third) == ids(second)
    story.event(ids(second), T0 + 7, type="job.started")
    assert story.submit(zizq(scope=None), T0 + 8).outcome is Outcome.ACCEPTED


def test_zizq_queued_holds_while_scheduled() -> None:
    story = Story()
    story.submit(zizq(scope="queued", scheduled_at=format_rfc3339(T0 + HOUR)), T0)
    assert story.submit(zizq(scope="queued"), T0 + 1).outcome is Outcome.IGNORED
    assert story.submit(zizq(scope="queued"), T0 + 2 * HOUR).outcome is Outcome.IGNORED  # ready


def test_zizq_active_holds_until_the_job_completes_retries_included() -> None:
    story = Story()
    first = story.submit(zizq(scope="active"), T0)
    story.event(ids(first), T0 + 1, type="job.started")
    assert story.submit(zizq(), T0 + 2).outcome is Outcome.IGNORED  # in_flight
    story.event(ids(first), T0 + 3, type="job.failed", attempt=1)
    assert story.submit(zizq(), T0 + 4).outcome is Outcome.IGNORED  # back for a retry
    story.event(ids(first), T0 + 5, type="job.enqueued")  # its backoff is over
    story.event(ids(first), T0 + 5, type="job.started")
    story.event(ids(first), T0 + 6, type="job.completed")
    assert story.submit(zizq(), T0 + 7).outcome is Outcome.ACCEPTED


@pytest.mark.parametrize("end", ["job.discarded", "job.cancelled"])
def test_zizq_active_ends_with_a_dead_job_too(end: str) -> None:
    story = Story()
    first = story.submit(zizq(scope="active"), T0)
    story.event(ids(first), T0 + 1, type=end)
    assert story.submit(zizq(), T0 + 2).outcome is Outcome.ACCEPTED


def test_zizq_exists_holds_while_the_record_is_retained() -> None:
    story = Story()
    first = story.submit(zizq(scope="exists"), T0)
    story.event(ids(first), T0 + 1, type="job.completed")
    assert story.submit(zizq(scope="queued"), T0 + 6 * DAY).outcome is Outcome.IGNORED
    assert story.submit(zizq(scope="queued"), T0 + 1 + 7 * DAY).outcome is Outcome.ACCEPTED


def test_zizq_the_first_job_is_retained_and_its_scope_rules() -> None:
    story = Story()
    first = story.submit(zizq(scope="queued"), T0)
    broader = story.submit(zizq(scope="active"), T0 + 1)
    assert broader.outcome is Outcome.IGNORED and ids(broader) == ids(first)
    # Once the holder leaves its own (narrower) scope, the broader newcomer is accepted.
    story.event(ids(first), T0 + 2, type="job.started")
    taken = story.submit(zizq(scope="active"), T0 + 3)
    assert taken.outcome is Outcome.ACCEPTED
    # ... and it now holds by its own scope: while in flight, too.
    story.event(ids(taken), T0 + 4, type="job.started")
    assert story.submit(zizq(scope="queued"), T0 + 5).outcome is Outcome.IGNORED


# --- Faktory ---------------------------------------------------------------------------------


def faktory(unique_for: Any = 600.0, **fields: Any) -> dict[str, Any]:
    custom: dict[str, Any] = {"unique_for": unique_for}
    if "unique_until" in fields:
        custom["unique_until"] = fields.pop("unique_until")
    return {"dialect": "faktory", "jobtype": "sometype", "args": [1, 2], "custom": custom, **fields}


def test_faktory_unique_for_600_seconds() -> None:
    story = Story()
    first = story.submit(faktory(600.0), T0)
    assert first.outcome is Outcome.ACCEPTED
    dup = story.submit(faktory(600.0), T0 + 599 * S)
    assert dup.outcome is Outcome.REJECTED and dup.error is not None
    assert dup.error.code == "NOTUNIQUE" and ids(dup) == ids(first)
    assert story.submit(faktory(600.0), T0 + 600 * S).outcome is Outcome.ACCEPTED


def test_faktory_success_releases_the_lock() -> None:
    story = Story()
    first = story.submit(faktory(), T0)
    story.event(ids(first), T0 + 1, type="job.started")
    assert story.submit(faktory(), T0 + 2).outcome is Outcome.REJECTED
    story.event(ids(first), T0 + 3, type="job.completed")
    assert story.submit(faktory(), T0 + 4).outcome is Outcome.ACCEPTED


def test_faktory_unique_by_jobtype_args_and_queue() -> None:
    story = Story()
    story.submit(faktory(), T0)
    assert story.submit(faktory(queue="other"), T0 + 1).outcome is Outcome.ACCEPTED
    assert story.submit(faktory(args=[1, 3]), T0 + 1).outcome is Outcome.ACCEPTED
    assert story.submit(faktory(jobtype="othertype"), T0 + 1).outcome is Outcome.ACCEPTED
    assert story.submit(faktory(), T0 + 1).outcome is Outcome.REJECTED


def test_faktory_a_scheduled_delay_extends_the_lock() -> None:
    story = Story()
    story.submit(faktory(600, at=format_rfc3339(T0 + HOUR)), T0)  # perform_in 1 hour
    assert story.submit(faktory(600), T0 + 69 * MINUTE).outcome is Outcome.REJECTED
    assert story.submit(faktory(600), T0 + 70 * MINUTE).outcome is Outcome.ACCEPTED


def test_faktory_a_job_pending_retry_keeps_the_lock_until_the_timeout() -> None:
    story = Story()
    first = story.submit(faktory(600), T0)
    story.event(ids(first), T0 + 1, type="job.started")
    story.event(ids(first), T0 + 2, type="job.failed", attempt=1)
    assert story.state_of(ids(first)) is State.RETRYABLE
    assert story.submit(faktory(600), T0 + 3).outcome is Outcome.REJECTED
    story.event(ids(first), T0 + 4, type="job.cancelled")  # removed from the retry queue
    assert story.submit(faktory(600), T0 + 5).outcome is Outcome.REJECTED
    assert story.submit(faktory(600), T0 + 600 * S).outcome is Outcome.ACCEPTED


def test_faktory_a_dead_job_keeps_the_lock() -> None:
    story = Story()
    first = story.submit(faktory(600), T0)
    story.event(ids(first), T0 + 1, type="job.discarded")
    assert story.submit(faktory(600), T0 + 2).outcome is Outcome.REJECTED
    assert story.submit(faktory(600), T0 + 600 * S).outcome is Outcome.ACCEPTED


def test_faktory_unique_until_start_releases_when_the_job_starts_and_never_retakes() -> None:
    story = Story()
    first = story.submit(faktory(600, unique_until="start"), T0)
    assert story.submit(faktory(600), T0 + 1).outcome is Outcome.REJECTED
    story.event(ids(first), T0 + 2, type="job.started")
    second = story.submit(faktory(600, unique_until="start"), T0 + 3)
    assert second.outcome is Outcome.ACCEPTED
    story.event(ids(second), T0 + 4, type="job.started")
    story.event(ids(first), T0 + 5, type="job.failed", attempt=1)
    story.event(ids(first), T0 + 6, type="job.enqueued")  # back in the queue
    assert story.submit(faktory(600), T0 + 7).outcome is Outcome.ACCEPTED


@pytest.mark.parametrize("unique_for", [None, "absent"])
def test_faktory_without_unique_for_there_is_no_check(unique_for: Any) -> None:
    raw: dict[str, Any] = {"dialect": "faktory", "jobtype": "sometype", "args": [1, 2, 3]}
    if unique_for is None:
        raw["custom"] = {"unique_for": None, "unique_until": "start"}
    story = Story()
    first, second = story.submit(raw, T0), story.submit(raw, T0 + 1)
    assert first.outcome is second.outcome is Outcome.ACCEPTED
    assert first.unique_key is None and first.entries == ()


def test_faktory_job_fields_become_the_ojs_job() -> None:
    request = parsed(faktory(600, at=format_rfc3339(T0 + HOUR), queue="critical", retry=3))
    assert (request.envelope.type, request.envelope.queue) == ("sometype", "critical")
    assert request.envelope.scheduled_at == T0 + HOUR and request.envelope.max_attempts == 4
    decision = decide((), request, T0, seed=b"x")
    assert decision.job is not None
    assert decision.job["type"] == "sometype" and "jobtype" not in decision.job
    assert decision.job["scheduled_at"] == format_rfc3339(T0 + HOUR)
    assert decision.job["custom"] == {"unique_for": 600}
    assert decision.holder is not None and decision.holder.expires_at == T0 + HOUR + 600 * S
    assert audit_fields(decision)["holder"] == {
        "kind": "faktory",
        "lock_ms": 600_000,
        "until": "success",
        "since": T0 + HOUR,
    }
    assert parsed(faktory(600)).policy is not None
    policy = parsed(faktory(600)).policy
    assert policy is not None and policy.judge is Judge.HOLDER
    key = fingerprint(policy, "sometype", "default", [1, 2])
    assert key == parsed(faktory(600)).unique_key


# --- bad input never raises ----------------------------------------------------------------

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
_fields = st.sampled_from(
    [
        "worker",
        "queue",
        "args",
        "meta",
        "scheduled_at",
        "max_attempts",
        "priority",
        "tags",
        "unique",
        "replace",
        "type",
        "payload",
        "uniqueKey",
        "uniqueWhile",
        "jobtype",
        "at",
        "retry",
        "custom",
        "id",
    ]
)
_unique_options = st.dictionaries(
    st.sampled_from(
        ["period", "fields", "keys", "states", "group", "timestamp", "unique_for", "unique_until"]
    ),
    _json,
    max_size=4,
)


@given(
    st.sampled_from(["oban", "oban-py", "zizq", "faktory"]),
    st.dictionaries(_fields, _json | _unique_options, max_size=8),
)
def test_any_dialect_request_is_a_request_or_an_error_never_an_exception(
    dialect: str, fields: dict[str, Any]
) -> None:
    result = parse_request({"dialect": dialect, **fields})
    assert isinstance(result, Request | GatewayError)
    if isinstance(result, Request) and result.policy is not None:
        assert result.unique_key is not None and len(result.unique_key) == 64
        decide((), result, T0, seed=b"x")  # and it decides


@given(
    st.dictionaries(
        st.text(min_size=1, max_size=6),
        st.integers(-(2**53) + 1, 2**53 - 1) | st.text(max_size=6),
        min_size=1,
        max_size=6,
    ),
    st.randoms(),
)
def test_oban_keys_do_not_depend_on_the_order_of_args(args: dict[str, Any], rnd: Any) -> None:
    items = list(args.items())
    rnd.shuffle(items)

    def key(a: dict[str, Any]) -> str | None:
        return parsed({"dialect": "oban", "worker": "W", "args": a, "unique": True}).unique_key

    assert key(args) == key(dict(items))


# --- job ids ---------------------------------------------------------------------------------

GIVEN_ID = "019078a3-b5c7-7def-8a12-3456789abcde"


@pytest.mark.parametrize(
    ("make", "outcome", "code"),
    [
        (elixir, Outcome.IGNORED, None),  # conflicted: true
        (zizq, Outcome.IGNORED, None),  # duplicate: true
        (faktory, Outcome.REJECTED, "NOTUNIQUE"),
    ],
)
def test_a_dialect_resubmitting_the_job_that_holds_its_key_hears_its_conflict_answer(
    make: Any, outcome: Outcome, code: str | None
) -> None:
    story = Story()
    first = story.submit({**make(), "id": GIVEN_ID}, T0)
    assert first.outcome is Outcome.ACCEPTED
    again = story.submit({**make(), "id": GIVEN_ID}, T0 + 1)
    assert again.outcome is outcome and again.job is None
    assert again.existing is not None and again.existing.job_id == GIVEN_ID
    assert (again.error.code if again.error else None) == code


@pytest.mark.parametrize("make", [elixir, zizq, faktory])
def test_a_dialect_id_another_job_holds_is_refused_as_in_ojs(make: Any) -> None:
    known = {
        "id": GIVEN_ID, "type": "other.job", "queue": "q", "state": "active",
        "created_at": format_rfc3339(T0), "max_attempts": 3,
    }  # fmt: skip
    decision = decide((), parsed({**make(), "id": GIVEN_ID}), T0 + 5, seed=b"s", known=known)
    assert decision.outcome is Outcome.REJECTED and decision.job is None
    assert decision.error is not None and GIVEN_ID in decision.error.message
    assert decision.existing is not None and decision.existing.job_id == GIVEN_ID
