"""The decision engine: every rule of the spec as a table or a story, then properties."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import pytest

from gateway.core import (
    DUPLICATE,
    Decision,
    Entry,
    EventOutcome,
    GatewayError,
    Outcome,
    Request,
    State,
    audit_fields,
    cancellations,
    decide,
    parse_event,
    parse_request,
)
from gateway.core.retry import RetryPolicy
from gateway.core.times import format_rfc3339
from tests.support import apply_event

T0 = 1_770_000_000_000
MINUTE = 60_000
HOUR = 60 * MINUTE
DAY = 24 * HOUR


def job(policy: dict[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "email.send", "args": {"user_id": 42}, **fields}
    if policy is not None:
        out["unique"] = policy
    return out


def request(raw: dict[str, Any]) -> Request:
    parsed = parse_request(raw)
    assert isinstance(parsed, Request), parsed
    return parsed


def submit(entries: Sequence[Entry], raw: dict[str, Any], now: int, seed: str = "s") -> Decision:
    return decide(entries, request(raw), now, seed=seed.encode())


def event(entries: Sequence[Entry], job_id: str, key: str, now: int, **fields: Any) -> Any:
    parsed = parse_event({"job_id": job_id, "unique_key": key, **fields})
    assert not isinstance(parsed, GatewayError), parsed
    return apply_event(entries, parsed, now)


class Key:
    """A running story for one key: submit requests and events, keep the entries."""

    def __init__(self) -> None:
        self.entries: tuple[Entry, ...] = ()
        self.key: str | None = None
        self.count = 0

    def submit(self, raw: dict[str, Any], now: int) -> Decision:
        self.count += 1
        decision = submit(self.entries, raw, now, seed=str(self.count))
        self.entries = decision.entries
        if decision.unique_key is not None:
            self.key = decision.unique_key
        return decision

    def event(self, job_id: str, now: int, **fields: Any) -> Any:
        """Apply an event; one that needs a running job first starts the job (a fetch)."""
        assert self.key is not None
        result = event(self.entries, job_id, self.key, now, **fields)
        if result.outcome is EventOutcome.REFUSED and result.previous_state in (
            State.AVAILABLE, State.SCHEDULED,
        ):  # fmt: skip
            if result.previous_state is State.SCHEDULED:
                self.event(job_id, now, type="job.enqueued")
            self.event(job_id, now, type="job.started")
            result = event(self.entries, job_id, self.key, now, **fields)
        self.entries = result.entries
        return result

    def state_of(self, job_id: str) -> State:
        return next(e.state for e in self.entries if e.job_id == job_id)


def job_id(decision: Decision) -> str:
    assert decision.job is not None
    return str(decision.job["id"])


# --- accepted jobs ----------------------------------------------------------------------------


def test_a_first_request_is_accepted_and_recorded() -> None:
    raw = job({"keys": ["type", "args"]}, queue="mail", tags=["x"], options={"timeout_ms": 5})
    decision = submit((), raw, T0, seed="topic/0/17")
    assert decision.outcome is Outcome.ACCEPTED
    record = decision.job
    assert record is not None
    new_id = uuid.UUID(record["id"])
    assert record["id"] == str(new_id) and record["id"] == record["id"].lower()
    assert new_id.version == 7 and new_id.int >> 80 == T0  # its timestamp is the decision time
    assert record == {
        "id": record["id"],
        "type": "email.send",
        "queue": "mail",
        "args": {"user_id": 42},
        "unique": {"keys": ["type", "args"]},
        "tags": ["x"],
        "options": {"timeout_ms": 5},  # options are preserved
        "timeout_ms": 5,  # and the job keeps the ones its lifecycle reads
        "state": "available",
        "priority": 0,
        "attempt": 0,
        "max_attempts": 3,
        "retry": RetryPolicy().to_dict(),
        "created_at": format_rfc3339(T0),
        "enqueued_at": format_rfc3339(T0),
        "unique_key": decision.unique_key,
    }
    (entry,) = decision.entries
    assert (entry.job_id, entry.state, entry.created_at) == (record["id"], State.AVAILABLE, T0)
    assert (entry.type, entry.queue, entry.max_attempts) == ("email.send", "mail", 3)


def test_ids_are_reproducible_from_time_key_and_seed() -> None:
    raw = job({})
    first, again = submit((), raw, T0, "r1"), submit((), raw, T0, "r1")
    assert job_id(first) == job_id(again)
    assert job_id(submit((), raw, T0, "r2")) != job_id(first)
    assert job_id(submit((), raw, T0 + 1, "r1")) != job_id(first)


def test_the_requests_own_id_is_kept() -> None:
    given_id = "019078a3-b5c7-7def-8a12-3456789abcde"
    decision = submit((), job({}, id=given_id, max_attempts=7), T0)
    assert job_id(decision) == given_id
    assert decision.job is not None and decision.job["max_attempts"] == 7


@pytest.mark.parametrize(
    ("scheduled_at", "state"),
    [(T0 + MINUTE, State.SCHEDULED), (T0, State.AVAILABLE), (T0 - MINUTE, State.AVAILABLE)],
)
def test_a_job_is_scheduled_only_when_its_time_is_in_the_future(
    scheduled_at: int, state: State
) -> None:
    decision = submit((), job({}, scheduled_at=format_rfc3339(scheduled_at)), T0)
    assert decision.job is not None
    assert decision.job["state"] == state
    assert decision.job["scheduled_at"] == format_rfc3339(scheduled_at)
    assert decision.entries[0].state is state


def test_gateway_fields_in_the_request_are_replaced() -> None:
    raw = job({}, state="completed", attempt=9, created_at="1999-01-01T00:00:00Z", unique_key="x")
    record = submit((), raw, T0).job
    assert record is not None
    assert (record["state"], record["attempt"]) == ("available", 0)
    assert record["created_at"] == format_rfc3339(T0)
    assert record["unique_key"] != "x"


def test_a_job_without_policy_is_accepted_and_stores_nothing() -> None:
    decision = submit((), job(None), T0)
    assert decision.outcome is Outcome.ACCEPTED
    assert decision.unique_key is None and decision.entries == ()
    assert decision.job is not None and decision.job["unique_key"] is None


def test_an_invalid_request_is_an_invalid_decision() -> None:
    error = parse_request({"type": "t", "args": [], "unique": {"keys": ["meta"]}})
    assert isinstance(error, GatewayError)
    decision = decide((), error, T0, seed=b"s")
    assert decision.outcome is Outcome.INVALID
    assert decision.error == error
    assert audit_fields(decision) == {
        "outcome": "invalid",
        "unique_key": None,
        "job_id": None,
        "existing_job_id": None,
        "existing_job_state": None,
        "cancelled_job_id": None,
        "cancelled_job_ids": [],
        "error": {"code": "invalid_request", "message": error.message},
        "policy": None,
        "holder": None,
        "updated_fields": None,
    }


# --- conflicts --------------------------------------------------------------------------------


def test_reject_returns_the_existing_jobs_id_and_state() -> None:
    story = Key()
    first = story.submit(job({}), T0)
    second = story.submit(job({}), T0 + 1)
    assert second.outcome is Outcome.REJECTED
    assert second.existing is not None and second.existing.job_id == job_id(first)
    assert second.existing_state is State.AVAILABLE
    assert second.job is None
    assert second.error is not None and second.error.code == DUPLICATE
    assert story.entries == first.entries
    fields = audit_fields(second)
    assert fields["outcome"] == "rejected"
    assert fields["existing_job_id"] == job_id(first)
    assert fields["existing_job_state"] == "available"
    assert fields["job_id"] == job_id(first)
    assert fields["error"]["code"] == "duplicate"
    assert fields["policy"]["on_conflict"] == "reject"


def test_reject_reports_an_active_job_as_active() -> None:
    story = Key()
    first = job_id(story.submit(job({}), T0))
    story.event(first, T0 + 1, type="job.started")
    assert story.submit(job({}), T0 + 2).existing_state is State.ACTIVE


def test_ignore_returns_the_existing_job() -> None:
    story = Key()
    first = story.submit(job({"on_conflict": "ignore"}, queue="mail"), T0)
    second = story.submit(job({"on_conflict": "ignore"}, queue="mail"), T0 + 5)
    assert second.outcome is Outcome.IGNORED
    assert second.error is None and second.job is None
    assert second.existing_job == {
        "id": job_id(first),
        "type": "email.send",
        "queue": "mail",
        "state": "available",
        "created_at": format_rfc3339(T0),
    }
    assert audit_fields(second)["existing_job_id"] == job_id(first)


def test_replace_cancels_the_existing_job_and_accepts_the_new_one_atomically() -> None:
    story = Key()
    old = job_id(story.submit(job({"on_conflict": "replace"}), T0))
    decision = story.submit(job({"on_conflict": "replace"}), T0 + 10)
    new = job_id(decision)
    assert decision.outcome is Outcome.REPLACED
    assert [e.job_id for e in decision.cancelled] == [old]
    assert {e.job_id: e.state for e in decision.entries} == {
        old: State.CANCELLED,
        new: State.AVAILABLE,
    }
    assert cancellations(decision) == [
        {
            "job_id": old,
            "unique_key": decision.unique_key,
            "previous_state": "available",
            "reason": "replaced",
            "replaced_by": new,
            "cancelled_at": format_rfc3339(T0 + 10),
        }
    ]
    fields = audit_fields(decision)
    assert (fields["job_id"], fields["cancelled_job_id"]) == (new, old)
    assert fields["existing_job_id"] == old


def test_replace_cancels_an_active_job_too_because_this_gateway_is_strong() -> None:
    story = Key()
    old = job_id(story.submit(job({"on_conflict": "replace"}), T0))
    story.event(old, T0 + 1, type="job.started")
    decision = story.submit(job({"on_conflict": "replace"}), T0 + 2)
    assert decision.outcome is Outcome.REPLACED
    assert [e.job_id for e in decision.cancelled] == [old]
    assert cancellations(decision)[0]["previous_state"] == "active"
    assert story.state_of(old) is State.CANCELLED
    # The worker's late report of the cancelled job does not bring it back.
    late = story.event(old, T0 + 3, type="job.completed")
    assert late.outcome is EventOutcome.REFUSED
    assert story.state_of(old) is State.CANCELLED


def test_replace_except_schedule_keeps_the_original_time_of_a_scheduled_job() -> None:
    policy = {"on_conflict": "replace_except_schedule"}
    story = Key()
    original_time = T0 + HOUR
    old = job_id(story.submit(job(policy, scheduled_at=format_rfc3339(original_time)), T0))
    decision = story.submit(
        job(policy, args={"user_id": 42}, scheduled_at=format_rfc3339(T0 + 2 * HOUR)), T0 + 1
    )
    assert decision.outcome is Outcome.REPLACED
    assert [e.job_id for e in decision.cancelled] == [old]
    assert decision.job is not None
    assert decision.job["scheduled_at"] == format_rfc3339(original_time)
    assert decision.job["state"] == "scheduled"
    # Also when the new request names no time at all.
    again = story.submit(job(policy), T0 + 2)
    assert again.job is not None and again.job["scheduled_at"] == format_rfc3339(original_time)


def test_replace_except_schedule_is_replace_for_a_job_that_is_not_scheduled() -> None:
    policy = {"on_conflict": "replace_except_schedule"}
    story = Key()
    old = job_id(story.submit(job(policy), T0))
    new_time = format_rfc3339(T0 + HOUR)
    decision = story.submit(job(policy, scheduled_at=new_time), T0 + 1)
    assert [e.job_id for e in decision.cancelled] == [old]
    assert decision.job is not None and decision.job["scheduled_at"] == new_time
    # A scheduled job whose time has passed is available, so it is not "scheduled" either.
    past_due = Key()
    past_due.submit(job(policy, scheduled_at=format_rfc3339(T0 + MINUTE)), T0)
    later = past_due.submit(job(policy), T0 + 2 * MINUTE)
    assert later.job is not None and "scheduled_at" not in later.job
    assert later.job["state"] == "available"


def test_replace_cancels_every_live_match() -> None:
    story = Key()
    # Two live jobs can share a key when an earlier request listed narrower states.
    first = job_id(story.submit(job({"states": ["scheduled"]}), T0))
    second = job_id(story.submit(job({"states": ["scheduled"]}), T0 + 1))
    decision = story.submit(job({"on_conflict": "replace"}), T0 + 2)
    assert {e.job_id for e in decision.cancelled} == {first, second}
    assert decision.existing is not None and decision.existing.job_id == second  # the newest
    assert audit_fields(decision)["cancelled_job_ids"] == [first, second]
    live = [e for e in decision.entries if not e.terminal]
    assert [e.job_id for e in live] == [job_id(decision)]


def test_replace_supersedes_a_terminal_match_without_cancelling_it() -> None:
    policy = {"on_conflict": "replace", "states": ["completed", "available"]}
    story = Key()
    old = job_id(story.submit(job(policy), T0))
    story.event(old, T0 + 1, type="job.completed")
    decision = story.submit(job(policy), T0 + 2)
    assert decision.outcome is Outcome.REPLACED
    assert decision.cancelled == () and cancellations(decision) == []
    assert decision.existing is not None and decision.existing.job_id == old
    assert decision.existing_state is State.COMPLETED
    assert story.state_of(old) is State.COMPLETED
    assert story.state_of(job_id(decision)) is State.AVAILABLE


def test_the_live_match_is_reported_before_a_newer_terminal_one() -> None:
    story = Key()
    live = job_id(story.submit(job({}), T0))
    done = job_id(story.submit(job({"states": ["scheduled"]}), T0 + 1))  # coexists with live
    story.event(done, T0 + 2, type="job.completed")
    decision = story.submit(job({"states": ["completed", "available"]}), T0 + 3)
    assert decision.existing is not None and decision.existing.job_id == live


def test_a_resubmitted_id_is_never_a_second_job() -> None:
    given_id = "019078a3-b5c7-7def-8a12-3456789abcde"
    for on_conflict in ["reject", "replace", "replace_except_schedule", "ignore"]:
        story = Key()
        story.submit(job({"on_conflict": on_conflict}, id=given_id), T0)
        story.event(given_id, T0 + 1, type="job.started")
        story.event(given_id, T0 + 1, type="job.completed")  # no longer a duplicate by state
        decision = story.submit(job({"on_conflict": on_conflict}, id=given_id), T0 + 2)
        assert decision.outcome is Outcome.REJECTED, on_conflict
        assert decision.error is not None and decision.error.code == "duplicate"
        assert given_id in decision.error.message
        assert decision.existing is not None and decision.existing.job_id == given_id
        assert decision.cancelled == ()


@pytest.mark.parametrize("policy", [None, {"keys": ["type"]}])
def test_an_id_held_by_any_known_job_is_refused_whatever_the_policy(
    policy: dict[str, Any] | None,
) -> None:
    given_id = "019078a3-b5c7-7def-8a12-3456789abcde"
    known = {
        "id": given_id, "type": "other.job", "queue": "q", "state": "active",
        "created_at": format_rfc3339(T0), "max_attempts": 3,
    }  # fmt: skip
    raw = job(policy, id=given_id) if policy else {"type": "a.job", "args": [], "id": given_id}
    decision = decide((), request(raw), T0 + 5, seed=b"s", known=known)
    assert decision.outcome is Outcome.REJECTED and decision.job is None
    assert decision.existing is not None and decision.existing.job_id == given_id
    assert decision.existing_state is State.ACTIVE
    fresh = decide((), request(raw), T0 + 5, seed=b"s")
    assert fresh.outcome is Outcome.ACCEPTED and fresh.job is not None
    assert fresh.job["id"] == given_id


# --- states and period ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("existing_state", "states", "duplicate"),
    [
        # default states: every live state holds the key, no terminal one does
        ("available", None, True),
        ("scheduled", None, True),
        ("pending", None, True),
        ("active", None, True),
        ("retryable", None, True),
        ("completed", None, False),
        ("cancelled", None, False),
        ("discarded", None, False),
        # narrow filtering: ["scheduled"] allows a new job while one is active
        ("scheduled", ["scheduled"], True),
        ("active", ["scheduled"], False),
        ("available", ["scheduled"], False),
        # terminal states count only when listed
        ("completed", ["completed"], True),
        ("discarded", ["completed"], False),
        ("cancelled", ["cancelled"], True),
        ("discarded", ["discarded", "available"], True),
    ],
)
def test_only_jobs_in_the_requests_states_are_duplicates(
    existing_state: str, states: list[str] | None, duplicate: bool
) -> None:
    story = Key()
    first = job_id(story.submit(job({}, scheduled_at=format_rfc3339(T0 + DAY)), T0))
    if existing_state != "scheduled":
        story.event(first, T0 + 1, state=existing_state)
    assert story.state_of(first) is State(existing_state)
    decision = story.submit(job({"states": states}), T0 + 2)
    assert (decision.outcome is Outcome.REJECTED) is duplicate


def test_a_scheduled_job_whose_time_has_passed_counts_as_available() -> None:
    story = Key()
    story.submit(job({}, scheduled_at=format_rfc3339(T0 + MINUTE)), T0)
    before = story.submit(job({"states": ["available"]}), T0 + MINUTE - 1)
    assert before.outcome is Outcome.ACCEPTED
    story = Key()
    story.submit(job({}, scheduled_at=format_rfc3339(T0 + MINUTE)), T0)
    due = story.submit(job({"states": ["available"]}), T0 + MINUTE)
    assert due.outcome is Outcome.REJECTED and due.existing_state is State.AVAILABLE
    assert story.submit(job({"states": ["scheduled"]}), T0 + MINUTE).outcome is Outcome.ACCEPTED


def test_the_period_runs_from_the_existing_jobs_created_at() -> None:
    policy = {"period": "PT1H", "on_conflict": "ignore"}
    story = Key()
    story.submit(job(policy), T0)
    assert story.submit(job(policy), T0 + HOUR - 1).outcome is Outcome.IGNORED
    # After expiry a new job is permitted regardless of the existing job's state.
    assert story.submit(job(policy), T0 + HOUR).outcome is Outcome.ACCEPTED


def test_period_and_states_combine_with_and() -> None:
    story = Key()
    first = job_id(story.submit(job({"period": "PT1H"}), T0))
    story.event(first, T0 + 1, type="job.completed")
    # Within the period but in a state not listed: not a duplicate.
    assert story.submit(job({"period": "PT1H"}), T0 + 2).outcome is Outcome.ACCEPTED


def test_without_a_period_the_constraint_lasts_while_the_state_does() -> None:
    story = Key()
    story.submit(job({}), T0)
    assert story.submit(job({}), T0 + 365 * DAY).outcome is Outcome.REJECTED


def test_several_entries_coexist_and_the_requests_states_pick() -> None:
    story = Key()
    first = job_id(story.submit(job({}), T0))
    story.event(first, T0 + 1, type="job.completed")
    second = job_id(story.submit(job({}), T0 + 2))
    assert {e.job_id: e.state for e in story.entries} == {
        first: State.COMPLETED,
        second: State.AVAILABLE,
    }
    only_completed = story.submit(job({"states": ["completed"]}), T0 + 3)
    assert only_completed.existing is not None and only_completed.existing.job_id == first
    assert story.submit(job({}), T0 + 4).existing.job_id == second  # type: ignore[union-attr]


# --- the page's stories -----------------------------------------------------------------------


def test_retry_flow_in_five_steps() -> None:
    policy = {"keys": ["type", "args"], "args_keys": ["user_id"]}
    story = Key()
    # 1. Job A is enqueued. Key is claimed.
    a = story.submit(job(policy, args={"user_id": 42}), T0)
    assert a.outcome is Outcome.ACCEPTED
    job_a = job_id(a)
    story.event(job_a, T0 + 1, type="job.started")
    # 2. Job A fails, enters retryable. Key remains claimed.
    failed = story.event(job_a, T0 + 2, type="job.failed", attempt=1, max_attempts=3)
    assert failed.state is State.RETRYABLE
    # 3. A new enqueue for the same fingerprint is rejected as duplicate.
    dup = story.submit(job(policy, args={"user_id": 42, "template": "x"}), T0 + 3)
    assert dup.outcome is Outcome.REJECTED and dup.existing_state is State.RETRYABLE
    # (the retry fires; uniqueness is not re-evaluated)
    assert story.event(job_a, T0 + 4, type="job.enqueued").state is State.AVAILABLE
    story.event(job_a, T0 + 5, type="job.started")
    # 4. Job A exhausts retries and is discarded. Key is released.
    story.event(job_a, T0 + 6, type="job.failed", attempt=3, max_attempts=3)
    assert story.state_of(job_a) is State.DISCARDED
    # 5. A new enqueue for the same fingerprint succeeds.
    assert story.submit(job(policy, args={"user_id": 42}), T0 + 7).outcome is Outcome.ACCEPTED


def test_terminal_states_with_p7d() -> None:
    policy = {
        "states": ["available", "active", "scheduled", "retryable", "pending", "completed"],
        "period": "P7D",
        "on_conflict": "ignore",
    }
    story = Key()
    first = job_id(story.submit(job(policy), T0))
    story.event(first, T0 + MINUTE, type="job.started")
    story.event(first, T0 + 2 * MINUTE, type="job.completed")
    within = story.submit(job(policy), T0 + 6 * DAY)
    assert within.outcome is Outcome.IGNORED
    assert within.existing is not None and within.existing.job_id == first
    assert within.existing_state is State.COMPLETED
    assert story.submit(job(policy), T0 + 7 * DAY).outcome is Outcome.ACCEPTED


def test_type_level_deduplication() -> None:
    story = Key()
    policy = {"keys": ["type"], "on_conflict": "ignore"}
    story.submit({"type": "report.daily", "args": {"date": "2026-02-12"}, "unique": policy}, T0)
    other_day = {"type": "report.daily", "args": {"date": "2026-02-13"}, "unique": policy}
    assert story.submit(other_day, T0 + 1).outcome is Outcome.IGNORED


def test_args_based_deduplication() -> None:
    policy = {"keys": ["type", "args"], "args_keys": ["user_id"], "on_conflict": "reject"}

    def welcome(user_id: int, locale: str) -> dict[str, Any]:
        args = {"user_id": user_id, "locale": locale}
        return {"type": "email.send_welcome", "args": args, "unique": policy}

    first = submit((), welcome(42, "en-US"), T0)
    assert submit(first.entries, welcome(42, "fr-FR"), T0 + 1).outcome is Outcome.REJECTED
    other = submit(first.entries, welcome(43, "en-US"), T0 + 1)
    assert other.unique_key != first.unique_key  # a different key: other entries, accepted


def test_time_windowed_deduplication() -> None:
    policy = {
        "keys": ["type", "args"],
        "args_keys": ["user_id", "event"],
        "period": "PT1H",
        "on_conflict": "ignore",
    }
    push = {
        "type": "notification.push",
        "args": {"user_id": 42, "event": "new_comment"},
        "unique": policy,
    }
    story = Key()
    story.submit(push, T0)
    assert story.submit(push, T0 + 30 * MINUTE).outcome is Outcome.IGNORED
    assert story.submit(push, T0 + HOUR).outcome is Outcome.ACCEPTED
    assert story.submit(push, T0 + HOUR + 1).outcome is Outcome.IGNORED


def test_queue_scoped_deduplication_with_replace() -> None:
    policy = {
        "keys": ["type", "queue", "args"],
        "args_keys": ["image_id"],
        "on_conflict": "replace",
    }

    def resize(queue: str, size: int) -> dict[str, Any]:
        args = {"image_id": "img_abc123", "size": size}
        return {"type": "image.resize", "queue": queue, "args": args, "unique": policy}

    story = Key()
    first = job_id(story.submit(resize("thumbnails", 64), T0))
    latest = story.submit(resize("thumbnails", 128), T0 + 1)
    assert latest.outcome is Outcome.REPLACED and latest.cancelled[0].job_id == first
    assert latest.job is not None and latest.job["args"]["size"] == 128
    elsewhere = submit((), resize("previews", 64), T0 + 2)
    assert elsewhere.unique_key != latest.unique_key


def test_metadata_based_deduplication() -> None:
    policy = {"keys": ["type", "args", "meta"], "meta_keys": ["tenant_id"], "on_conflict": "ignore"}

    def warm(tenant: str, trace: str) -> dict[str, Any]:
        meta = {"tenant_id": tenant, "trace_id": trace}
        return {
            "type": "cache.warm",
            "args": {"resource": "products"},
            "meta": meta,
            "unique": policy,
        }

    story = Key()
    story.submit(warm("acme", "t1"), T0)
    assert story.submit(warm("acme", "t2"), T0 + 1).outcome is Outcome.IGNORED
    assert submit((), warm("globex", "t3"), T0 + 2).unique_key != story.key


def test_discarded_and_cancelled_release_the_key_under_default_states() -> None:
    for final in ("job.discarded", "job.cancelled"):
        story = Key()
        first = job_id(story.submit(job({}), T0))
        story.event(first, T0 + 1, type=final)
        assert story.submit(job({}), T0 + 2).outcome is Outcome.ACCEPTED


def test_decisions_prune_what_no_request_can_match() -> None:
    story = Key()
    first = job_id(story.submit(job({}), T0))
    story.event(first, T0 + 1, type="job.completed")
    later = T0 + 1 + 7 * DAY  # the default retention has passed since it completed
    decision = decide(story.entries, request(job({})), later, seed=b"x")
    assert [e.job_id for e in decision.entries] == [job_id(decision)]
    longer = decide(story.entries, request(job({})), later, 30 * DAY, seed=b"x")
    assert [e.job_id for e in longer.entries] == [first, job_id(longer)]
