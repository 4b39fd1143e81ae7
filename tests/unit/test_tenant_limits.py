"""Tenant limits: the rule (core/tenant_limits.py) and its stories over every stage (router,
a tenant's home, the jobs' routes) with in-memory stores, in any interleaving of the
partitions' logs: a tenant's waiting jobs never pass max_queue_depth, every place is given
back once (a duplicate at once, a job at its first start or its end), refusals are
answered as decisions, and a request without the mark is decided as before."""

from __future__ import annotations

from collections import deque
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway import wire
from gateway.audit.explain import explain_record
from gateway.core.errors import GatewayError, Invalid
from gateway.core.tenant_limits import (
    TENANT_LIMIT_EXCEEDED,
    TenantLimits,
    TenantState,
    admit,
    parse_limits,
    release,
    set_limits,
    tenant_command,
)
from gateway.core.tenants import for_tenant
from gateway.partitioner import partition_for
from gateway.sdk.prepare import Outgoing, prepare
from gateway.stage.records import Output
from gateway.stage.trail import JOB
from tests.unit.test_ids import PARTITIONS, Gateway

T = "acme"
HOME = wire.tenant_home(T)
COUNTED = {wire.TENANT_SCOPED_HEADER: b"1", wire.TENANT_COUNTED_HEADER: b"1"}

# -- the rule ---------------------------------------------------------------------------


def rate(limit: int, period_ms: int) -> TenantState:
    return set_limits(None, T, TenantLimits(rate_limit=limit, rate_period_ms=period_ms))


@settings(max_examples=200, deadline=None)
@given(
    limit=st.integers(1, 20),
    period=st.sampled_from([10, 1000, 3000]),
    gaps=st.lists(st.integers(0, 400), min_size=1, max_size=200),
)
def test_the_enqueue_rate_admits_a_burst_then_the_limit_per_period(limit, period, gaps) -> None:
    state, now, admitted = rate(limit, period), 0, []
    for gap in gaps:
        now += gap
        state, breach = admit(state, T, False, now)
        if breach is None:
            admitted.append(now)
        else:
            assert breach.limit == "max_enqueue_rate" and breach.retry_at_ms > now
            state = release(state, False)  # the places are not what this tests
    # The documented bound: any window of k periods holds at most (k + 1) * limit - 1.
    for k in (1, 3):
        for i, start in enumerate(admitted):
            inside = sum(1 for t in admitted[i:] if t < start + k * period)
            assert inside <= (k + 1) * limit - 1


def test_a_refused_request_uses_up_nothing_and_the_retry_time_is_right() -> None:
    state = rate(2, 1000)
    for _ in range(2):
        state, breach = admit(state, T, False, 0)
        assert breach is None
    state, breach = admit(state, T, False, 0)
    assert breach is not None and breach.retry_at_ms == 500  # one every period / limit
    assert state.refused == 1 and state.waiting == 2
    assert admit(state, T, False, 499)[1] is not None
    assert admit(state, T, False, 500)[1] is None


def test_depth_and_scheduled_places_are_taken_and_given_back() -> None:
    state = set_limits(None, T, TenantLimits(max_queue_depth=2, max_scheduled=1))
    state, breach = admit(state, T, True, 0)
    assert breach is None and (state.waiting, state.scheduled) == (1, 1)
    _, breach = admit(state, T, True, 0)
    assert breach is not None and breach.limit == "max_scheduled" and breach.current == 1
    state, breach = admit(state, T, False, 0)
    assert breach is None
    _, breach = admit(state, T, False, 0)
    assert breach is not None and breach.limit == "max_queue_depth"
    assert breach.details(T, 0)["retry_after_seconds"] == 1
    state = release(release(state, True), False)
    assert (state.waiting, state.scheduled) == (0, 0)
    assert release(state, True) == state  # never below zero


def test_the_limits_body_names_each_field_it_cannot_take() -> None:
    limits, reason = parse_limits({"max_queue_depth": 5, "reason": "incident"}, TenantLimits())
    assert limits == TenantLimits(max_queue_depth=5) and reason == "incident"
    kept, _ = parse_limits({"max_enqueue_rate": {"limit": 10, "period": "PT1M"}}, limits)
    assert (kept.max_queue_depth, kept.rate_limit, kept.rate_period_ms) == (5, 10, 60_000)
    assert parse_limits({"max_queue_depth": None}, kept)[0].max_queue_depth is None
    cases: list[tuple[dict[str, Any], str]] = [
        ({"max_depth": 1}, "max_depth"), ({"max_queue_depth": -1}, "max_queue_depth"),
        ({"max_queue_depth": True}, "max_queue_depth"),
        ({"max_concurrency": 1001}, "max_concurrency"), ({"fairness_weight": 2}, "fairness_weight"),
        ({"max_enqueue_rate": {"limit": 0, "period": "PT1S"}}, "max_enqueue_rate.rate.limit"),
        ({"max_enqueue_rate": {"limit": 1, "per": "PT1S"}}, "max_enqueue_rate.per"),
        ({"max_enqueue_rate": 5}, "max_enqueue_rate"), ({"reason": 5}, "reason"),
    ]  # fmt: skip
    for body, named in cases:
        with pytest.raises(Invalid) as refused:
            parse_limits(body, TenantLimits())
        assert named in refused.value.error.message


def test_a_state_survives_its_dump() -> None:
    state, _ = admit(rate(3, 1000), T, True, 5)
    assert TenantState.load(state.dump()) == state
    assert TenantState.load(b"{") is None and TenantState.load(b'{"tenant": 1}') is None


# -- stories over every stage -----------------------------------------------------------


class Story(Gateway):
    def __init__(self) -> None:
        super().__init__()
        self.asked = 0

    def enqueue(self, job: dict[str, Any], sdk: bool = False) -> None:
        """A tenant's job as the SDK sends it (straight to its tenant's home), or as a
        producer writes it to intake with the marks."""
        job = {**job, "meta": {"tenant_id": T}}
        if sdk:
            out = prepare(job)
            assert isinstance(out, Outgoing) and out.key == HOME
            where = ("requests", partition_for(HOME, PARTITIONS))
            self.logs.setdefault(where, deque()).append(
                Output(out.value, out.key, headers=list(out.headers))
            )
        else:
            self.send(job, **COUNTED)

    def limits(self, **limits: Any) -> None:
        value = tenant_command(T, limits, "test")
        where = ("requests", partition_for(HOME, PARTITIONS))
        self.logs.setdefault(where, deque()).append(
            Output(value, HOME, headers=[(wire.KIND_HEADER, wire.TENANT_COMMAND)])
        )
        self.run()

    def event(self, job_id: str, kind: str) -> None:
        job = self.job(job_id)
        body = {"job_id": job_id, "type": kind}
        if job["route"] != job_id:
            body["unique_key"] = job["route"]
        route = str(job["route"]).encode()  # keyed as the SDK keys it
        self.logs.setdefault(("job_events", 0), deque()).append(Output(orjson.dumps(body), route))

    def home(self) -> TenantState | None:
        store = self.store(partition_for(HOME, PARTITIONS))
        raw = store.items.get((HOME, "tenant"))
        return None if raw is None else TenantState.load(raw[0])

    def job(self, job_id: str) -> dict[str, Any]:
        for store in self.stores.values():
            for (_, name), (raw, _) in store.items.items():
                if name == JOB + job_id:
                    return orjson.loads(raw)  # type: ignore[no-any-return]
        raise KeyError(job_id)

    def refused(self) -> list[dict[str, Any]]:
        return [d for d in self.decisions if (d.get("error") or {}).get("code")
                == TENANT_LIMIT_EXCEEDED]  # fmt: skip


def unique(i: int) -> dict[str, Any]:
    return {"type": "t.job", "args": [i], "unique": {"keys": ["type", "args"]}}


@settings(max_examples=40, deadline=None)
@given(
    sdk=st.lists(st.booleans(), min_size=6, max_size=6),
    order=st.lists(st.integers(0, 7), max_size=60),
    depth=st.integers(0, 4),
)
def test_no_more_waiting_than_the_depth_in_any_interleaving(sdk, order, depth) -> None:
    story = Story()
    story.limits(max_queue_depth=depth)
    for i, straight in enumerate(sdk):
        story.enqueue(unique(i % 4) if i % 3 else {"type": "t.free", "args": [i]}, straight)
    story.run(order)
    accepted = story.accepted()
    assert len(accepted) <= depth
    duplicates = [d for d in story.decisions if d["outcome"] == "rejected"]
    assert len(accepted) + len(story.refused()) + len(duplicates) == 6
    state = story.home()
    assert state is not None and state.waiting == len(accepted)
    # Each job gives its place back once: at its first start (then it ends).
    for decision in accepted:
        story.event(decision["job_id"], "job.started")
    story.run(order)
    assert story.home().waiting == 0  # type: ignore[union-attr]
    for decision in accepted:
        assert "tenant_slot" not in story.job(decision["job_id"])
        story.event(decision["job_id"], "job.completed")
    story.run(order)
    assert story.home().waiting == 0  # type: ignore[union-attr]


def test_a_refusal_is_a_decision_with_the_limit_and_a_duplicate_gives_its_place_back() -> None:
    story = Story()
    story.limits(max_queue_depth=2)
    story.enqueue(unique(1), sdk=True)
    story.enqueue(unique(1), sdk=True)  # a duplicate: refused, its place given back
    story.run()
    assert [d["outcome"] for d in story.decisions] == ["accepted", "rejected"]
    assert story.home().waiting == 1  # type: ignore[union-attr]
    story.enqueue(unique(2), sdk=True)
    story.enqueue(unique(2), sdk=True)  # at the limit, refused before its duplicate check
    story.run()
    [refused] = story.refused()
    assert refused["outcome"] == "invalid"
    assert refused["details"]["limit"] == "max_queue_depth"
    assert refused["details"]["tenant_id"] == T and refused["details"]["maximum"] == 2
    counted = story.metrics.registry.get_sample_value  # OJS MT-006: per tenant
    assert counted("gateway_tenant_requests_total", {"tenant_id": T, "result": "admitted"}) == 3
    labels = {"tenant_id": T, "result": "max_queue_depth"}
    assert counted("gateway_tenant_requests_total", labels) == 1
    # A cancelled job that never ran gives its place back too.
    for decision in story.accepted():
        story.event(decision["job_id"], "job.cancelled")
    story.run()
    assert story.home() is not None and story.home().waiting == 0  # type: ignore[union-attr]


def test_a_request_without_the_mark_is_decided_as_before() -> None:
    story = Story()
    story.limits(max_queue_depth=0)
    story.send({**unique(1), "meta": {"tenant_id": T}}, tenant_scoped=b"1")
    story.run()
    assert [d["outcome"] for d in story.decisions] == ["accepted"]
    assert "tenant_slot" not in story.job(story.decisions[0]["job_id"])


def test_a_forged_slot_is_dropped_by_the_router_and_a_forged_job_field_ignored() -> None:
    story = Story()
    story.limits(max_queue_depth=0)
    forged = {wire.TENANT_SLOT_HEADER: b"waiting/acme", **COUNTED}
    story.send({**unique(1), "meta": {"tenant_id": T}, "tenant_slot": {"tenant": T}}, **forged)
    story.run()
    assert [d["details"]["limit"] for d in story.refused()] == ["max_queue_depth"]


def test_bad_reports_and_commands_at_the_home_never_stop_it() -> None:
    story = Story()
    where = ("requests", partition_for(HOME, PARTITIONS))
    for value, kind in [(b"{", wire.TENANT_REPORT), (b"[]", wire.TENANT_REPORT),
                        (b"{", wire.TENANT_COMMAND), (b'{"tenant": "x y"}', wire.TENANT_COMMAND),
                        (b'{"tenant": "other", "limits": {}}', wire.TENANT_COMMAND)]:  # fmt: skip
        story.logs.setdefault(where, deque()).append(
            Output(value, HOME, headers=[(wire.KIND_HEADER, kind)])
        )
    story.run()
    assert story.home() is None
    story.limits(max_queue_depth=1)
    story.enqueue(unique(1))
    story.run()
    assert len(story.accepted()) == 1


def test_explain_tells_what_the_home_did() -> None:
    story = Story()
    story.limits(max_queue_depth=1)
    story.enqueue(unique(1), sdk=True)
    story.enqueue(unique(2), sdk=True)
    story.run()
    story.event(story.accepted()[0]["job_id"], "job.started")
    story.run()
    trail = [orjson.loads(o.value or b"") for o in story.sent if o.role == "decisions"]
    lines = [explain_record(r).reason[0] for r in trail
             if isinstance((r.get("what") or {}).get("tenant"), dict)]  # fmt: skip
    assert any("limits set to" in line and '"max_queue_depth":1' in line for line in lines)
    assert any("admitted the request" in line and "1 waiting" in line for line in lines)
    assert any("refused the request" in line and "max_queue_depth (1 of 1)" in line
               for line in lines)  # fmt: skip
    assert any("place given back" in line and "0 waiting" in line for line in lines)


def claim(story: Story, job_id: str) -> dict[str, Any]:
    """A claim as fetch sends it, to its rate key's home; its answer."""
    story.asked += 1
    correlation = f"c{story.asked}".encode()
    job = story.job(job_id)
    body = {"job_id": job_id, "type": "job.started", "rate_limit": job["rate_limit"]}
    home = wire.rate_home(job["rate_limit"]["key"])
    story.logs.setdefault(("requests", partition_for(home, PARTITIONS)), deque()).append(
        Output(orjson.dumps(body), home, headers=[
            (wire.KIND_HEADER, wire.RATE), (wire.REPLY_TO_HEADER, b"replies"),
            (wire.CORRELATION_ID_HEADER, correlation),
        ])
    )  # fmt: skip
    story.run()
    [reply] = [
        orjson.loads(o.value or b"") for o in story.sent
        if o.topic == "replies" and dict(o.headers or []).get(wire.CORRELATION_ID_HEADER)
        == correlation
    ]  # fmt: skip
    return reply  # type: ignore[no-any-return]


def test_max_concurrency_holds_the_tenant_s_jobs_by_its_rate_key() -> None:
    story = Story()
    story.limits(max_concurrency=1)
    story.enqueue({"type": "t.free", "args": [1]}, sdk=True)
    story.enqueue({"type": "t.free", "args": [2]})
    story.run()
    first, second = (d["job_id"] for d in story.accepted())
    assert story.job(first)["rate_limit"] == {"key": "tenant:acme", "concurrency": 1,
                                              "on_limit": "wait"}  # fmt: skip
    assert claim(story, first)["outcome"] == "applied"
    refused = claim(story, second)
    assert refused["outcome"] == "refused" and refused["error"]["code"] == "rate_limited"
    story.event(first, "job.completed")
    story.run()
    assert claim(story, second)["outcome"] == "applied"
    # A job with its own rate limit cannot also be held by its tenant's: refused, named.
    story.enqueue({"type": "t.free", "args": [3], "rate_limit": {"key": "k", "concurrency": 2}})
    story.run()
    [held] = [d for d in story.decisions if (d.get("error") or {}).get("code")
              == "unsupported_option"]  # fmt: skip
    assert "own rate_limit" in held["error"]["message"]


def test_a_retry_under_an_idempotency_key_gets_its_first_answer_even_at_the_limit() -> None:
    story = Story()
    story.limits(max_queue_depth=1)
    job = {**unique(1), "meta": {"tenant_id": T}}
    asked = {**COUNTED, wire.IDEMPOTENCY_KEY_HEADER: b"k-1", wire.REPLY_TO_HEADER: b"replies"}
    story.send(job, **asked)
    story.run()
    story.send(job, **asked)  # the tenant is at its limit now: the retry is answered again
    story.run()
    replies = [orjson.loads(o.value or b"") for o in story.sent if o.topic == "replies"]
    assert [r["outcome"] for r in replies] == ["accepted", "accepted"]
    assert replies[0] == replies[1] and not story.refused()
    assert story.home().waiting == 1  # type: ignore[union-attr]


def test_a_claimed_id_is_released_when_its_request_fails_at_the_tenant_s_home(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    story = Story()
    job = {**unique(1), "id": "019c1c38-a40f-7db4-b60f-d484d6326593", "meta": {"tenant_id": T}}

    def broken(*_: Any) -> Any:
        raise RuntimeError("a fault at the home")

    monkeypatch.setattr("gateway.stage.tenants.admit", broken)
    story.send(job, **COUNTED)
    story.run()
    assert [d["outcome"] for d in story.decisions] == ["invalid"]
    assert story.claims() == []  # the id is free again
    monkeypatch.undo()
    story.send(job, **COUNTED)
    story.run()
    assert [d["outcome"] for d in story.decisions] == ["invalid", "accepted"]


def test_a_run_time_relative_to_the_request_is_scheduled_too() -> None:
    story = Story()
    story.limits(max_scheduled=0)
    story.enqueue({"type": "t.later", "args": [1], "scheduled_at": "+PT1H"})
    story.run()
    [refused] = story.refused()
    assert refused["details"]["limit"] == "max_scheduled"


def test_a_counted_request_naming_no_valid_tenant_passes_no_home() -> None:
    story = Story()
    story.send({**unique(1), "meta": {"tenant_id": "no tenant"}},
               **{wire.TENANT_COUNTED_HEADER: b"1"})  # fmt: skip
    story.run()
    assert [d["outcome"] for d in story.decisions] == ["accepted"]
    assert not any(o.key and o.key.startswith(wire.TENANT_KEY_PREFIX) for o in story.sent)


def test_two_operators_changes_of_different_limits_both_hold() -> None:
    story = Story()
    story.limits(max_concurrency=2)
    story.limits(max_queue_depth=5)  # sent from a view that had not seen the first
    limits = story.home().limits  # type: ignore[union-attr]
    assert (limits.max_concurrency, limits.max_queue_depth) == (2, 5)
    story.limits(max_concurrency=None)
    assert story.home().limits.max_concurrency is None  # type: ignore[union-attr]


def test_a_tenant_s_concurrency_key_is_the_gateway_s_to_give() -> None:
    story = Story()
    forged = {"key": "tenant:acme", "concurrency": 5}
    story.send({"type": "t.free", "args": [1], "rate_limit": forged})  # no tenant at all
    story.enqueue({"type": "t.free", "args": [2], "rate_limit": forged})  # its own tenant's
    story.run()
    codes = [(d.get("error") or {}).get("code") for d in story.decisions]
    assert codes == ["invalid_request", "invalid_request"], codes
    assert all("are the gateway's to give" in d["error"]["message"] for d in story.decisions)


# -- every dialect ----------------------------------------------------------------------


def sidekiq(n: int, **fields: Any) -> dict[str, Any]:
    return {"dialect": "sidekiq", "class": "MyJob", "queue": "default", "args": [n],
            "lock": "until_executed", **fields}  # fmt: skip


def test_a_dialect_s_job_is_its_tenant_s_counted_and_keyed_apart() -> None:
    """The meta its record shows is the tenant's, in every dialect: a job hash's `meta`."""
    story = Story()
    story.limits(max_queue_depth=1)
    story.enqueue(sidekiq(1), sdk=True)
    story.enqueue(sidekiq(2), sdk=True)  # past the depth
    story.run()
    assert [d["outcome"] for d in story.decisions] == ["accepted", "invalid"]
    assert story.refused()[0]["details"]["limit"] == "max_queue_depth"
    [job] = story.accepted()
    assert story.job(job["job_id"])["meta"] == {"tenant_id": T}
    # Another tenant's same job is its own: keyed apart, not a duplicate of acme's.
    other = prepare({**sidekiq(1), "meta": {"tenant_id": "globex"}})
    mine = prepare({**sidekiq(1), "meta": {"tenant_id": T}})
    bare = prepare(sidekiq(1))
    assert isinstance(other, Outgoing) and isinstance(mine, Outgoing)
    assert isinstance(bare, Outgoing)
    assert len({other.unique_key, mine.unique_key, bare.unique_key}) == 3


def test_river_names_its_tenant_in_metadata() -> None:
    job = {"dialect": "river", "kind": "k", "args": {}, "metadata": {"tenant_id": T}}
    out = prepare(job)
    assert isinstance(out, Outgoing) and out.key == HOME
    assert for_tenant({**job, "metadata": {}}, T) == job
    refused = for_tenant(job, "globex")
    assert isinstance(refused, GatewayError) and "metadata.tenant_id" in refused.message


def test_a_rescheduled_duplicate_waits_in_its_requests_place_a_dead_one_gives_it_back() -> None:
    story = Story()
    story.limits(max_queue_depth=3)
    for on_conflict in ("reschedule", "reschedule", "reject"):
        story.enqueue(sidekiq(1, on_conflict=on_conflict), sdk=True)
        story.run()
    first, kept, dead = story.decisions
    assert [d["outcome"] for d in story.decisions] == ["accepted", "ignored", "ignored"]
    assert story.home().waiting == 2  # type: ignore[union-attr]
    rescheduled = story.job(kept["duplicate_job"]["id"])
    assert rescheduled["state"] == "pending" and "tenant_slot" in rescheduled
    assert "tenant_slot" not in story.job(dead["duplicate_job"]["id"])
    story.enqueue(sidekiq(2), sdk=True)
    story.enqueue(sidekiq(3), sdk=True)  # the rescheduled duplicate holds the third place
    story.run()
    assert [d["outcome"] for d in story.decisions[3:]] == ["accepted", "invalid"]
    story.event(first["job_id"], "job.cancelled")  # a place back: the first job's
    story.run()
    assert story.home().waiting == 2  # type: ignore[union-attr]
