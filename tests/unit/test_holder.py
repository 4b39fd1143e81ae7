"""Holder rules, the one match predicate, and pruning that honours them."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.core import (
    DEFAULT_RETENTION_MS,
    Entry,
    FaktoryRule,
    Holder,
    Judge,
    OnConflict,
    PeriodFrom,
    Request,
    State,
    UniquePolicy,
    UniqueUntil,
    ZizqRule,
    ZizqScope,
    decide,
    dump_entries,
    entry_expires_at,
    expires_at,
    holds,
    load_entries,
    parse_request,
    parse_request_json,
    prune,
)
from gateway.core.holder import (
    Relock,
    StatesKind,
    StatesRule,
    after_transition,
    holder_for,
    holds_by_rule,
    released_since,
)
from gateway.core.matching import holds_key
from gateway.processor.metrics import Metrics
from gateway.stage.dedup import Dedup
from gateway.stage.parsing import Limits
from gateway.stage.records import Source
from tests.memory_store import Store

T0 = 1_770_000_000_000
S = 1000
DAY = 86_400_000
LIVE = [State.SCHEDULED, State.AVAILABLE, State.PENDING, State.ACTIVE, State.RETRYABLE]

states_rules = st.builds(
    StatesRule,
    st.sampled_from(list(StatesKind)),
    st.just("lock"),
    st.frozensets(st.sampled_from(list(State)), min_size=1),
    st.none() | st.integers(1, 10 * DAY),
    st.none() | st.integers(1, DAY),
    st.sampled_from(list(Relock)),
)
rules = (
    st.builds(ZizqRule, st.sampled_from(list(ZizqScope)))
    | st.builds(FaktoryRule, st.integers(1, 10 * DAY), st.sampled_from(list(UniqueUntil)))
    | states_rules
)
times = st.integers(min_value=T0 - DAY, max_value=T0 + 30 * DAY)
policies = st.builds(
    UniquePolicy,
    period_ms=st.none() | st.integers(1, 10 * DAY),
    states=st.frozensets(st.sampled_from(list(State)), min_size=1),
    on_conflict=st.sampled_from(list(OnConflict)),
    period_from=st.sampled_from(list(PeriodFrom)),
    judge=st.sampled_from(list(Judge)),
    bucket_start=st.none() | st.sampled_from([T0, T0 - DAY]),
)


def entry(state: State, holder: Holder | None = None, at: int = T0, **fields: Any) -> Entry:
    return Entry("j", state, at, at, "t", "q", holder=holder, **fields)


def zizq(scope: ZizqScope, released_at: int | None = None) -> Holder:
    return Holder(ZizqRule(scope), T0, released_at)


def lock(until: UniqueUntil = UniqueUntil.SUCCESS, ms: int = 600 * S, since: int = T0) -> Holder:
    return Holder(FaktoryRule(ms, until), since)


HOLDER_JUDGED = UniquePolicy(judge=Judge.HOLDER)


# --- the rules as tables ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scope", "state", "released", "held"),
    [
        (ZizqScope.QUEUED, State.SCHEDULED, None, True),
        (ZizqScope.QUEUED, State.AVAILABLE, None, True),
        (ZizqScope.QUEUED, State.PENDING, None, True),
        (ZizqScope.QUEUED, State.ACTIVE, None, False),
        (ZizqScope.QUEUED, State.AVAILABLE, T0, False),  # back in the queue after a retry
        (ZizqScope.QUEUED, State.COMPLETED, None, False),
        (ZizqScope.ACTIVE, State.ACTIVE, None, True),
        (ZizqScope.ACTIVE, State.RETRYABLE, None, True),
        (ZizqScope.ACTIVE, State.COMPLETED, None, False),
        (ZizqScope.ACTIVE, State.DISCARDED, None, False),
        (ZizqScope.ACTIVE, State.CANCELLED, None, False),
        (ZizqScope.EXISTS, State.COMPLETED, None, True),
        (ZizqScope.EXISTS, State.DISCARDED, None, True),
    ],
)
def test_zizq_scopes(scope: ZizqScope, state: State, released: int | None, held: bool) -> None:
    assert holds_by_rule(zizq(scope, released), state, T0 + 1)[0] is held


@pytest.mark.parametrize(
    ("until", "state", "at", "held"),
    [
        (UniqueUntil.SUCCESS, State.AVAILABLE, T0 + 599 * S, True),
        (UniqueUntil.SUCCESS, State.AVAILABLE, T0 + 600 * S, False),
        (UniqueUntil.SUCCESS, State.ACTIVE, T0 + 1, True),
        (UniqueUntil.SUCCESS, State.RETRYABLE, T0 + 1, True),
        (UniqueUntil.SUCCESS, State.DISCARDED, T0 + 1, True),
        (UniqueUntil.SUCCESS, State.CANCELLED, T0 + 1, True),
        (UniqueUntil.SUCCESS, State.COMPLETED, T0 + 1, False),
        (UniqueUntil.START, State.AVAILABLE, T0 + 1, True),
        (UniqueUntil.START, State.ACTIVE, T0 + 1, False),
        (UniqueUntil.START, State.RETRYABLE, T0 + 1, False),
        (UniqueUntil.START, State.AVAILABLE, T0 + 600 * S, False),
    ],
)
def test_faktory_locks(until: UniqueUntil, state: State, at: int, held: bool) -> None:
    assert holds_by_rule(lock(until), state, at)[0] is held


def test_a_faktory_lock_counts_from_the_later_of_enqueue_and_scheduled_time() -> None:
    rule = FaktoryRule(600 * S, UniqueUntil.SUCCESS)
    assert holder_for(rule, T0, None).expires_at == T0 + 600 * S
    assert holder_for(rule, T0, T0 - 5 * S).expires_at == T0 + 600 * S
    assert holder_for(rule, T0, T0 + 3600 * S).expires_at == T0 + 4200 * S
    assert holder_for(ZizqRule(ZizqScope.ACTIVE), T0, T0 + 1).expires_at is None


def test_taking_the_job_releases_queued_and_start_for_good() -> None:
    for holder in (zizq(ZizqScope.QUEUED), lock(UniqueUntil.START)):
        taken = after_transition(holder, State.ACTIVE, T0 + 5)
        assert taken.released_at == T0 + 5
        assert after_transition(taken, State.RETRYABLE, T0 + 9) == taken  # first time kept
    for holder in (zizq(ZizqScope.ACTIVE), zizq(ZizqScope.EXISTS), lock(UniqueUntil.SUCCESS)):
        assert after_transition(holder, State.ACTIVE, T0 + 5) == holder
    assert after_transition(zizq(ZizqScope.QUEUED), State.SCHEDULED, T0) == zizq(ZizqScope.QUEUED)


def test_entry_moves_carry_the_holder_transition() -> None:
    moved = entry(State.AVAILABLE, zizq(ZizqScope.QUEUED)).moved_to(State.ACTIVE, T0 + 3)
    assert moved.holder is not None and moved.holder.released_at == T0 + 3
    back = moved.moved_to(State.AVAILABLE, T0 + 4)
    assert not holds(back, HOLDER_JUDGED, T0 + 5).holds


def test_holders_are_stored_typed_and_old_entries_load_without_one() -> None:
    stored = [
        entry(State.ACTIVE, Holder(ZizqRule(ZizqScope.QUEUED), T0, T0 + 1)),
        entry(State.RETRYABLE, lock(UniqueUntil.START, since=T0 + 5)),
        entry(State.AVAILABLE, job={"id": "j", "args": {"a": 1}}),
    ]
    assert load_entries(dump_entries(stored)) == tuple(stored)
    assert stored[0].to_dict()["holder"] == {
        "kind": "zizq",
        "scope": "queued",
        "since": T0,
        "released_at": T0 + 1,
    }
    # An entry written before holder rules existed.
    old = b'[{"id":"j","state":"available","created_at":1,"changed_at":1,"type":"t","queue":"q"}]'
    assert load_entries(old)[0].holder is None and load_entries(old)[0].job is None
    bad: object
    for bad in (
        {"kind": "sidekiq", "since": 1},
        {"kind": "zizq", "scope": "x", "since": 1},
        {"kind": "faktory", "lock_ms": "1", "until": "start", "since": 1},
        [],
    ):
        raw = {**stored[0].to_dict(), "holder": bad}
        with pytest.raises(ValueError):
            Entry.from_dict(raw)


# --- the one predicate --------------------------------------------------------------------


def test_the_newcomer_decides_entries_without_a_holder() -> None:
    policy = UniquePolicy(states=frozenset({State.AVAILABLE}), period_ms=60 * S)
    assert holds(entry(State.AVAILABLE), policy, T0 + 59 * S).holds
    assert not holds(entry(State.AVAILABLE), policy, T0 + 60 * S).holds
    assert not holds(entry(State.ACTIVE), policy, T0).holds
    scheduled = entry(State.SCHEDULED, scheduled_at=T0 + DAY)
    from_scheduled = UniquePolicy(
        states=frozenset({State.SCHEDULED}), period_ms=60 * S, period_from=PeriodFrom.SCHEDULED_AT
    )
    assert holds(scheduled, from_scheduled, T0 + DAY - 1).holds
    why = holds(entry(State.AVAILABLE), policy, T0 + 60 * S).why
    assert why == (
        "job j is `available` but the period (PT1M, counted from its creation at "
        "2026-02-02T02:40:00.000Z) had elapsed"
    )


def test_a_holder_judged_request_ignores_its_own_states_against_a_holder() -> None:
    narrow = UniquePolicy(states=frozenset({State.SCHEDULED}), judge=Judge.HOLDER)
    active = entry(State.ACTIVE, zizq(ZizqScope.ACTIVE))
    assert holds(active, narrow, T0).holds
    assert holds(active, narrow, T0).why == "job j: it is `active`, within its Zizq scope `active`"
    # A newcomer-judged request needs both the holder's rule and its own states.
    assert not holds(active, UniquePolicy(states=frozenset({State.SCHEDULED})), T0).holds
    assert holds(active, UniquePolicy(), T0).holds


@given(st.none() | rules, st.sampled_from(list(State)), times, policies, st.none() | times)
def test_deciding_without_the_reasons_gives_the_same_answer(
    rule: Any, state: State, now: int, policy: UniquePolicy, released: int | None
) -> None:
    # The engine asks holds_key, explain asks holds: one predicate, words only for explain.
    e = entry(state, None if rule is None else Holder(rule, T0, released))
    assert holds_key(e, policy, now) is holds(e, policy, now).holds
    assert holds(e, policy, now).why


@given(rules, st.sampled_from(list(State)), times, policies, st.none() | times)
def test_a_holder_entry_holds_only_while_its_rule_does(
    rule: Any, state: State, now: int, policy: UniquePolicy, released: int | None
) -> None:
    holder = Holder(rule, T0, released)
    e = entry(state, holder)
    by_rule = holds_by_rule(holder, state, now, bucket=policy.bucket_start)[0]
    verdict = holds(e, policy, now).holds
    if policy.judge is Judge.HOLDER:
        assert verdict is by_rule
    else:
        assert verdict <= by_rule  # the newcomer can only narrow it
    if isinstance(rule, FaktoryRule) and verdict:
        assert now < T0 + rule.lock_ms


@given(rules, st.lists(st.sampled_from(list(State)), max_size=6), times)
def test_once_a_rule_let_go_by_a_transition_it_never_holds_again(
    rule: Any, path: list[State], now: int
) -> None:
    e = entry(State.AVAILABLE, Holder(rule, T0))
    let_go = False
    for i, state in enumerate([State.ACTIVE, *path]):
        e = e.moved_to(state, T0 + i + 1)
        if e.holder is not None and e.holder.released_at is not None:
            let_go = True
        if let_go:
            assert not holds(e, HOLDER_JUDGED, T0 + i + 1).holds


@given(rules, st.sampled_from(list(State)), times, policies, st.none() | times)
def test_a_holder_entry_is_pruned_only_once_nothing_could_match_it(
    rule: Any, state: State, now: int, policy: UniquePolicy, released: int | None
) -> None:
    holder = Holder(rule, T0, released)
    e = Entry("j", state, T0, T0 + 1, "t", "q", holder=holder)
    due = entry_expires_at(e)
    if due is not None and due <= now:
        assert prune([e], now) == ()
        # Only `exists` ends with the retention (a terminal entry's, as for OJS);
        # every other holder is pruned only once its rule has let go.
        if released_since(holder, state, T0 + 1) is not None:
            assert not holds(e, policy, now).holds
    else:
        assert prune([e], now) == (e,)


def test_decide_uses_the_predicate() -> None:
    raw = {"dialect": "zizq", "type": "t", "uniqueKey": "k"}
    request = parse_request(raw)
    assert not isinstance(request, Exception) and not hasattr(request, "code")
    first = decide((), request, T0, seed=b"1")  # type: ignore[arg-type]
    [held] = first.entries
    assert holds(held, first.policy, T0 + 1).holds  # type: ignore[arg-type]
    taken = held.moved_to(State.ACTIVE, T0 + 2)
    second = decide((taken,), request, T0 + 3, seed=b"2")  # type: ignore[arg-type]
    assert second.outcome == "accepted"


# --- pruning and the prune schedule -----------------------------------------------------


def test_a_key_whose_only_holder_expired_is_freed_then_deleted() -> None:
    live = entry(State.AVAILABLE, lock(ms=600 * S))
    assert not holds(live, UniquePolicy(judge=Judge.HOLDER), T0 + 600 * S).holds  # freed
    # The running job keeps its entry for the retention, for its lifecycle events ...
    assert expires_at([live]) == T0 + 600 * S + DEFAULT_RETENTION_MS
    assert prune([live], T0 + 600 * S + DEFAULT_RETENTION_MS - 1) == (live,)
    assert prune([live], T0 + 600 * S + DEFAULT_RETENTION_MS) == ()
    # ... and the processor hands that time to the state store, which deletes the key
    # then (a tombstone), whether or not anything touches it again.
    state = _KeyState()
    dedup = Dedup(1, lambda *_: None, Metrics(), Limits(), _other_keys())
    job = b'{"dialect":"faktory","jobtype":"T","args":[],"custom":{"unique_for":600}}'
    request = parse_request_json(job)
    assert isinstance(request, Request) and request.unique_key is not None
    dedup.on_record(job, request.unique_key.encode(), Source("r", 0, 0, T0, {}), state)
    assert state.ttls["entries"] == timedelta(milliseconds=600 * S + DEFAULT_RETENTION_MS)
    # Beside a live OJS job, the key never expires by time.
    assert expires_at([live, entry(State.AVAILABLE)]) is None


def _other_keys() -> Any:
    """The partition's other keys (the expiry schedule), in a store of their own."""
    store = Store()
    return lambda _, key: store.state(key)


class _KeyState:
    """One key's state, with the expiry the processor asked for, per name."""

    def __init__(self) -> None:
        self.values: dict[str, bytes] = {}
        self.ttls: dict[str, timedelta | None] = {}

    def get_bytes(self, name: str) -> bytes | None:
        return self.values.get(name)

    def get_stamped(self, name: str) -> tuple[bytes | None, int | None]:
        return self.values.get(name), None

    def set_bytes(self, name: str, value: bytes, ttl: timedelta | None = None) -> None:
        self.values[name], self.ttls[name] = value, ttl

    def delete(self, name: str) -> None:
        self.values.pop(name, None)


def test_finished_holders_go_when_their_rule_lets_go() -> None:
    dead = entry(State.DISCARDED, lock(ms=600 * S), at=T0 + 5)
    assert entry_expires_at(dead) == T0 + 600 * S  # a dead job keeps its lock until it expires
    done = entry(State.COMPLETED, lock(ms=600 * S), at=T0 + 5)
    assert entry_expires_at(done) == T0 + 5
    assert prune([done], T0 + 5) == ()
    for scope in (ZizqScope.QUEUED, ZizqScope.ACTIVE):
        assert entry_expires_at(entry(State.COMPLETED, zizq(scope), at=T0 + 7)) == T0 + 7
    kept = entry(State.COMPLETED, zizq(ZizqScope.EXISTS), at=T0 + 7)
    assert entry_expires_at(kept) == T0 + 7 + DEFAULT_RETENTION_MS
    assert entry_expires_at(entry(State.ACTIVE, zizq(ZizqScope.EXISTS))) is None
    taken = entry(State.ACTIVE, zizq(ZizqScope.QUEUED, released_at=T0 + 3), at=T0 + 3)
    assert entry_expires_at(taken) == T0 + 3 + DEFAULT_RETENTION_MS


def test_lifecycle_events_find_a_job_whose_lock_expired_and_whose_entry_is_gone() -> None:
    """The key's entries drop a Faktory job once its lock expired (a retention later), but
    the job's record is kept apart (job/<id>), so its events still move it."""
    import orjson

    from gateway.wire import JOB_EVENT, KIND_HEADER

    out: list[Any] = []
    state = _KeyState()
    dedup = Dedup(1, lambda o, s: out.append(o), Metrics(), Limits(), _other_keys())
    job = b'{"dialect":"faktory","jobtype":"T","args":[],"custom":{"unique_for":1}}'
    request = parse_request_json(job)
    assert isinstance(request, Request) and request.unique_key is not None
    key = request.unique_key.encode()
    dedup.on_record(job, key, Source("r", 0, 0, T0, {}), state)
    [record] = [orjson.loads(o.value) for o in out if o.role == "job_states"]
    later = T0 + S + DEFAULT_RETENTION_MS + 1
    # A request after the lock and the retention: the entry is pruned, a new job accepted.
    dedup.on_record(job, key, Source("r", 0, 1, later, {}), state)
    assert [e.job_id for e in load_entries(state.values["entries"])] != [record["id"]]
    event = orjson.dumps(
        {"job_id": record["id"], "unique_key": request.unique_key, "type": "job.started"}
    )
    out.clear()
    dedup.on_record(event, key, Source("r", 0, 2, later + 1, {KIND_HEADER: JOB_EVENT}), state)
    [moved] = [orjson.loads(o.value) for o in out if o.role == "job_states"]
    assert moved["id"] == record["id"] and moved["state"] == "active" and moved["attempt"] == 1


# --- holders by states (BullMQ, sidekiq-unique-jobs, River) ---------------------------------


@given(rules, times, st.none() | times)
def test_every_holder_is_stored_and_read_back_as_it_was(
    rule: Any, since: int, released: int | None
) -> None:
    holder = Holder(rule, since, released)
    assert Holder.from_dict(holder.to_dict()) == holder
    assert load_entries(dump_entries([entry(State.AVAILABLE, holder)]))[0].holder == holder


def sidekiq(relock: Relock, ms: int | None = 60 * S, states: Any = None) -> StatesRule:
    held = states or frozenset(LIVE)
    return StatesRule(StatesKind.SIDEKIQ, "until_executed", held, lock_ms=ms, relock=relock)


def test_a_states_rule_holds_in_its_states_until_its_lock_expires() -> None:
    holder = Holder(sidekiq(Relock.NEVER), T0)
    assert holds_by_rule(holder, State.ACTIVE, T0 + 59 * S)[0]
    assert not holds_by_rule(holder, State.ACTIVE, T0 + 60 * S)[0]
    assert not holds_by_rule(holder, State.COMPLETED, T0)[0]
    assert holder.expires_at == T0 + 60 * S
    assert Holder(sidekiq(Relock.NEVER, None), T0).expires_at is None


def test_an_expired_sidekiq_lock_is_taken_again_when_a_worker_starts_the_job() -> None:
    holder = Holder(sidekiq(Relock.ON_START), T0)
    assert after_transition(holder, State.ACTIVE, T0 + 59 * S) == holder  # still held: kept
    retaken = after_transition(holder, State.ACTIVE, T0 + 90 * S)
    assert retaken.since == T0 + 90 * S and holds_by_rule(retaken, State.ACTIVE, T0 + 149 * S)[0]
    assert after_transition(holder, State.RETRYABLE, T0 + 90 * S) == holder


def test_until_executing_relocks_afresh_when_the_job_fails_into_a_retry() -> None:
    waiting = frozenset({State.SCHEDULED, State.AVAILABLE, State.PENDING, State.RETRYABLE})
    holder = Holder(sidekiq(Relock.ON_RETRY, states=waiting), T0)
    running = after_transition(holder, State.ACTIVE, T0 + 10 * S)
    assert running == holder and not holds_by_rule(running, State.ACTIVE, T0 + 10 * S)[0]
    retrying = after_transition(running, State.RETRYABLE, T0 + 100 * S)
    assert retrying.since == T0 + 100 * S
    assert holds_by_rule(retrying, State.RETRYABLE, T0 + 159 * S)[0]


def test_a_states_rule_lets_go_for_good_only_once_its_job_is_finished() -> None:
    rule = sidekiq(Relock.ON_START)
    holder = Holder(rule, T0)
    assert released_since(holder, State.ACTIVE, T0 + 5) is None  # may relock when started
    assert released_since(holder, State.COMPLETED, T0 + 5) == T0 + 5
    kept = Holder(sidekiq(Relock.ON_START, states=frozenset([*LIVE, State.COMPLETED])), T0)
    assert released_since(kept, State.COMPLETED, T0 + 5) == T0 + 60 * S  # until_expired
    no_lock = Holder(StatesRule(StatesKind.RIVER, "unique_opts", frozenset(State)), T0)
    assert released_since(no_lock, State.COMPLETED, T0 + 5) is None  # held while retained


def test_sidekiq_counts_the_whole_seconds_until_at_into_the_lock() -> None:
    rule = sidekiq(Relock.ON_START)
    assert holder_for(rule, T0 + 999, None) == Holder(rule, T0 + 999)
    later = holder_for(rule, T0 + 999, T0 + 10_500)  # at.to_i - now.to_i = 10 s
    assert later.since == T0 + 999 and later.expires_at == T0 + 999 + 70 * S
    assert holder_for(rule, T0, T0 - 5 * S).expires_at == T0 + 60 * S  # at in the past


def test_a_river_holder_keeps_its_bucket_and_meets_only_its_own() -> None:
    rule = StatesRule(StatesKind.RIVER, "unique_opts", frozenset(LIVE), period_ms=3_600_000)
    start = T0 - T0 % 3_600_000
    holder = holder_for(rule, start + 5, None)
    assert holder.since == start
    assert holder_for(rule, start + 5, start + 3_600_000).since == start + 3_600_000
    assert holds_by_rule(holder, State.AVAILABLE, start + DAY, bucket=start)[0]
    held, why = holds_by_rule(holder, State.AVAILABLE, start + 5, bucket=start + 3_600_000)
    assert not held and "by_period bucket" in why
