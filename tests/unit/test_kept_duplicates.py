"""sidekiq-unique-jobs' reject and reschedule: the duplicate kept as a job of its own
(core/kept_duplicates.py), dead or decided again once its wait is over."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from gateway.core import EventOutcome, Outcome, State, audit_fields, job_deadline, parse_event
from gateway.core.errors import GatewayError
from gateway.core.kept_duplicates import RESCHEDULE_FIELD, redecide, reschedule_due
from gateway.core.lifecycle import on_key
from gateway.core.times import format_rfc3339
from tests.unit.test_dialect_sidekiq import job
from tests.unit.test_dialects import T0, S, Story, ids

RETENTION = 7 * 86_400_000


def test_reject_answers_as_log_and_sends_the_duplicate_to_the_dead_letters() -> None:
    story = Story()
    first = story.submit(job(on_conflict="reject"), T0)
    dup = story.submit(job(on_conflict="reject", jid="d00d"), T0 + 1)
    assert dup.outcome is Outcome.IGNORED and ids(dup) == ids(first)  # a nil jid: log's answer
    dead = dup.duplicate
    assert dead is not None and dead["id"] != ids(first) and dead["jid"] == "d00d"
    assert dead["state"] == State.DISCARDED and dead["discarded_at"] == format_rfc3339(T0 + 1)
    assert dead["error"]["type"] == "SidekiqUniqueJobs::Conflict"
    assert ids(first) in dead["error"]["message"] and dead["errors"] == [dead["error"]]
    assert "enqueued_at" not in dead and dead["unique_key"] == first.unique_key
    assert dup.entries == first.entries  # the dead job holds no key
    assert audit_fields(dup)["duplicate_job"] == {"id": dead["id"], "state": "discarded"}
    again = story.submit(job(on_conflict="reject"), T0 + 2)
    assert again.outcome is Outcome.IGNORED and again.duplicate is not None
    assert again.duplicate["id"] != dead["id"]


def test_other_strategies_keep_no_duplicate_and_their_records_their_shape() -> None:
    for on_conflict in ("log", {"client": "log", "server": "reschedule"}):
        story = Story()
        story.submit(job(on_conflict=on_conflict), T0)
        dup = story.submit(job(on_conflict=on_conflict), T0 + 1)
        assert dup.outcome is Outcome.IGNORED and dup.duplicate is None
        assert "duplicate_job" not in audit_fields(dup)


def test_the_first_push_under_reject_or_reschedule_is_accepted_as_any() -> None:
    for on_conflict in ("reject", "reschedule"):
        first = Story().submit(job(on_conflict=on_conflict), T0)
        assert first.outcome is Outcome.ACCEPTED and first.duplicate is None


def _rescheduled(story: Story, now: int, **fields: Any) -> dict[str, Any]:
    dup = story.submit(job(on_conflict="reschedule", **fields), now)
    assert dup.outcome is Outcome.IGNORED and dup.duplicate is not None
    return dup.duplicate


def test_reschedule_waits_schedule_in_then_is_decided_again() -> None:
    story = Story()
    first = story.submit(job(on_conflict="reschedule"), T0)
    later = _rescheduled(story, T0 + 1)
    assert later["state"] == State.PENDING and later["scheduled_at"] == format_rfc3339(T0 + 5001)
    assert later[RESCHEDULE_FIELD]["of"] == ids(first) and later[RESCHEDULE_FIELD]["times"] == 1
    assert reschedule_due(later) == job_deadline(later) == T0 + 5001
    key = first.unique_key or ""
    assert story.entries[key] == first.entries  # waiting, it holds no key
    # Due while the first job still holds the lock: it waits schedule_in more.
    again = redecide(later, story.entries[key], T0 + 5001, RETENTION)
    assert not again.took and again.job["state"] == State.PENDING
    assert reschedule_due(again.job) == T0 + 10_001 and again.job[RESCHEDULE_FIELD]["times"] == 2
    # The first job done, the lock is free: it takes it and is enqueued.
    story.event(ids(first), T0 + 6 * S, type="job.completed")
    took = redecide(again.job, story.entries[key], T0 + 10_001, RETENTION)
    assert took.took and took.job["state"] == State.AVAILABLE
    assert took.job["enqueued_at"] == format_rfc3339(T0 + 10_001)
    assert reschedule_due(took.job) is None and job_deadline(took.job) is None
    story.entries[key] = took.entries
    story.keys[str(took.job["id"])] = key
    held = story.submit(job(on_conflict="log"), T0 + 10_002)  # it holds the lock now
    assert held.outcome is Outcome.IGNORED and ids(held) == took.job["id"]
    story.event(str(took.job["id"]), T0 + 10_003, type="job.started")
    assert story.state_of(str(took.job["id"])) is State.ACTIVE


def test_reschedule_with_until_executing_takes_the_lock_once_the_holder_started() -> None:
    story = Story()
    first = story.submit(job("until_executing", on_conflict="reschedule"), T0)
    later = _rescheduled(story, T0 + 1, lock="until_executing", schedule_in=30)
    assert reschedule_due(later) == T0 + 30_001
    story.event(ids(first), T0 + 2, type="job.started")  # until_executing lets go at start
    took = redecide(later, story.entries[first.unique_key or ""], T0 + 30_001, RETENTION)
    assert took.took and [e.job_id for e in took.entries][-1] == later["id"]


@given(delay_s=st.integers(1, 86_400), at=st.integers(0, 10**6))
def test_a_rescheduled_duplicate_is_due_its_wait_after_its_decision(delay_s: int, at: int) -> None:
    story = Story()
    story.submit(job(on_conflict="reschedule", schedule_in=delay_s), T0)
    later = _rescheduled(story, T0 + at, schedule_in=delay_s)
    assert reschedule_due(later) == T0 + at + delay_s * S
    # Decided again while the holder waits: it never makes the key's second holder.
    again = redecide(later, story.entries[later["unique_key"]], T0 + at + delay_s * S, RETENTION)
    assert not again.took and len(again.entries) == 1


def test_a_rescheduled_job_may_only_be_cancelled_before_it_is_due() -> None:
    story = Story()
    story.submit(job(on_conflict="reschedule"), T0)
    later = _rescheduled(story, T0 + 1)
    entries = story.entries[later["unique_key"]]
    for kind, applies in (("job.enqueued", False), ("job.started", False),
                          ("job.cancelled", True)):  # fmt: skip
        event = parse_event({"job_id": later["id"], "unique_key": later["unique_key"],
                             "type": kind})  # fmt: skip
        assert not isinstance(event, GatewayError)
        result, _ = on_key(later, entries, event, T0 + 2)
        assert (result.outcome is EventOutcome.APPLIED) is applies, result
    cancelled = {**later, "state": "cancelled"}
    assert reschedule_due(cancelled) is None and job_deadline(cancelled) is None
