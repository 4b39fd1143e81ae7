"""Stored entries: their JSON form, effective state, and the pruning bound."""

from __future__ import annotations

from dataclasses import fields, replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.core import (
    DEFAULT_RETENTION_MS,
    Entry,
    FaktoryRule,
    GatewayError,
    Holder,
    Outcome,
    State,
    UniquePolicy,
    UniqueUntil,
    ZizqRule,
    ZizqScope,
    dump_entries,
    effective_state,
    entry_expires_at,
    expires_at,
    load_entries,
    prune,
)
from gateway.core.decision import Change, Debounced, Decision
from gateway.core.holder import after_transition

T0 = 1_770_000_000_000
DAY = 86_400_000

times = st.integers(min_value=0, max_value=2**48)
holders = st.builds(
    Holder,
    rule=st.builds(ZizqRule, st.sampled_from(list(ZizqScope)))
    | st.builds(FaktoryRule, st.integers(1, 10 * DAY), st.sampled_from(list(UniqueUntil))),
    since=times,
    released_at=st.none() | times,
)

entries = st.builds(
    Entry,
    job_id=st.text(min_size=1, max_size=40),
    state=st.sampled_from(list(State)),
    created_at=st.integers(min_value=0, max_value=2**48),
    state_changed_at=st.integers(min_value=0, max_value=2**48),
    type=st.text(min_size=1, max_size=20),
    queue=st.text(min_size=1, max_size=20),
    scheduled_at=st.none() | st.integers(min_value=0, max_value=2**48),
    max_attempts=st.integers(min_value=1, max_value=100),
    holder=st.none() | holders,
    job=st.none() | st.dictionaries(st.text(max_size=5), st.integers(-1000, 1000) | st.text()),
    successor=st.booleans(),
    delay_ms=st.none() | st.integers(0, 10**9),
)


@given(st.lists(entries, max_size=5))
def test_entries_round_trip_through_json(stored: list[Entry]) -> None:
    assert load_entries(dump_entries(stored)) == tuple(stored)
    for e in stored:
        assert Entry.from_dict(e.to_dict()) == e


def test_the_stored_form_is_compact() -> None:
    e = Entry("j1", State.AVAILABLE, T0, T0 + 1, "email.send", "default")
    assert e.to_dict() == {
        "id": "j1",
        "state": "available",
        "created_at": T0,
        "changed_at": T0 + 1,
        "type": "email.send",
        "queue": "default",
        "max_attempts": 3,
    }


def test_nothing_stored_is_no_entries() -> None:
    assert load_entries(None) == () == load_entries(b"")


@pytest.mark.parametrize(
    "raw",
    [
        {"id": "j", "state": "available"},
        {
            "id": "j",
            "state": "running",
            "created_at": 1,
            "changed_at": 1,
            "type": "t",
            "queue": "q",
        },
        {
            "id": "j",
            "state": "active",
            "created_at": "1",
            "changed_at": 1,
            "type": "t",
            "queue": "q",
        },
        {
            "id": "j",
            "state": "active",
            "created_at": True,
            "changed_at": 1,
            "type": "t",
            "queue": "q",
        },
    ],
)
def test_a_corrupt_stored_entry_raises_value_error(raw: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        Entry.from_dict(raw)


def test_a_scheduled_job_is_available_from_its_time_on() -> None:
    e = Entry("j", State.SCHEDULED, T0, T0, "t", "q", scheduled_at=T0 + 10)
    assert effective_state(e, T0 + 9) is State.SCHEDULED
    assert effective_state(e, T0 + 10) is State.AVAILABLE
    assert (
        effective_state(Entry("j", State.SCHEDULED, T0, T0, "t", "q"), T0 + DAY) is State.SCHEDULED
    )


def test_live_entries_are_never_pruned() -> None:
    live = [
        Entry(f"j{i}", s, T0, T0, "t", "q")
        for i, s in enumerate(State)
        if s not in (State.COMPLETED, State.CANCELLED, State.DISCARDED)
    ]
    assert prune(live, T0 + 10_000 * DAY) == tuple(live)


def test_terminal_entries_stay_for_the_retention_after_they_became_terminal() -> None:
    done = Entry("j", State.COMPLETED, T0 - 100 * DAY, T0, "t", "q")
    assert prune([done], T0 + DEFAULT_RETENTION_MS - 1) == (done,)
    assert prune([done], T0 + DEFAULT_RETENTION_MS) == ()
    assert DEFAULT_RETENTION_MS == 7 * DAY
    assert prune([done], T0 + 20 * DAY, retention_ms=30 * DAY) == (done,)


def test_only_the_newest_terminal_entry_per_state_is_kept() -> None:
    old = Entry("old", State.COMPLETED, T0, T0 + 5, "t", "q")
    new = Entry("new", State.COMPLETED, T0 + 1, T0 + 2, "t", "q")
    gone = Entry("gone", State.DISCARDED, T0, T0, "t", "q")
    live = Entry("live", State.ACTIVE, T0, T0, "t", "q")
    assert prune([old, gone, live, new], T0 + 10) == (gone, live, new)


def test_entries_with_a_holder_rule_are_not_collapsed() -> None:
    a = Entry("a", State.COMPLETED, T0, T0, "t", "q", holder=Holder(ZizqRule(ZizqScope.EXISTS), T0))
    b = Entry("b", State.COMPLETED, T0 + 1, T0 + 1, "t", "q")
    assert prune([a, b], T0 + 2) == (a, b)


@given(st.lists(entries, max_size=8), st.integers(min_value=0, max_value=2**48))
def test_the_bound_live_jobs_plus_three(stored: list[Entry], now: int) -> None:
    kept = prune(stored, now)
    plain_terminal = [e for e in kept if e.terminal and e.holder is None]
    assert len(plain_terminal) <= 3
    plain_live = [e for e in stored if not e.terminal and e.holder is None]
    assert plain_live == [e for e in kept if not e.terminal and e.holder is None]
    # A holder entry goes exactly when it is no longer needed.
    for e in stored:
        if e.holder is not None:
            due = entry_expires_at(e)
            assert (e in kept) == (due is None or due > now)


def test_a_key_expires_when_its_last_terminal_entry_does_and_never_while_one_is_live() -> None:
    live = Entry("a", State.ACTIVE, 0, 0, "t", "default")
    done = Entry("b", State.COMPLETED, 0, 100, "t", "default")
    gone = Entry("c", State.DISCARDED, 0, 50, "t", "default")
    assert expires_at([], 1000) is None
    assert expires_at([live, done], 1000) is None
    due = expires_at([done, gone], 1000)
    assert due == 1100
    assert prune([done, gone], due - 1, 1000) == (done,)
    assert prune([done, gone], due, 1000) == ()


@given(st.lists(entries, max_size=6), st.integers(1, 10**9))
def test_nothing_outlives_the_expiry_and_something_lives_until_it(
    stored: list[Entry], retention: int
) -> None:
    due = expires_at(stored, retention)
    if due is None:
        assert not stored or prune(stored, 2**62, retention)
    else:
        assert prune(stored, due, retention) == ()
        assert prune(stored, due - 1, retention) != ()


@given(entries, entries, st.sampled_from(list(State)), times, st.none() | times)
def test_the_quick_copies_are_dataclasses_replace(
    entry: Entry, other: Entry, state: State, at: int, scheduled_at: int | None
) -> None:
    # Written out field by field for speed: a field added later must be copied too.
    job = {"id": "j"}
    assert entry.with_job(job) == replace(entry, job=job)
    assert entry.moved_to(state, at, scheduled_at) == replace(
        entry, state=state, state_changed_at=at,
        scheduled_at=entry.scheduled_at if scheduled_at is None else scheduled_at,
        holder=None if entry.holder is None else after_transition(entry.holder, state, at),
    )  # fmt: skip
    decision = Decision(
        Outcome.REPLACED, at, (entry,), "k", UniquePolicy(), {"id": "n"}, entry, State.ACTIVE,
        (other,), GatewayError("c", "m"), (Change("f", 1, 2),),
        Holder(ZizqRule(ZizqScope.EXISTS), at), Debounced(at, at, True, True), {"id": "d"},
    )  # fmt: skip
    assert [f.name for f in fields(Decision) if getattr(decision, f.name) == f.default] == []
    assert decision.with_existing(other) == replace(decision, existing=other)
