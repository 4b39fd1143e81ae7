"""Per-key concurrency (`unique.concurrency`, gateway.core.concurrency): the policy's form,
the claim rule in the lifecycle, a property over any interleaving of one key's traffic, and
the processor's records of it (schemas, replay, explain)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.audit import LogRecord
from gateway.core import (
    EventOutcome,
    GatewayError,
    JobEvent,
    Request,
    State,
    decide,
    expire_job,
    parse_event,
    parse_request,
)
from gateway.core.concurrency import (
    CONCURRENCY_LIMIT,
    MAX_CONCURRENCY,
    claim_refusal,
    slot_free,
)
from gateway.core.entries import Entry
from gateway.core.errors import INVALID_REQUEST
from gateway.core.lifecycle import follow, on_key
from gateway.core.policy import UniquePolicy, parse_policy
from gateway.core.states import DEFAULT_UNIQUE_STATES
from tests.support import payload, validator
from tests.unit.test_dialect_records import Log
from tests.unit.test_replay import replayed

T0 = 1_770_000_000_000
S = 1000


def job(n: int, limit: Any = 2, **unique: Any) -> dict[str, Any]:
    return {"type": "report.build", "args": [{"tenant": "t1", "n": n}],
            "unique": {"keys": ["type", "args"], "args_keys": ["tenant"],
                       "concurrency": limit, **unique}}  # fmt: skip


def parsed(raw: dict[str, Any]) -> Request:
    request = parse_request(raw)
    assert isinstance(request, Request), request
    return request


def started(job_id: str, **fields: Any) -> JobEvent:
    return event(job_id, "job.started", **fields)


def event(job_id: str, event_type: str, **fields: Any) -> JobEvent:
    parsed_event = parse_event({"job_id": job_id, "type": event_type, **fields})
    assert isinstance(parsed_event, JobEvent), parsed_event
    return parsed_event


class Key:
    """One key's entries and job records, moved as the processor moves them."""

    def __init__(self) -> None:
        self.entries: tuple[Entry, ...] = ()
        self.jobs: dict[str, dict[str, Any]] = {}
        self.n = 0

    def submit(self, raw: dict[str, Any], at: int) -> Any:
        self.n += 1
        decision = decide(self.entries, parsed(raw), at, seed=b"%d" % self.n)
        self.entries = decision.entries
        if decision.job is not None:
            self.jobs[str(decision.job["id"])] = dict(decision.job)
        return decision

    def apply(self, job_id: str, ev: JobEvent, at: int) -> Any:
        result, after = on_key(self.jobs[job_id], self.entries, ev, at)
        if result.outcome is EventOutcome.APPLIED and result.job is not None:
            self.jobs[job_id] = result.job
            self.entries = after
        return result

    def expire(self, at: int) -> None:
        """What the processor's due stage does at `at`: every attempt past its lease ends."""
        for job_id, record in list(self.jobs.items()):
            result = expire_job(record, at)
            if result is not None and result.job is not None:
                self.jobs[job_id] = result.job
                self.entries = follow(self.entries, result.job, result, at)

    def active(self) -> list[str]:
        return [i for i, j in self.jobs.items() if j["state"] == State.ACTIVE]


# --- the policy's form --------------------------------------------------------------------------


def test_without_states_a_limit_holds_no_state_and_reads_back_from_its_record() -> None:
    policy = parse_policy({"keys": ["type"], "concurrency": 3})
    assert isinstance(policy, UniquePolicy)
    assert (policy.concurrency, policy.states) == (3, frozenset())
    shown = policy.to_dict()
    assert shown["concurrency"] == 3 and shown["states"] == []
    assert UniquePolicy.from_dict(shown) == policy


def test_listed_waiting_states_still_deduplicate() -> None:
    policy = parse_policy({"states": ["available", "scheduled"], "concurrency": 1})
    assert isinstance(policy, UniquePolicy)
    assert policy.states == {State.AVAILABLE, State.SCHEDULED}
    assert UniquePolicy.from_dict(policy.to_dict()) == policy


def test_a_policy_without_a_limit_is_as_it_was() -> None:
    policy = parse_policy({"keys": ["type"]})
    assert isinstance(policy, UniquePolicy)
    assert policy.concurrency is None and policy.states == DEFAULT_UNIQUE_STATES
    assert "concurrency" not in policy.to_dict()


@pytest.mark.parametrize("limit", [0, -1, MAX_CONCURRENCY + 1, 1.5, "2", True, [2], {}])
def test_a_limit_that_is_not_a_count_is_refused_naming_the_field(limit: Any) -> None:
    refused = parse_request(job(0, limit))
    assert isinstance(refused, GatewayError) and refused.code == INVALID_REQUEST
    assert refused.message.startswith(
        f"unique.concurrency must be a whole number from 1 to {MAX_CONCURRENCY}"
    )


def test_active_among_the_states_is_refused_with_a_limit() -> None:
    refused = parse_request(job(0, 2, states=["available", "active"]))
    assert isinstance(refused, GatewayError) and refused.code == INVALID_REQUEST
    assert refused.message.startswith('unique.states must not list "active" with unique.conc')
    under_options = parse_request({"type": "a.b", "args": [], "options": {"unique": {
        "concurrency": 1, "states": ["active"]}}})  # fmt: skip
    assert isinstance(under_options, GatewayError)
    assert under_options.message.startswith("options.unique.states must not list")


def test_a_debounce_beside_a_limit_needs_the_waiting_states_it_moves() -> None:
    debounce = {"delay": "PT5S"}
    refused = parse_request(job(0, 2, debounce=debounce))
    assert isinstance(refused, GatewayError) and refused.code == INVALID_REQUEST
    assert refused.message.startswith("unique.debounce with unique.concurrency needs unique.states")
    request = parsed(job(0, 2, debounce=debounce, states=["scheduled", "available"]))
    assert request.policy is not None and request.policy.concurrency == 2


def test_the_job_carries_its_limit_and_a_request_cannot_set_it() -> None:
    key = Key()
    accepted = key.submit({**job(0, 2), "unique_concurrency": 50}, T0)
    assert accepted.job["unique_concurrency"] == 2
    plain = Key().submit({"type": "a.b", "args": [], "unique_concurrency": 50, "unique": {}}, T0)
    assert "unique_concurrency" not in plain.job


# --- the claim rule -----------------------------------------------------------------------------


def test_jobs_wait_freely_and_at_most_the_limit_start() -> None:
    key = Key()
    ids = [str(key.submit(job(n), T0 + n).job["id"]) for n in range(5)]
    assert len(set(ids)) == 5  # no state holds the key: every request is a job
    results = [key.apply(i, started(i), T0 + S) for i in ids]
    assert [r.outcome for r in results] == [EventOutcome.APPLIED] * 2 + [EventOutcome.REFUSED] * 3
    refusal = results[2]
    assert refusal.error.code == CONCURRENCY_LIMIT and refusal.state is State.AVAILABLE
    assert refusal.error.message == (
        f"the concurrency limit of job {ids[2]}'s unique key is reached (2 of its jobs active, "
        "limit 2): it is not handed out until one of them ends"
    )
    assert key.jobs[ids[2]]["state"] == State.AVAILABLE
    # The waiting job runs when a slot frees: an ack, a failure into a retry, a cancel.
    key.apply(ids[0], event(ids[0], "job.completed"), T0 + 2 * S)
    assert key.apply(ids[2], started(ids[2]), T0 + 2 * S).outcome is EventOutcome.APPLIED
    assert key.apply(ids[3], started(ids[3]), T0 + 2 * S).error.code == CONCURRENCY_LIMIT
    key.apply(ids[1], event(ids[1], "job.cancelled"), T0 + 3 * S)
    assert key.apply(ids[3], started(ids[3]), T0 + 3 * S).outcome is EventOutcome.APPLIED


def test_a_second_claim_of_an_active_job_is_unchanged_not_refused() -> None:
    key = Key()
    only = str(key.submit(job(0, 1), T0).job["id"])
    key.apply(only, started(only), T0 + 1)
    again = key.apply(only, started(only), T0 + 2)
    assert again.outcome is EventOutcome.IGNORED and again.error is None


def test_the_waiting_dedupe_of_listed_states_and_the_limit_together() -> None:
    key = Key()
    first = key.submit(job(0, 1, states=["available"], on_conflict="ignore"), T0)
    assert key.submit(job(1, 1, states=["available"], on_conflict="ignore"), T0 + 1).outcome == (
        "ignored"
    )  # one waits
    first_id = str(first.job["id"])
    key.apply(first_id, started(first_id), T0 + 2)
    second = key.submit(job(2, 1, states=["available"], on_conflict="ignore"), T0 + 3)
    assert second.outcome == "accepted"  # a running job holds a slot, not the key
    second_id = str(second.job["id"])
    assert key.apply(second_id, started(second_id), T0 + 4).error.code == CONCURRENCY_LIMIT


def test_the_rule_counts_every_active_job_of_the_key_but_the_claimant() -> None:
    entries = [
        Entry(f"j{i}", state, T0, T0, "t", "default")
        for i, state in enumerate([State.ACTIVE, State.ACTIVE, State.AVAILABLE, State.COMPLETED])
    ]
    assert claim_refusal({"id": "j9", "unique_concurrency": 3}, entries) is None
    assert claim_refusal({"id": "j9", "unique_concurrency": 2}, entries) is not None
    assert claim_refusal({"id": "j0", "unique_concurrency": 2}, entries) is None
    assert claim_refusal({"id": "j9"}, entries) is None  # no limit of its own
    assert slot_free(2, 1) and not slot_free(2, 2) and not slot_free(1, 5)


OPS = st.lists(
    st.tuples(
        st.sampled_from(["request", "claim", "claim", "ack", "fail", "cancel", "expire"]),
        st.integers(0, 20),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(limit=st.integers(1, 3), ops=OPS)
def test_never_more_than_the_limit_active_whatever_the_interleaving(
    limit: int, ops: list[tuple[str, int]]
) -> None:
    """Requests, claims, acks, failures, cancels and lease expiries of one key in any order:
    never more than `limit` of its jobs active, by the records and by the entries."""
    key, at = Key(), T0
    lease = {"visibility_timeout_ms": 5 * S}
    for op, pick in ops:
        at += S
        # Claims go to waiting jobs, acks and failures to running ones: each op bites.
        running = op in ("ack", "fail")
        ids = [i for i, j in key.jobs.items() if (j["state"] == State.ACTIVE) == running]
        chosen = ids[pick % len(ids)] if ids else None
        if op == "request" or chosen is None:
            key.submit({**job(pick, limit), "retry": {"max_attempts": 3,
                        "initial_interval": "PT1S", "jitter": False}}, at)  # fmt: skip
        elif op == "claim":
            key.apply(chosen, started(chosen, **lease), at)
        elif op == "ack":
            key.apply(chosen, event(chosen, "job.completed"), at)
        elif op == "fail":
            key.apply(chosen, event(chosen, "job.failed", error={"message": "boom"}), at)
        elif op == "cancel":
            key.apply(chosen, event(chosen, "job.cancelled"), at)
        else:
            at += pick * S
            key.expire(at)
        assert len(key.active()) <= limit
        assert sum(1 for e in key.entries if e.state is State.ACTIVE) == len(key.active())


def test_the_worked_example_in_the_rules() -> None:
    """docs/rules.md, Concurrency: limit 2, workers with a 30 s lease."""
    key, lease = Key(), {"visibility_timeout_ms": 30 * S}
    a, b, c, d = (str(key.submit(job(n), T0).job["id"]) for n in range(4))
    assert all(key.jobs[i]["state"] == State.AVAILABLE for i in (a, b, c, d))
    for job_id in (a, b):
        assert key.apply(job_id, started(job_id, **lease), T0 + S).outcome is EventOutcome.APPLIED
    assert key.apply(c, started(c, **lease), T0 + S).error.code == CONCURRENCY_LIMIT
    key.apply(a, event(a, "job.completed"), T0 + 4 * S)
    assert key.apply(c, started(c, **lease), T0 + 4 * S).outcome is EventOutcome.APPLIED
    assert key.apply(d, started(d, **lease), T0 + 5 * S).error.code == CONCURRENCY_LIMIT
    key.expire(T0 + 31 * S)  # B's worker died at 5 s: its lease ends at 31 s
    assert key.jobs[b]["state"] == State.RETRYABLE
    assert key.apply(d, started(d, **lease), T0 + 31 * S).outcome is EventOutcome.APPLIED
    assert sorted(key.active()) == sorted([c, d])


# --- the processor's records: schemas, replay, explain -----------------------------------------


def test_replay_reproduces_refused_claims_and_explain_tells_the_limit() -> None:
    log = Log()
    decisions = [log.request(job(n, 1), T0 + n) for n in range(3)]
    for record in decisions:
        validator("decision.json").validate(record)
        assert record["outcome"] == "accepted" and record["policy"]["concurrency"] == 1
    key = decisions[0]["unique_key"]
    ids = [d["job_id"] for d in decisions]
    log.event(ids[0], key, T0 + S, type="job.started")
    log.event(ids[1], key, T0 + S, type="job.started")  # refused: the one slot is taken
    log.event(ids[0], key, T0 + 2 * S, type="job.completed")
    log.event(ids[1], key, T0 + 3 * S, type="job.started")  # the slot freed
    log.event(ids[2], key, T0 + 3 * S, type="job.started")  # refused again
    states = [payload(o.value) for o in log.outputs("job_states")]
    assert all(s["unique_concurrency"] == 1 for s in states)
    assert [(s["id"], s["state"]) for s in states[3:]] == [
        (ids[0], "active"), (ids[0], "completed"), (ids[1], "active"),
    ]  # fmt: skip
    replies = [payload(o.value) for o in log.outputs("decisions")]
    refusals = [r for r in replies if r.get("kind") == "event" and r["what"].get("error")]
    assert [r["what"]["error"]["code"] for r in refusals] == [CONCURRENCY_LIMIT] * 2
    trail = [LogRecord("decisions", 0, i, 0, o.key, o.value)
             for i, o in enumerate(log.outputs("decisions"))]  # fmt: skip
    report = replayed(log.log, trail)
    assert (report.verified, report.differences, report.findings) == (len(trail), [], [])
    text = log.explained()
    assert (
        f"refused (concurrency limit): job {ids[1]} stays available: the concurrency limit of "
        f"job {ids[1]}'s unique key is reached (1 of its jobs active, limit 1)"
    ) in text
