"""Paused queues: the command that pauses and resumes one (gateway.core.queues), and the
rule that follows from it in the lifecycle (`paused` of apply_job_event and on_key): a
claim is refused with `queue_paused`, everything else applies as it would."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.core import (
    EventOutcome,
    IgnoredReason,
    JobEvent,
    State,
    apply_job_event,
    parse_event,
    parse_request,
)
from gateway.core.engine import entry_of
from gateway.core.errors import INVALID_REQUEST, GatewayError
from gateway.core.job_events import EVENT_TYPES
from gateway.core.jobs import accepted_job
from gateway.core.lifecycle import on_key
from gateway.core.queues import (
    QUEUE_PAUSED,
    QueueCommand,
    newer,
    newer_state,
    parse_queue_command,
    paused_refusal,
    queue_command,
    queue_state,
)
from gateway.core.times import format_rfc3339

T0 = 1_770_000_000_000
JOB = "019078a3-b5c7-7def-8a12-3456789abcde"
QUEUE = "mail"


def new_job(**fields: Any) -> dict[str, Any]:
    request = parse_request({"type": "email.send", "args": [1], "queue": QUEUE, **fields})
    assert not isinstance(request, GatewayError), request
    env = request.envelope
    return accepted_job(env, JOB, None, T0, env.scheduled_at)


def event(**fields: Any) -> JobEvent:
    parsed = parse_event({"job_id": JOB, **fields})
    assert isinstance(parsed, JobEvent), parsed
    return parsed


def moved(job: dict[str, Any], at: int, **fields: Any) -> dict[str, Any]:
    result = apply_job_event(job, event(**fields), at)
    assert result.outcome is EventOutcome.APPLIED, result.error
    assert result.job is not None
    return result.job


def active_job() -> dict[str, Any]:
    return moved(new_job(), T0 + 10, type="job.started", claim_id="c1", worker_id="w1")


# -- the command ---------------------------------------------------------------------

V = (1_770_000_000_000, "c0ffee")


@pytest.mark.parametrize("paused", [True, False])
@pytest.mark.parametrize("queue", ["mail", "default", "a", "q-1.v_2", "0", "a" * 255])
def test_a_command_round_trips(queue: str, paused: bool) -> None:
    data = queue_command(queue, paused, V)
    assert orjson.loads(data) == {"queue": queue, "paused": paused, "version": list(V)}
    assert parse_queue_command(data) == QueueCommand(queue, paused, V)
    assert parse_queue_command(data.decode()) == QueueCommand(queue, paused, V)


@given(queue=st.from_regex(r"[a-z0-9][a-z0-9._-]{0,254}", fullmatch=True), paused=st.booleans())
def test_every_valid_queue_name_round_trips(queue: str, paused: bool) -> None:
    assert parse_queue_command(queue_command(queue, paused, V)) == QueueCommand(queue, paused, V)


@pytest.mark.parametrize(
    "data", [b"", b"{", b"not json", b'{"queue": "mail", "paused": true', "{'queue': 1}", b"\xff"]
)
def test_bad_json_is_refused(data: bytes | str) -> None:
    command = parse_queue_command(data)
    assert isinstance(command, GatewayError) and command.code == INVALID_REQUEST
    assert "JSON" in command.message


@pytest.mark.parametrize(
    "value",
    [
        None,
        [],
        ["mail", True],
        "mail",
        1,
        {},
        {"queue": "mail"},
        {"paused": True},
        {"queue": "mail", "paused": True},
        {"queue": "mail", "paused": True, "version": [1, "a"], "extra": 1},
        {"queue": "mail", "paused": True, "version": [1, "a"], "op": "pause"},
        {"name": "mail", "paused": True, "version": [1, "a"]},
        {"queue": "mail", "paused": True, "version": [1]},
        {"queue": "mail", "paused": True, "version": [-1, "a"]},
        {"queue": "mail", "paused": True, "version": [1, ""]},
        {"queue": "mail", "paused": True, "version": [True, "a"]},
        {"queue": "mail", "paused": True, "version": [1, "a" * 256]},
        {"queue": "mail", "paused": True, "version": "1a"},
    ],
)
def test_anything_but_exactly_queue_paused_and_a_version_is_refused(value: object) -> None:
    command = parse_queue_command(orjson.dumps(value))
    assert isinstance(command, GatewayError) and command.code == INVALID_REQUEST


@pytest.mark.parametrize(
    "queue", ["", "Mail", "_mail", ".mail", "-mail", "a b", "mail/x", "é", "a" * 256, 5, None, []]
)
def test_bad_queue_names_are_refused(queue: object) -> None:
    command = parse_queue_command(orjson.dumps({"queue": queue, "paused": True, "version": V}))
    assert isinstance(command, GatewayError) and command.code == INVALID_REQUEST
    assert "queue name" in command.message


@pytest.mark.parametrize("paused", [1, 0, "true", "false", None, [], {}, 1.0])
def test_paused_must_be_a_bool(paused: object) -> None:
    command = parse_queue_command(orjson.dumps({"queue": "mail", "paused": paused, "version": V}))
    assert isinstance(command, GatewayError) and command.code == INVALID_REQUEST
    assert "paused" in command.message


@given(
    st.dictionaries(
        st.sampled_from(["queue", "paused", "version", "x"]),
        st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=10),
    )
    | st.lists(st.integers(0, 3), max_size=3)
    | st.text(max_size=10)
)
def test_parse_queue_command_never_raises(value: Any) -> None:
    command = parse_queue_command(orjson.dumps(value))
    assert isinstance(command, QueueCommand | GatewayError)
    if isinstance(command, QueueCommand):
        assert value == {"queue": command.queue, "paused": command.paused}


def test_the_published_state_of_a_pause_and_a_resume() -> None:
    assert queue_state(QueueCommand("mail", True, V), T0) == {
        "queue": "mail", "paused": True, "status": "paused", "paused_at": format_rfc3339(T0),
        "version": list(V),
    }  # fmt: skip
    assert queue_state(QueueCommand("mail", False, V), T0 + 5) == {
        "queue": "mail", "paused": False, "status": "active",
        "resumed_at": format_rfc3339(T0 + 5), "version": list(V),
    }  # fmt: skip


def test_the_refusal_names_the_queue_and_the_job() -> None:
    error = paused_refusal(JOB, "mail")
    assert error.code == QUEUE_PAUSED == "queue_paused"
    assert "mail" in error.message and JOB in error.message


# -- the rule: a claim on a paused queue is refused ------------------------------------


@pytest.mark.parametrize("claim", [{"type": "job.started"}, {"state": "active"}])
def test_a_claim_on_a_paused_queue_is_refused_and_the_job_unchanged(
    claim: dict[str, Any],
) -> None:
    job = new_job()
    before = orjson.loads(orjson.dumps(job))
    result = apply_job_event(job, event(**claim, claim_id="c1", worker_id="w1"), T0 + 10, True)
    assert result.outcome is EventOutcome.REFUSED
    assert result.error is not None and result.error.code == QUEUE_PAUSED
    assert QUEUE in result.error.message and JOB in result.error.message
    assert result.reason is IgnoredReason.NOT_ALLOWED
    assert result.previous_state is result.state is State.AVAILABLE
    assert result.job is not None and result.job == before and job == before
    assert "claim_id" not in result.job and result.job["attempt"] == 0


def test_the_same_claim_applies_once_the_queue_is_not_paused() -> None:
    job = new_job()
    result = apply_job_event(job, event(type="job.started"), T0 + 10, False)
    assert result.outcome is EventOutcome.APPLIED and result.state is State.ACTIVE
    assert apply_job_event(job, event(type="job.started"), T0 + 10).state is State.ACTIVE


@pytest.mark.parametrize(
    "fields",
    [
        {"scheduled_at": format_rfc3339(T0 + 1_000)},  # scheduled, due by the claim
        {"scheduled_at": format_rfc3339(T0 + 10**9)},  # scheduled, not due
    ],
)
def test_a_claim_of_a_scheduled_job_on_a_paused_queue_is_refused_as_paused(
    fields: dict[str, Any],
) -> None:
    job = new_job(**fields)
    assert job["state"] == "scheduled"
    result = apply_job_event(job, event(type="job.started"), T0 + 5_000, True)
    assert result.outcome is EventOutcome.REFUSED and result.error is not None
    assert result.error.code == QUEUE_PAUSED and result.job == job


def test_a_due_retry_on_a_paused_queue_is_not_handed_out() -> None:
    failed = moved(active_job(), T0 + 20, type="job.failed", error={"message": "boom"})
    assert failed["state"] == "retryable"
    later = T0 + 10**9  # well past its backoff
    result = apply_job_event(failed, event(type="job.started"), later, True)
    assert result.outcome is EventOutcome.REFUSED and result.error is not None
    assert result.error.code == QUEUE_PAUSED and result.job == failed
    assert apply_job_event(failed, event(type="job.started"), later).state is State.ACTIVE


def test_a_repeated_start_of_an_active_job_is_unchanged_paused_or_not() -> None:
    job = active_job()
    repeat = event(type="job.started", claim_id="c1", worker_id="w1")
    running = apply_job_event(job, repeat, T0 + 20, False)
    assert running.outcome is EventOutcome.IGNORED
    assert running.reason is IgnoredReason.UNCHANGED
    assert apply_job_event(job, repeat, T0 + 20, True) == running


# -- everything else still applies on a paused queue --------------------------------------


@pytest.mark.parametrize(
    ("fields", "state"),
    [
        ({"type": "job.completed", "result": {"ok": True}}, State.COMPLETED),
        ({"type": "job.failed", "error": {"message": "boom"}}, State.RETRYABLE),
        ({"type": "job.failed", "error": {"message": "x", "retryable": False}}, State.DISCARDED),
        ({"type": "job.heartbeat", "visibility_timeout_ms": 60_000}, State.ACTIVE),
        ({"type": "job.cancelled"}, State.CANCELLED),
        ({"type": "job.enqueued", "claim_id": "c1"}, State.AVAILABLE),
        ({"type": "job.discarded"}, State.DISCARDED),
        ({"type": "job.retrying"}, State.RETRYABLE),
    ],
)
def test_an_active_job_on_a_paused_queue_still_finishes_fails_beats_and_cancels(
    fields: dict[str, Any], state: State
) -> None:
    job = active_job()
    paused = apply_job_event(job, event(**fields), T0 + 100, True)
    running = apply_job_event(job, event(**fields), T0 + 100, False)
    assert paused.outcome is EventOutcome.APPLIED, paused.error
    assert paused.state is state
    assert paused == running


@pytest.mark.parametrize(
    "fields",
    [
        {"type": "job.cancelled"},
        {"type": "job.scheduled", "scheduled_at": format_rfc3339(T0 + 10**9)},
        {"type": "job.enqueued"},
    ],
)
def test_a_waiting_job_on_a_paused_queue_can_still_be_cancelled_or_moved(
    fields: dict[str, Any],
) -> None:
    job = new_job()
    paused = apply_job_event(job, event(**fields), T0 + 100, True)
    assert paused == apply_job_event(job, event(**fields), T0 + 100, False)
    assert paused.outcome is not EventOutcome.REFUSED


def _in_state(state: State) -> dict[str, Any]:
    if state is State.ACTIVE:
        return active_job()
    if state in (State.COMPLETED, State.RETRYABLE, State.DISCARDED, State.CANCELLED):
        return {**active_job(), "state": str(state)}
    return {**new_job(), "state": str(state)}


_NOT_CLAIMS = [{"type": name} for name in EVENT_TYPES if name != "job.started"] + [
    {"state": str(s)} for s in State if s is not State.ACTIVE
]


@given(
    state=st.sampled_from(list(State)),
    fields=st.sampled_from(_NOT_CLAIMS),
    extra=st.sampled_from(
        [{}, {"error": {"message": "m"}}, {"result": 1}, {"claim_id": "c1"}, {"attempt": 3}]
    ),
    at=st.integers(T0 + 20, T0 + 10**9),
)
def test_paused_changes_nothing_but_claims(
    state: State, fields: dict[str, Any], extra: dict[str, Any], at: int
) -> None:
    job = _in_state(state)
    ev = event(**fields, **extra)
    assert apply_job_event(job, ev, at, True) == apply_job_event(job, ev, at, False)
    entries = (entry_of(job),)
    assert on_key(job, entries, ev, at, paused=True) == on_key(job, entries, ev, at)


def test_an_unknown_job_or_an_invalid_event_is_the_same_paused_or_not() -> None:
    unknown = apply_job_event(None, event(type="job.started"), T0, True)
    assert unknown.outcome is EventOutcome.IGNORED
    assert unknown.reason is IgnoredReason.UNKNOWN_JOB
    bad = parse_event({"job_id": JOB, "type": "job.nope"})
    assert isinstance(bad, GatewayError)
    assert apply_job_event(new_job(), bad, T0, True).outcome is EventOutcome.INVALID


# -- on_key: the key's entries do not move on a refused claim ---------------------------


def test_on_key_refuses_a_paused_claim_and_keeps_the_entries() -> None:
    job = new_job()
    entries = (entry_of(job),)
    result, after = on_key(job, entries, event(type="job.started"), T0 + 10, paused=True)
    assert result.outcome is EventOutcome.REFUSED
    assert result.error is not None and result.error.code == QUEUE_PAUSED
    assert after == entries and result.job == job


def test_on_key_moves_the_entries_for_events_other_than_claims_when_paused() -> None:
    job = active_job()
    entries = (entry_of(job),)
    assert entries[0].state is State.ACTIVE
    result, after = on_key(job, entries, event(type="job.completed"), T0 + 50, paused=True)
    assert result.outcome is EventOutcome.APPLIED and result.state is State.COMPLETED
    assert [e.state for e in after] == [State.COMPLETED]
    plain = on_key(job, entries, event(type="job.completed"), T0 + 50)
    assert (result, after) == plain


def test_on_key_claims_when_not_paused() -> None:
    job = new_job()
    result, after = on_key(job, (entry_of(job),), event(type="job.started"), T0 + 10)
    assert result.outcome is EventOutcome.APPLIED and result.state is State.ACTIVE
    assert [e.state for e in after] == [State.ACTIVE]


@given(
    st.lists(st.tuples(st.booleans(), st.integers(0, 5), st.sampled_from("abc")), min_size=1,
             max_size=6),
    st.randoms(use_true_random=False),
)  # fmt: skip
def test_every_order_of_the_same_commands_ends_in_the_newest(
    commands: list[tuple[bool, int, str]], random: Any
) -> None:
    """Two partitions read the same commands in two orders: both hold the newest."""
    by_version = {(at, name): paused for paused, at, name in commands}  # ids are unique
    parsed = [QueueCommand("mail", paused, version) for version, paused in by_version.items()]
    ends = []
    for order in (parsed, random.sample(parsed, len(parsed))):
        held = None
        for t, command in enumerate(order):
            if newer(command, held):
                held = queue_state(command, T0 + t)
        assert held is not None
        ends.append((held["paused"], held["version"]))
    newest = max(parsed, key=lambda c: c.version)
    assert ends[0] == ends[1] == (newest.paused, list(newest.version))


def test_a_view_keeps_a_published_state_only_if_newer():
    old, new = (queue_state(QueueCommand("mail", p, v), T0) for p, v in
                ((True, (T0, "a")), (False, (T0 + 1, "a"))))  # fmt: skip
    assert newer_state(old, None) and newer_state(new, old)
    assert not newer_state(old, new) and not newer_state(new, new)
    assert not newer_state({"queue": "mail", "paused": True}, None)  # no version: not ours
