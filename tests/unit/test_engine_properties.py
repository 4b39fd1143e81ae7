"""Properties of the engine over arbitrary sequences of requests and job-state events.

The sequences drive the lifecycle as the processor does: each job has its own record,
moved by `on_key` (the key's entries follow it), and `expire_job` moves it once event
time passes its deadline. Most events are a move the job's state allows, aimed at a
job that exists; some are any event at all, and some name no job. A generator that
drifted into ignored events would test nothing, so
`test_the_sequences_apply_most_events_and_reach_every_state` counts what they do.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from hypothesis import event, given, settings, target
from hypothesis import strategies as st

from gateway.core import (
    TERMINAL_STATES,
    Entry,
    EventOutcome,
    EventResult,
    GatewayError,
    IgnoredReason,
    Outcome,
    State,
    audit_fields,
    decide,
    expire_job,
    job_deadline,
    job_effective_state,
    parse_event,
    parse_request,
    stored_job,
)
from gateway.core.job_events import EVENT_TYPES
from gateway.core.jobs import job_expires_at
from gateway.core.lifecycle import cancelled_by_replace, follow, on_key
from gateway.core.times import format_rfc3339

T0 = 1_770_000_000_000
MINUTE = 60_000
HOUR = 60 * MINUTE
RETENTION = 24 * HOUR  # short, so sequences exercise pruning and forgotten records
FIXED_IDS = ["019078a3-b5c7-7def-8a12-3456789abcd0", "019078a3-b5c7-7def-8a12-3456789abcd1"]
UNKNOWN = "unknown-job"


@dataclass(frozen=True)
class Submit:
    delay: int
    job_id: str | None
    schedule_in: int | None
    expires_in: int | None
    max_attempts: int


Fields = tuple[tuple[str, Any], ...]


@dataclass(frozen=True)
class Event:
    delay: int
    aim: str  # "move": one its job's state allows; "any": any event; "unknown": no such job
    job: int  # which existing job, modulo their number
    move: int  # which of the moves its state allows, modulo their number
    fields: Fields  # the event of an `any`


STARTED: Fields = (("type", "job.started"),)
ENQUEUED: Fields = (("type", "job.enqueued"),)
CANCELLED: Fields = (("type", "job.cancelled"),)
DISCARDED: Fields = (("type", "job.discarded"),)
DELETED: Fields = (("type", "job.deleted"),)
PENDING: Fields = (("state", "pending"),)
# `scheduled_in` becomes the event's scheduled_at, counted from the event's time.
SCHEDULED: Fields = (("type", "job.scheduled"), ("scheduled_in", HOUR))
# The moves the OJS lifecycle allows from each state (the job's effective state: a
# scheduled or retryable job whose time has come is available). From discarded,
# job.enqueued is the dead-letter retry.
MOVES: dict[State, list[Fields]] = {
    State.AVAILABLE: [
        STARTED, (*STARTED, ("visibility_timeout_ms", 5 * MINUTE)), CANCELLED, SCHEDULED, PENDING,
    ],
    State.SCHEDULED: [
        ENQUEUED, CANCELLED, (("type", "job.scheduled"), ("scheduled_in", 2 * HOUR)), PENDING,
    ],
    State.PENDING: [ENQUEUED, CANCELLED, SCHEDULED],
    State.ACTIVE: [
        (("type", "job.completed"),), (("type", "job.failed"),),
        (("type", "job.failed"), ("error", {"message": "no", "retryable": False})),
        (("type", "job.retrying"),), DISCARDED, CANCELLED, (("type", "job.heartbeat"),), ENQUEUED,
    ],
    State.RETRYABLE: [DISCARDED, CANCELLED, ENQUEUED, SCHEDULED],
    State.COMPLETED: [DELETED],
    State.CANCELLED: [DELETED],
    State.DISCARDED: [ENQUEUED, DELETED],
}  # fmt: skip

# Mostly short gaps (leases of minutes run out), sometimes past the retention.
delays = st.one_of(st.integers(0, 10 * MINUTE), st.integers(0, 30 * HOUR))
submits = st.builds(
    Submit,
    delays,
    st.none() | st.sampled_from(FIXED_IDS),
    st.none() | st.integers(min_value=-HOUR, max_value=2 * HOUR),
    st.none() | st.integers(min_value=MINUTE, max_value=3 * HOUR),
    st.integers(min_value=1, max_value=3),
)
any_fields = st.one_of(
    st.sampled_from(sorted(EVENT_TYPES)).map(lambda t: (("type", t),)),
    st.sampled_from([s.value for s in State]).map(lambda s: (("state", s),)),
    st.tuples(st.integers(0, 4), st.integers(1, 4)).map(
        lambda am: (("type", "job.failed"), ("attempt", am[0]), ("max_attempts", am[1]))
    ),
)
events = st.builds(
    Event,
    delays,
    st.sampled_from(["move"] * 8 + ["any", "unknown"]),
    st.integers(0, 6),
    st.integers(0, 7),
    any_fields,
)
# A sequence opens with a request: an event before any job could only be unknown.
steps = st.tuples(
    submits, st.lists(st.one_of(submits, events, events), min_size=10, max_size=40)
).map(lambda first_rest: [first_rest[0], *first_rest[1]])


@dataclass
class Played:
    """What a sequence did: each step's observable result, and counts for the tally."""

    observed: list[Any] = field(default_factory=list)
    events: Counter[str] = field(default_factory=Counter)  # per aim
    applied: Counter[str] = field(default_factory=Counter)  # per aim
    expired: int = 0
    states: set[State] = field(default_factory=set)

    @property
    def applied_share(self) -> float:
        return sum(self.applied.values()) / max(1, sum(self.events.values()))


def play(sequence: list[Submit | Event], policy: dict[str, Any], one_live: bool) -> Played:
    """Play a sequence against one key; with `one_live`, check after every step that the
    key never has two live jobs and that its entries follow the job records."""
    entries: tuple[Entry, ...] = ()
    jobs: dict[str, dict[str, Any]] = {}  # each job's record, as the processor keeps it
    now, key = T0, None
    played = Played()
    for n, step in enumerate(sequence):
        now += step.delay
        entries = expire_due(jobs, entries, now, played)
        if isinstance(step, Submit):
            decision = decide(entries, request_of(step, policy, now), now, RETENTION,
                              seed=str(n).encode())  # fmt: skip
            entries, key = decision.entries, decision.unique_key or key
            for cancelled in decision.cancelled:
                moved = cancelled_by_replace(jobs[cancelled.job_id], now)
                assert moved is not None, cancelled  # a replace cancels live jobs only
                jobs[cancelled.job_id] = moved
            if decision.job is not None:
                assert decision.outcome in (Outcome.ACCEPTED, Outcome.REPLACED)
                jobs[str(decision.job["id"])] = stored_job(decision.job, decision.unique_key, 0)
            played.observed.append((audit_fields(decision), decision.job, decision.entries))
        else:
            job_id, fields = aimed(step, jobs, now)
            raw = {"job_id": job_id, "unique_key": key or "0" * 64, **fields}
            parsed = parse_event(raw)
            assert not isinstance(parsed, GatewayError), parsed
            before = jobs.get(job_id)
            result, entries = on_key(before, entries, parsed, now, RETENTION)
            check_move(before, result)
            if result.outcome is EventOutcome.APPLIED and result.deleted:
                del jobs[job_id]
            elif result.outcome is EventOutcome.APPLIED:
                assert result.job is not None
                jobs[job_id] = result.job
            played.events[step.aim] += 1
            played.applied[step.aim] += result.outcome is EventOutcome.APPLIED
            played.observed.append((result.outcome, result.reason, result.state, entries))
        # A finished job's record is forgotten its retention after it ended, as the
        # processor's store forgets it.
        for job_id in [i for i, j in jobs.items() if (job_expires_at(j, RETENTION) or now) < now]:
            del jobs[job_id]
        played.states |= {State(j["state"]) for j in jobs.values()}
        if one_live:
            check_one_live(jobs, entries)
    return played


def request_of(step: Submit, policy: dict[str, Any], now: int) -> Any:
    raw: dict[str, Any] = {"type": "t", "args": {"a": 1}, "unique": policy,
                           "max_attempts": step.max_attempts}  # fmt: skip
    if step.job_id is not None:
        raw["id"] = step.job_id
    if step.schedule_in is not None:
        raw["scheduled_at"] = format_rfc3339(now + step.schedule_in)
    if step.expires_in is not None:
        raw["expires_at"] = format_rfc3339(now + step.expires_in)
    request = parse_request(raw)
    assert not isinstance(request, GatewayError), request
    return request


def aimed(step: Event, jobs: dict[str, dict[str, Any]], now: int) -> tuple[str, dict[str, Any]]:
    """The job an event is about and its fields: for a move, one its state allows."""
    if step.aim == "unknown" or not jobs:
        return UNKNOWN, dict(step.fields)
    job_id = sorted(jobs)[step.job % len(jobs)]
    if step.aim == "any":
        return job_id, dict(step.fields)
    moves = MOVES[job_effective_state(jobs[job_id], now)]
    fields = dict(moves[step.move % len(moves)])
    if "scheduled_in" in fields:
        fields["scheduled_at"] = format_rfc3339(now + fields.pop("scheduled_in"))
    return job_id, fields


def expire_due(
    jobs: dict[str, dict[str, Any]], entries: tuple[Entry, ...], now: int, played: Played
) -> tuple[Entry, ...]:
    """Jobs whose lease, timeout or expires_at event time has passed, moved by the core."""
    for job_id, job in sorted(jobs.items()):
        deadline = job_deadline(job)
        if deadline is None or deadline > now:
            continue
        result = expire_job(job, now)
        assert result is not None and result.job is not None, job
        check_move(job, result)
        jobs[job_id] = result.job
        entries = follow(entries, result.job, result, now, RETENTION)
        played.expired += 1
    return entries


def check_move(before: dict[str, Any] | None, result: EventResult) -> None:
    """Only an unknown job is unknown, and a finished job moves only to be deleted or
    retried from the dead letters."""
    if before is None:
        assert result.reason is IgnoredReason.UNKNOWN_JOB, result
        return
    if result.outcome is not EventOutcome.APPLIED or result.deleted:
        return
    was = State(before["state"])
    assert was not in TERMINAL_STATES or (was, result.state) == (State.DISCARDED, State.AVAILABLE)


def check_one_live(jobs: dict[str, dict[str, Any]], entries: tuple[Entry, ...]) -> None:
    live = sorted(i for i, j in jobs.items() if j["state"] not in TERMINAL_STATES)
    assert len(live) <= 1, {i: jobs[i]["state"] for i in live}
    assert sorted(e.job_id for e in entries if not e.terminal) == live, (entries, live)
    for entry in entries:
        if entry.job_id in jobs:
            assert str(entry.state) == jobs[entry.job_id]["state"], (entry, jobs[entry.job_id])


def report(played: Played) -> None:
    """Hypothesis's statistics (`--hypothesis-show-statistics`) on what a sequence did."""
    share = played.applied_share
    event(f"applied share at least {int(share * 10) * 10}%")
    event(f"states reached: {len(played.states)} of {len(State)}")
    target(len(played.states), label="states reached")


@settings(max_examples=150, deadline=None)
@given(steps)
def test_reject_without_period_never_holds_two_live_jobs(sequence: list[Submit | Event]) -> None:
    report(play(sequence, {"on_conflict": "reject"}, one_live=True))


@settings(max_examples=100, deadline=None)
@given(steps, st.sampled_from(["replace", "replace_except_schedule", "ignore"]))
def test_other_strategies_never_hold_two_live_jobs_either(
    sequence: list[Submit | Event], on_conflict: str
) -> None:
    report(play(sequence, {"on_conflict": on_conflict}, one_live=True))


@settings(max_examples=100, deadline=None)
@given(steps, st.sampled_from(["reject", "replace", "ignore"]), st.sampled_from([None, "PT2H"]))
def test_replaying_a_sequence_reproduces_every_decision(
    sequence: list[Submit | Event], on_conflict: str, period: str | None
) -> None:
    policy = {"on_conflict": on_conflict, "period": period}
    # A period lets two live jobs coexist by design: replay only.
    first = play(sequence, policy, one_live=period is None)
    assert play(sequence, policy, one_live=False).observed == first.observed


def test_the_sequences_apply_most_events_and_reach_every_state() -> None:
    """The generator's reach, counted over a fixed-seed run of the reject property."""
    tally = Played()

    @settings(max_examples=150, deadline=None, derandomize=True, database=None)
    @given(steps)
    def each(sequence: list[Submit | Event]) -> None:
        played = play(sequence, {"on_conflict": "reject"}, one_live=True)
        tally.events.update(played.events)
        tally.applied.update(played.applied)
        tally.expired += played.expired
        tally.states |= played.states

    each()
    by_aim = {aim: f"{tally.applied[aim]}/{n}" for aim, n in sorted(tally.events.items())}
    print(
        f"events applied: {tally.applied_share:.0%} ({by_aim}); expiries: {tally.expired}; "
        f"states reached: {len(tally.states)} of {len(State)}"
    )
    assert tally.applied_share >= 0.5, by_aim
    assert tally.states == set(State), set(State) - tally.states
    assert tally.expired > 0
    assert tally.events["unknown"] > 0 and tally.applied["unknown"] == 0
