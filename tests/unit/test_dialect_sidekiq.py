"""sidekiq-unique-jobs (`"sidekiq"`): the job hash's lock options, as tables and stories.

The stories follow the gem's own code (lib/sidekiq_unique_jobs, v9): the lock is
taken at the push (lock.lua), released by the lock type's execute (until_executed
after perform, until_executing before it, until_expired never), on death (the
death handler) and on deletion (the API extension); lock_ttl is LockTTL's.
"""

from __future__ import annotations

from typing import Any

import pytest

from gateway.core import Judge, OnConflict, Outcome, State, decide, parse_request
from gateway.core.errors import GatewayError
from gateway.core.holder import Relock, StatesKind, StatesRule
from gateway.core.request import Fate, KeepDuplicate
from tests.unit.test_dialects import HOUR, MINUTE, T0, S, Story, ids, parsed

WAITING = {State.SCHEDULED, State.AVAILABLE, State.PENDING, State.RETRYABLE}


def job(lock: str | None = "until_executed", **fields: Any) -> dict[str, Any]:
    """MyJob.perform_async(1, 2) with sidekiq_options lock: ..."""
    out: dict[str, Any] = {"dialect": "sidekiq", "class": "MyJob", "queue": "default",
                           "args": [1, 2], **fields}  # fmt: skip
    if lock is not None:
        out["lock"] = lock
    return out


def refused(raw: dict[str, Any], code: str = "unsupported_option") -> str:
    error = parse_request(raw)
    assert isinstance(error, GatewayError), error
    assert error.code == code, error
    return error.message


# --- the mapping -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("lock", "name", "states", "relock"),
    [
        ("until_executed", "until_executed", WAITING | {State.ACTIVE}, Relock.ON_START),
        ("until_completed", "until_executed", WAITING | {State.ACTIVE}, Relock.ON_START),
        ("until_performed", "until_executed", WAITING | {State.ACTIVE}, Relock.ON_START),
        ("until_processed", "until_executed", WAITING | {State.ACTIVE}, Relock.ON_START),
        ("until_successfully_completed", "until_executed", WAITING | {State.ACTIVE},
         Relock.ON_START),
        ("until_executing", "until_executing", WAITING, Relock.ON_RETRY),
        ("while_enqueued", "until_executing", WAITING, Relock.ON_RETRY),
    ],
)  # fmt: skip
def test_locks_map_onto_holder_rules(
    lock: str, name: str, states: set[State], relock: Relock
) -> None:
    request = parsed(job(lock))
    assert request.holder_rule == StatesRule(
        StatesKind.SIDEKIQ, name, frozenset(states), relock=relock
    )
    assert request.policy is not None and request.policy.judge is Judge.HOLDER
    assert request.policy.on_conflict is OnConflict.IGNORE  # log, the default


def test_until_expired_holds_through_completion_for_its_ttl() -> None:
    rule = parsed(job("until_expired", lock_ttl=3600)).holder_rule
    assert rule == StatesRule(
        StatesKind.SIDEKIQ, "until_expired", frozenset(WAITING | {State.ACTIVE, State.COMPLETED}),
        lock_ms=3_600_000, relock=Relock.ON_START,
    )  # fmt: skip


def test_the_job_hash_maps_onto_the_job() -> None:
    at = (T0 + HOUR) / 1000 + 0.25
    env = parsed(job(at=at, retry=3, jid="b4a577edbccf1d805744efa9")).envelope
    assert (env.type, env.queue, env.args, env.max_attempts) == ("MyJob", "default", [1, 2], 4)
    assert env.scheduled_at == T0 + HOUR + 250
    assert env.raw["jid"] == "b4a577edbccf1d805744efa9" and "class" not in env.raw
    assert parsed(job()).envelope.max_attempts == 26  # retry true: 25 retries
    assert parsed(job(retry=False)).envelope.max_attempts == 1
    assert parsed(job(None)).policy is None  # no lock: no uniqueness at all


def test_the_digest_is_class_queue_and_lock_args_under_the_prefix() -> None:
    def key(**fields: Any) -> str | None:
        return parsed(job(**fields)).unique_key

    base = key()
    assert base == key(lock="until_executing", lock_ttl=60)  # the lock is the holder's
    assert base != key(args=[1, 3]) and base != key(queue="other") and base != key(**{"class": "X"})
    assert base == key(lock_args=[1, 2], args=[1, 2])
    assert key(lock_args=[1], args=[1, 2]) == key(lock_args=[1], args=[1, 99])
    assert base != key(lock_prefix="other")
    assert key(unique_across_queues=True) == key(unique_across_queues=True, queue="other")
    assert key(unique_across_workers=True) == key(unique_across_workers=True, **{"class": "X"})
    assert key(unique_across_queues=True) != base


# --- the stories -------------------------------------------------------------------------------


def test_until_executed_holds_until_the_job_succeeds_retries_included() -> None:
    story = Story()
    first = story.submit(job(), T0)
    again = story.submit(job(), T0 + 1)
    assert again.outcome is Outcome.IGNORED and ids(again) == ids(first)
    story.event(ids(first), T0 + 2, type="job.started")
    assert story.submit(job(), T0 + 3).outcome is Outcome.IGNORED
    story.event(ids(first), T0 + 4, type="job.failed", attempt=1)
    assert story.state_of(ids(first)) is State.RETRYABLE
    assert story.submit(job(), T0 + 5).outcome is Outcome.IGNORED
    story.event(ids(first), T0 + 6, type="job.started")
    story.event(ids(first), T0 + 7, type="job.completed")
    assert story.submit(job(), T0 + 8).outcome is Outcome.ACCEPTED


@pytest.mark.parametrize("lock", ["until_executed", "until_executing", "until_expired"])
@pytest.mark.parametrize("end", ["job.discarded", "job.cancelled"])
def test_a_dead_or_deleted_job_lets_go_of_every_lock(lock: str, end: str) -> None:
    story = Story()
    first = story.submit(job(lock, lock_ttl=3600), T0)
    story.event(ids(first), T0 + 1, type=end)
    assert story.submit(job(lock, lock_ttl=3600), T0 + 2).outcome is Outcome.ACCEPTED


def test_until_executing_lets_go_when_the_job_starts_and_relocks_on_a_retry() -> None:
    story = Story()
    first = story.submit(job("until_executing"), T0)
    assert story.submit(job("until_executing"), T0 + 1).outcome is Outcome.IGNORED
    story.event(ids(first), T0 + 2, type="job.started")
    second = story.submit(job("until_executing"), T0 + 3)
    assert second.outcome is Outcome.ACCEPTED
    story.event(ids(second), T0 + 4, type="job.started")
    story.event(ids(first), T0 + 5, type="job.failed", attempt=1)  # relocks
    third = story.submit(job("until_executing"), T0 + 6)
    assert third.outcome is Outcome.IGNORED and ids(third) == ids(first)


def test_until_expired_holds_for_its_ttl_even_once_the_job_is_done() -> None:
    story = Story()
    first = story.submit(job("until_expired", lock_ttl=3600), T0)
    story.event(ids(first), T0 + 1, type="job.started")
    story.event(ids(first), T0 + 2, type="job.completed")
    assert story.submit(job("until_expired", lock_ttl=3600), T0 + HOUR - 1).outcome is (
        Outcome.IGNORED
    )
    assert story.submit(job("until_expired", lock_ttl=3600), T0 + HOUR).outcome is (
        Outcome.ACCEPTED
    )


def test_lock_ttl_counts_the_whole_seconds_until_at() -> None:
    # LockTTL: lock_ttl + [0, at.to_i - now.to_i].max, from the push.
    story = Story()
    at = (T0 + 10 * MINUTE + 900) / 1000  # 600.9 s ahead: 600 whole seconds
    first = story.submit(job(lock_ttl=60, at=at), T0 + 100)
    assert first.holder is not None and first.holder.expires_at == T0 + 100 + 660 * S
    assert story.submit(job(), T0 + 100 + 660 * S - 1).outcome is Outcome.IGNORED
    assert story.submit(job(), T0 + 100 + 660 * S).outcome is Outcome.ACCEPTED


def test_an_expired_until_executed_lock_is_taken_again_when_the_job_starts() -> None:
    story = Story()
    first = story.submit(job(lock_ttl=60), T0)
    assert story.submit(job(), T0 + 60 * S).outcome is Outcome.ACCEPTED  # expired: a new one
    late = Story()
    only = late.submit(job(lock_ttl=60), T0)
    late.event(ids(only), T0 + HOUR, type="job.started")  # execute locks again, afresh
    assert late.submit(job(), T0 + HOUR + 59 * S).outcome is Outcome.IGNORED
    assert late.submit(job(), T0 + HOUR + 60 * S).outcome is Outcome.ACCEPTED
    assert first.outcome is Outcome.ACCEPTED


def test_on_conflict_raise_refuses_the_duplicate_with_the_gem_s_conflict() -> None:
    story = Story()
    first = story.submit(job(on_conflict="raise"), T0)
    dup = story.submit(job(on_conflict="raise"), T0 + 1)
    assert dup.outcome is Outcome.REJECTED and ids(dup) == ids(first)
    assert dup.error is not None and dup.error.code == "SidekiqUniqueJobs::Conflict"
    client = story.submit(job(on_conflict={"client": "raise", "server": "reschedule"}), T0 + 2)
    assert client.outcome is Outcome.REJECTED


def test_on_conflict_replace_with_until_executing_replaces_the_waiting_job() -> None:
    story = Story()
    first = story.submit(job("until_executing", on_conflict="replace"), T0)
    assert story.state_of(ids(first)) is State.AVAILABLE
    second = story.submit(job("until_executing", on_conflict="replace", jid="b4a5"), T0 + 1)
    assert second.outcome is Outcome.REPLACED and second.existing is not None
    assert [e.job_id for e in second.cancelled] == [ids(first)]
    assert second.job is not None and second.job["jid"] == "b4a5"  # the new job is pushed
    assert story.state_of(ids(first)) is None  # deleted: it let go, its entry is dropped
    story.event(ids(second), T0 + 2, type="job.started")  # let go: nothing to replace
    third = story.submit(job("until_executing", on_conflict="replace"), T0 + 3)
    assert third.outcome is Outcome.ACCEPTED and third.cancelled == ()


def test_a_job_without_a_lock_is_never_a_duplicate() -> None:
    story = Story()
    assert story.submit(job(None), T0).outcome is Outcome.ACCEPTED
    assert story.submit(job(None), T0 + 1).outcome is Outcome.ACCEPTED


# --- refusals ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "option"),
    [
        ({"lock": "while_executing_reject"}, "lock while_executing_reject"),
        ({"lock_limit": 2}, "lock_limit above 1"),
        ({"lock": "until_and_while_executing", "lock_limit": 2},
         "lock_limit above 1 with lock until_and_while_executing"),
        ({"lock": "while_executing", "on_conflict": "reject"},
         "on_conflict reject with lock while_executing"),
        ({"lock": "while_busy", "on_conflict": {"server": "replace"}},
         "on_conflict.server replace with lock while_executing"),
        ({"lock": "until_and_while_executing", "on_conflict": {"server": "reject"}},
         "on_conflict.server reject with lock until_and_while_executing"),
        ({"lock": "until_and_while_executing", "on_conflict": "reject"},
         "on_conflict reject with lock until_and_while_executing"),
        ({"lock": "while_executing", "lock_ttl": 60}, "lock_ttl with lock while_executing"),
        ({"lock_timeout": 5}, "lock_timeout above 0"),
        ({"on_conflict": "replace"}, "on_conflict replace with lock until_executed"),
        ({"lock": "until_expired", "lock_ttl": 60, "on_conflict": "replace"},
         "on_conflict replace with lock until_expired"),
    ],
)  # fmt: skip
def test_options_the_gateway_lacks_are_refused_by_name(fields: dict[str, Any], option: str) -> None:
    message = refused(job(**fields))
    assert message.startswith(f"{option} is not supported yet: ")


def test_a_server_reject_refusal_names_what_does_work() -> None:
    fields = {"lock": "until_and_while_executing", "on_conflict": "reject"}
    message = refused(job(**fields))
    assert "on_conflict.client may still be reject" in message
    both = {"client": "reject", "server": "log"}
    kept = parsed(job("until_and_while_executing", on_conflict=both)).keep_duplicate
    assert kept == KeepDuplicate(Fate.DEAD)


@pytest.mark.parametrize(
    ("on_conflict", "schedule_in", "kept"),
    [
        ("reject", None, KeepDuplicate(Fate.DEAD)),
        ({"client": "reject", "server": "raise"}, None, KeepDuplicate(Fate.DEAD)),
        ("reschedule", None, KeepDuplicate(Fate.RESCHEDULE, 5 * S)),
        ({"client": "reschedule"}, 30, KeepDuplicate(Fate.RESCHEDULE, 30 * S)),
        ("reschedule", 1.5, KeepDuplicate(Fate.RESCHEDULE, 1500)),
        ("log", 30, None),
        ({"client": "log", "server": "reject"}, None, None),  # the server's: unused here
        ("raise", None, None),
    ],
)  # fmt: skip
def test_reject_and_reschedule_keep_the_duplicate_as_the_client_s_strategy(
    on_conflict: Any, schedule_in: int | None, kept: KeepDuplicate | None
) -> None:
    fields = {} if schedule_in is None else {"schedule_in": schedule_in}
    server = on_conflict.get("server") if isinstance(on_conflict, dict) else on_conflict
    for lock in ("until_executed", "until_executing", "until_and_while_executing"):
        if lock == "until_and_while_executing" and server == "reject":
            continue  # refused: the server's reject with a runtime lock
        request = parsed(job(lock, on_conflict=on_conflict, **fields))
        assert request.keep_duplicate == kept


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"class": None}, "class is required"),
        ({"args": {"a": 1}}, "args must be an array"),
        ({"lock": "until_forever"}, 'lock "until_forever" has no implementation'),
        ({"lock": "until_expired"}, "lock until_expired needs lock_ttl"),
        ({"lock_ttl": -5}, "lock_ttl must be a whole number of seconds"),
        ({"lock_ttl": "1h"}, "lock_ttl must be a whole number of seconds"),
        ({"lock_limit": 0}, "lock_limit must be a whole number, at least 1"),
        ({"lock": "while_executing", "lock_limit": 1001}, "lock_limit must be at most 1000"),
        ({"lock_timeout": -1}, "lock_timeout must be"),
        ({"lock_args_method": "lock_args"}, "lock_args_method is Ruby code"),
        ({"lock_args": "1"}, "lock_args must be an array"),
        (
            {"on_conflict": "shout"},
            "on_conflict must be one of log, raise, reject, replace, reschedule",
        ),
        ({"on_conflict": {"client": 1}}, "on_conflict.client must be one of log"),
        ({"on_conflict": "reschedule", "schedule_in": 0}, "schedule_in must be a number"),
        ({"on_conflict": "reschedule", "schedule_in": "5"}, "schedule_in must be a number"),
        ({"on_conflict": "reschedule", "schedule_in": True}, "schedule_in must be a number"),
        ({"on_conflict": "reschedule", "schedule_in": 86_401}, "schedule_in must be a number"),
        ({"lock": "while_executing", "schedule_in": -5}, "schedule_in must be a number"),
        ({"on_conflict": {"client": "log", "worker": "log"}}, "on_conflict.worker"),
        ({"at": "tomorrow"}, "at must be a number"),
        ({"at": -1}, "at must be from"),
        ({"retry": "yes"}, "retry must be true, false or a number"),
        ({"unique_across_queues": "yes"}, "unique_across_queues must be true or false"),
    ],
)
def test_bad_options_are_refused_naming_the_field(fields: dict[str, Any], message: str) -> None:
    assert message in refused(job(**fields), "invalid_request")


def test_options_that_change_nothing_here_are_accepted() -> None:
    for fields in ({"lock_timeout": 0}, {"lock_limit": 1}, {"lock_ttl": 0},
                   {"lock_args_method": None}, {"on_conflict": "log"},
                   {"on_conflict": {"client": "log", "server": "reschedule"}}):  # fmt: skip
        request = parsed(job(**fields))
        assert request.policy is not None and request.policy.on_conflict is OnConflict.IGNORE
    assert decide((), parsed(job(lock_expiration=60)), T0, seed=b"s").holder is not None


# --- runtime locks: per-key concurrency ---------------------------------------------------------


@pytest.mark.parametrize("lock", ["while_executing", "around_perform", "while_busy",
                                  "while_working"])  # fmt: skip
@pytest.mark.parametrize(("lock_limit", "limit"), [(None, 1), (1, 1), (3, 3)])
def test_while_executing_is_a_concurrency_limit_with_nothing_held_at_the_push(
    lock: str, lock_limit: int | None, limit: int
) -> None:
    fields = {} if lock_limit is None else {"lock_limit": lock_limit}
    request = parsed(job(lock, **fields))
    assert request.holder_rule is None and request.policy is not None
    assert (request.policy.concurrency, request.policy.states) == (limit, frozenset())
    # The gem's runtime digest is its own (":RUN"): it never meets an until_* lock's.
    assert request.unique_key != parsed(job("until_executed")).unique_key
    story = Story()
    pushed = [story.submit(job(lock, **fields), T0 + n) for n in range(limit + 2)]
    assert {p.outcome for p in pushed} == {Outcome.ACCEPTED}
    assert {(p.job or {}).get("unique_concurrency") for p in pushed} == {limit}


def test_until_and_while_executing_holds_while_waiting_and_runs_one_at_a_time() -> None:
    request = parsed(job("until_and_while_executing"))
    assert request.policy is not None and request.policy.concurrency == 1
    assert request.holder_rule == StatesRule(
        StatesKind.SIDEKIQ, "until_and_while_executing", frozenset(WAITING),
        relock=Relock.ON_RETRY,
    )  # fmt: skip
    assert request.unique_key == parsed(job("until_executing")).unique_key  # the gem's digest
    story = Story()
    first = story.submit(job("until_and_while_executing"), T0)
    assert story.submit(job("until_and_while_executing"), T0 + 1).outcome is Outcome.IGNORED
    story.event(ids(first), T0 + 2, type="job.started")
    second = story.submit(job("until_and_while_executing"), T0 + 3)  # the first runs: free
    assert second.outcome is Outcome.ACCEPTED
    assert (second.job or {}).get("unique_concurrency") == 1


@pytest.mark.parametrize(
    "on_conflict", ["log", "raise", "reschedule", {"client": "log", "server": "reschedule"}]
)
def test_a_runtime_lock_s_job_waits_whatever_the_server_strategy(on_conflict: Any) -> None:
    request = parsed(job("while_executing", on_conflict=on_conflict))
    assert request.policy is not None and request.policy.concurrency == 1
