"""Leases, heartbeats, timeouts and the dead letters: the core's rules, and the processor
applying them as event time (ticks included) passes, over an in-memory store."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.audit import explain_record
from gateway.core import (
    DEFAULT_RETENTION_MS,
    EventOutcome,
    IgnoredReason,
    Request,
    State,
    apply_job_event,
    attempt_deadline,
    expire_job,
    job_effective_state,
    load_entries,
    parse_event,
    parse_request,
)
from gateway.core.ids import IdClaim
from gateway.core.limits import MAX_ERROR_BYTES, MAX_JOB_RECORD_BYTES
from gateway.core.moves import DEFAULT_VISIBILITY_TIMEOUT_MS, MAX_ERRORS
from gateway.core.times import format_rfc3339, parse_rfc3339
from gateway.processor.metrics import Metrics
from gateway.stage.dedup import Dedup
from gateway.stage.parsing import Limits
from gateway.stage.records import Output, Source
from gateway.stage.schedule import LEASES
from gateway.stage.shared import ENTRIES
from gateway.wire import (
    CLAIMED_ID_HEADER,
    ID_CLAIM_HEADER,
    ID_CLAIMED,
    JOB_EVENT,
    KIND_HEADER,
    TICK,
    TICK_KEY,
    route,
)
from tests.memory_store import Store
from tests.support import is_trail, payload, without_trail

T0 = 1_770_000_000_000
JOB_ID = "019b0a4c-1f00-7000-8000-000000000001"


def job(**fields: Any) -> dict[str, Any]:
    return {
        "id": JOB_ID, "type": "report.build", "state": "available", "attempt": 0,
        "max_attempts": 3, "created_at": format_rfc3339(T0), **fields,
    }  # fmt: skip


def event(**fields: Any) -> Any:
    parsed = parse_event({"job_id": JOB_ID, **fields})
    assert not hasattr(parsed, "code"), parsed
    return parsed


def moved(record: dict[str, Any], at: int, **fields: Any) -> dict[str, Any]:
    result = apply_job_event(record, event(**fields), at)
    assert result.outcome is EventOutcome.APPLIED, result.error
    assert result.job is not None
    return result.job


def ms(stamp: Any) -> int:
    value = parse_rfc3339(stamp)
    assert value is not None
    return value


# -- the core rules -------------------------------------------------------------


def test_a_requeue_with_a_claim_id_undoes_that_claim_only():
    ours = moved(job(), T0, type="job.started", claim_id="c1")
    assert ours["claim_id"] == "c1"
    back = moved(ours, T0 + 1, type="job.enqueued", claim_id="c1")
    assert back["state"] == "available" and "claim_id" not in back
    theirs = moved(job(), T0, type="job.started", claim_id="c2")
    refused = apply_job_event(theirs, event(type="job.enqueued", claim_id="c1"), T0 + 1)
    assert refused.outcome is EventOutcome.REFUSED and refused.error is not None
    assert "another claim" in refused.error.message


def test_a_requeue_of_a_job_never_claimed_changes_nothing():
    result = apply_job_event(job(), event(type="job.enqueued", claim_id="c1"), T0)
    assert result.outcome is EventOutcome.IGNORED


@pytest.mark.parametrize("claim_id", ["", 5, "x" * 256])
def test_a_claim_id_is_a_short_string(claim_id: Any):
    parsed = parse_event({"job_id": JOB_ID, "type": "job.started", "claim_id": claim_id})
    assert getattr(parsed, "code", None) == "invalid_event"


@pytest.mark.parametrize(
    ("fields", "lease"),
    [({}, DEFAULT_VISIBILITY_TIMEOUT_MS), ({"visibility_timeout_ms": 2_000}, 2_000)],
)
def test_a_claim_holds_the_job_for_its_lease(fields: dict[str, Any], lease: int) -> None:
    started = moved(job(), T0 + 10, type="job.started", **fields)
    assert ms(started["lease_expires_at"]) == T0 + 10 + lease
    assert started["visibility_timeout_ms"] == lease
    assert attempt_deadline(started) == T0 + 10 + lease


def test_a_heartbeat_extends_the_lease_and_changes_nothing_else() -> None:
    started = moved(job(), T0, type="job.started", visibility_timeout_ms=2_000)
    kept = moved(started, T0 + 1_500, type="job.heartbeat")
    assert ms(kept["lease_expires_at"]) == T0 + 3_500  # the job's own duration again
    longer = moved(kept, T0 + 3_000, type="job.heartbeat", visibility_timeout_ms=60_000)
    assert ms(longer["lease_expires_at"]) == T0 + 63_000
    assert {k: v for k, v in longer.items() if "lease" not in k and "visibility" not in k} == {
        k: v for k, v in started.items() if "lease" not in k and "visibility" not in k
    }


@pytest.mark.parametrize("state", ["available", "scheduled", "retryable", "completed"])
def test_a_heartbeat_for_a_job_not_active_is_refused(state: str) -> None:
    result = apply_job_event(job(state=state), event(type="job.heartbeat"), T0)
    assert result.outcome is EventOutcome.REFUSED and result.error is not None
    assert "heartbeat (job.heartbeat) needs an active job" in result.error.message
    assert result.reason is (
        IgnoredReason.ALREADY_TERMINAL if state == "completed" else IgnoredReason.NOT_ALLOWED
    )


def test_visibility_timeout_must_be_a_positive_integer() -> None:
    for bad in (0, -1, "5", 1.5, True):
        raw = {"job_id": JOB_ID, "type": "job.started", "visibility_timeout_ms": bad}
        refused = parse_event(raw)
        assert getattr(refused, "code", None) == "invalid_event"


def test_an_expired_lease_makes_the_job_available_again_at_once() -> None:
    started = moved(job(), T0, type="job.started", visibility_timeout_ms=2_000)
    assert expire_job(started, T0 + 1_999) is None
    result = expire_job(started, T0 + 2_000)
    assert result is not None and result.state is State.RETRYABLE
    assert result.job is not None
    assert result.job["error"]["type"] == "visibility_timeout"
    assert result.job["errors"] == [result.job["error"]]
    assert "lease_expires_at" not in result.job
    assert ms(result.job["next_attempt_at"]) == T0 + 2_000 and result.job["retry_delay_ms"] == 0
    assert job_effective_state(result.job, T0 + 2_000) is State.AVAILABLE
    assert result.job["attempt"] == 1  # the attempt counts


def test_an_expired_lease_at_max_attempts_discards() -> None:
    started = moved(job(max_attempts=1), T0, type="job.started", visibility_timeout_ms=2_000)
    result = expire_job(started, T0 + 2_000)
    assert result is not None and result.state is State.DISCARDED


def test_timeout_ms_bounds_an_attempt_whatever_the_heartbeats() -> None:
    started = moved(job(timeout_ms=5_000), T0, type="job.started", visibility_timeout_ms=2_000)
    beating = moved(started, T0 + 1_900, type="job.heartbeat", visibility_timeout_ms=10_000)
    assert attempt_deadline(beating) == T0 + 5_000
    result = expire_job(beating, T0 + 5_000)
    assert result is not None and result.job is not None
    assert result.job["error"]["type"] == "timeout"


def test_an_expiry_at_max_attempts_discards() -> None:
    started = moved(job(attempt=2), T0, type="job.started", visibility_timeout_ms=1_000)
    result = expire_job(started, T0 + 1_000)
    assert result is not None and result.state is State.DISCARDED
    assert result.job is not None and result.job["discarded_at"] == format_rfc3339(T0 + 1_000)


@pytest.mark.parametrize("state", ["available", "retryable", "completed", "cancelled"])
def test_only_active_jobs_expire(state: str) -> None:
    stale = job(state=state, lease_expires_at=format_rfc3339(T0))
    assert expire_job(stale, T0 + 10**9) is None and attempt_deadline(stale) is None


@given(
    lease=st.integers(1, 100_000),
    timeout=st.one_of(st.none(), st.integers(1, 100_000)),
    beats=st.lists(st.tuples(st.integers(0, 50_000), st.integers(1, 100_000)), max_size=5),
    probe=st.integers(0, 400_000),
)
def test_an_attempt_ends_exactly_at_the_earlier_of_lease_and_timeout(
    lease: int, timeout: int | None, beats: list[tuple[int, int]], probe: int
) -> None:
    fields = {} if timeout is None else {"timeout_ms": timeout}
    record = moved(job(**fields), T0, type="job.started", visibility_timeout_ms=lease)
    now, expires = T0, T0 + lease
    for gap, duration in beats:
        if now + gap >= min(expires, T0 + (timeout or 10**12)):
            break  # the attempt has ended: a heartbeat would come too late
        now += gap
        record = moved(record, now, type="job.heartbeat", visibility_timeout_ms=duration)
        expires = now + duration
    deadline = min(expires, T0 + timeout) if timeout is not None else expires
    assert attempt_deadline(record) == deadline
    assert (expire_job(record, T0 + probe) is None) is (T0 + probe < deadline)


def test_a_discarded_job_may_be_retried_from_the_dead_letters() -> None:
    started = moved(job(max_attempts=1), T0, type="job.started")
    dead = moved(started, T0 + 1, type="job.failed", error={"message": "boom"})
    assert dead["state"] == "discarded"
    again = moved(dead, T0 + 2, type="job.enqueued")
    assert again["state"] == "available" and again["attempt"] == 0
    assert "discarded_at" not in again and "completed_at" not in again
    assert again["errors"] == [dead["error"]] and again["error"] == dead["error"]
    assert moved(again, T0 + 3, type="job.started")["attempt"] == 1


@pytest.mark.parametrize("state", ["completed", "cancelled", "discarded"])
def test_a_terminal_job_may_be_deleted_and_a_live_one_may_not(state: str) -> None:
    done = apply_job_event(job(state=state), event(type="job.deleted"), T0)
    assert done.outcome is EventOutcome.APPLIED and done.deleted
    live = apply_job_event(job(state="active"), event(type="job.deleted"), T0)
    assert live.outcome is EventOutcome.REFUSED and not live.deleted
    assert live.error is not None and "delete (job.deleted) needs one of" in live.error.message


def test_errors_keep_the_last_ten_attempts_oldest_first() -> None:
    record = job(max_attempts=50)
    for n in range(12):
        record = moved(record, T0 + 3 * n, type="job.enqueued" if n else "job.started")
        if n:
            record = moved(record, T0 + 3 * n + 1, type="job.started")
        record = moved(record, T0 + 3 * n + 2, type="job.failed", error={"message": f"e{n}"})
    assert [e["message"] for e in record["errors"]] == [f"e{n}" for n in range(2, 12)]
    assert len(record["errors"]) == MAX_ERRORS and record["error"] == record["errors"][-1]


def test_errors_make_room_in_a_record_near_its_limit() -> None:
    big = "x" * (MAX_ERROR_BYTES - 100)
    record = job(max_attempts=50, args=["y" * (MAX_JOB_RECORD_BYTES - 4 * MAX_ERROR_BYTES)])
    for n in range(6):
        if n:
            record = moved(record, T0 + 3 * n, type="job.enqueued")
        record = moved(record, T0 + 3 * n + 1, type="job.started")
        record = moved(record, T0 + 3 * n + 2, type="job.failed", error={"message": big})
        assert len(orjson.dumps(record)) <= MAX_JOB_RECORD_BYTES
    assert 1 <= len(record["errors"]) < 6 and record["errors"][-1] == record["error"]


# -- the processor, over an in-memory store ------------------------------------------


class Partition:
    """One partition's log through the processor's own code; records at chosen times."""

    def __init__(self) -> None:
        self.out: list[tuple[Output, Source]] = []
        self.store = Store()
        self.offset = 0
        self.records: list[tuple[Source, bytes | None, bytes | None]] = []
        self.dedup = Dedup(
            1, lambda o, s: self.out.append((o, s)), Metrics(), Limits(),
            lambda _, key: self.store.state(key),
        )  # fmt: skip

    def send(
        self, value: bytes | None, key: bytes, at: int, kind: bytes | None,
        headers: dict[str, bytes] | None = None,
    ) -> list[Output]:  # fmt: skip
        headers = dict(headers or {}) if kind is None else {KIND_HEADER: kind}
        source = Source("requests", 0, self.offset, at, headers)
        self.offset += 1
        self.records.append((source, key, value))
        self.store.at(at)
        before = len(self.out)
        self.dedup.on_record(value, key, source, self.store.state(key))
        return [o for o, _ in self.out[before:]]

    def request(self, body: dict[str, Any], at: int) -> list[Output]:
        request = parse_request(body)
        assert isinstance(request, Request)
        key = route(request)
        assert key is not None
        # Its client id as its home sends it on: claimed for this route.
        claimed = (
            {ID_CLAIM_HEADER: ID_CLAIMED, CLAIMED_ID_HEADER: str(body["id"]).encode()}
            if "id" in body
            else {}
        )
        return self.send(orjson.dumps(body), key.encode(), at, None, claimed)

    def event(self, key: str, at: int, **fields: Any) -> list[Output]:
        body = {"job_id": JOB_ID, **fields}
        return self.send(orjson.dumps(body), key.encode(), at, JOB_EVENT)

    def tick(self, at: int) -> list[Output]:
        return self.send(b"", TICK_KEY, at, TICK)


UNIQUE = {"type": "report.build", "args": [1], "unique": {"keys": ["type", "args"]}}


def states(outputs: list[Output]) -> list[str]:
    return [orjson.loads(o.value)["state"] for o in outputs if o.role == "job_states" and o.value]


def claimed(max_attempts: int = 3, lease: int = 2_000) -> tuple[Partition, str]:
    log = Partition()
    decided = log.request({**UNIQUE, "id": JOB_ID, "max_attempts": max_attempts}, T0)
    key = next(payload(o.value)["unique_key"] for o in decided if o.role == "decisions")
    log.event(key, T0 + 10, unique_key=key, type="job.started", visibility_timeout_ms=lease)
    return log, key


def test_ticks_end_a_lease_on_an_idle_partition_and_decide_nothing() -> None:
    log, key = claimed(max_attempts=1)
    due = LEASES.seen_at(T0 + 10 + 2_000)
    for at in range(T0 + 1_000, due, 1_000):
        assert log.tick(at) == []  # nothing due yet: a tick writes nothing
    expired = log.tick(due)
    assert states(expired) == ["discarded"]
    assert [o.role for o in without_trail(expired)] == ["job_states"]  # no decision, no reply
    [trail] = [payload(o.value) for o in expired if is_trail(o)]  # the expiry's audit record
    assert trail["kind"] == "tick" and trail["state"]["jobs"] == [[JOB_ID, "active", "discarded"]]
    entries = load_entries(log.store.state(key.encode()).get_bytes(ENTRIES))
    assert [e.state for e in entries if e.job_id == JOB_ID] == [State.DISCARDED]
    # The key is free again: the same job is a new one now.
    again = log.request({**UNIQUE}, due + 1)
    decision = next(payload(o.value) for o in again if o.role == "decisions")
    assert decision["outcome"] == "accepted"


def test_a_heartbeat_makes_the_scheduled_expiry_stale() -> None:
    log, key = claimed()
    log.event(key, T0 + 1_500, unique_key=key, type="job.heartbeat", visibility_timeout_ms=5_000)
    assert log.tick(LEASES.seen_at(T0 + 2_010)) == []  # the first lease's entry: stale
    assert log.tick(LEASES.seen_at(T0 + 6_500) - 1) == []
    assert states(log.tick(LEASES.seen_at(T0 + 6_500))) == ["retryable"]


def test_a_finished_job_never_expires() -> None:
    log, key = claimed()
    log.event(key, T0 + 100, unique_key=key, type="job.completed")
    assert log.tick(T0 + 60_000) == []


def test_a_late_ack_after_the_lease_is_refused() -> None:
    log, key = claimed()
    out = log.event(key, T0 + 5_000, unique_key=key, type="job.completed")
    assert states(out) == ["retryable"]  # the record's time ended the attempt first


def test_a_deleted_job_is_tombstoned_at_once_and_frees_its_key() -> None:
    log, key = claimed(max_attempts=1)
    # The id's home (this one partition) holds its claim for the route, as after the claim's
    # report.
    home = log.store.state(JOB_ID.encode())
    home.set_bytes("claim", IdClaim(key, 0, {"id": JOB_ID, "state": "available"}).dump())
    log.event(key, T0 + 20, unique_key=key, type="job.failed", error={"message": "x"})
    out = log.event(key, T0 + 30, unique_key=key, type="job.deleted")
    # The tombstone at once; the id stays claimed until the scheduled tombstone, which
    # frees it (a job under another route could otherwise take it, then lose its record).
    assert [(o.role, o.key, o.value) for o in without_trail(out)] == [
        ("job_states", JOB_ID.encode(), None)
    ]
    assert log.store.state(key.encode()).get_bytes(ENTRIES) is None
    assert home.get_bytes("claim") is not None
    log.tick(T0 + 30 + DEFAULT_RETENTION_MS + 20_000)
    assert log.store.state(JOB_ID.encode()).get_bytes("claim") is None
    again = log.request({**UNIQUE, "id": JOB_ID}, T0 + 40)
    decision = next(payload(o.value) for o in again if o.role == "decisions")
    assert decision["outcome"] == "accepted"


def test_a_revived_job_holds_its_key_again() -> None:
    log, key = claimed(max_attempts=1)
    log.event(key, T0 + 20, unique_key=key, type="job.failed", error={"message": "x"})
    assert states(log.event(key, T0 + 30, unique_key=key, type="job.enqueued")) == ["available"]
    dup = log.request({**UNIQUE}, T0 + 40)
    decision = next(payload(o.value) for o in dup if o.role == "decisions")
    assert decision["outcome"] == "rejected" and decision["existing_job_id"] == JOB_ID


def test_a_tombstone_is_written_even_if_the_store_still_shows_the_record() -> None:
    log, key = claimed()
    log.event(key, T0 + 20, unique_key=key, type="job.completed")
    retention = Limits().retention_ms
    # A store whose clock lags (its TTL not yet applied) still returns the record.
    state = log.store.state(key.encode())
    raw = state.get_bytes("job/" + JOB_ID)
    assert raw is not None
    state.set_bytes("job/" + JOB_ID, raw)  # no ttl: as if the store had not evicted it
    out = log.tick(T0 + 20 + retention + 10_000)
    assert [(o.role, o.value) for o in out if o.key == JOB_ID.encode()] == [("job_states", None)]
    assert state.get_bytes("job/" + JOB_ID) is None


# -- explain says what the processor did ------------------------------------------


def test_explain_reports_retries_exactly_as_the_processor_decided() -> None:
    log, key = claimed(max_attempts=3)
    steps: list[tuple[int, dict[str, Any]]] = [
        (T0 + 100, {"type": "job.failed", "error": {"message": "no attempt given"}}),
        (T0 + 200, {"type": "job.started"}),  # retryable but not yet due: refused
        (T0 + 60_000, {"type": "job.started"}),  # due by now: a fetch
        (T0 + 60_100, {"type": "job.failed", "error": {"message": "x", "retryable": False}}),
        (T0 + 60_200, {"type": "job.enqueued"}),  # from the dead letters
        (T0 + 60_300, {"type": "job.started", "visibility_timeout_ms": 1_000}),
    ]
    seen: list[str | None] = []
    for at, fields in steps:
        out = log.event(key, at, unique_key=key, **fields)
        got = states(out)
        seen.append(got[-1] if got else None)
    expiry = LEASES.seen_at(T0 + 61_300)
    seen.append(states(log.tick(expiry))[-1])
    assert seen == ["retryable", None, "active", "discarded", "available", "active", "retryable"]

    told = [explain_record(payload(o.value)) for o, _ in log.out if o.role == "decisions"]
    lines = [line for t in told for line in t.reason]
    said = [line for line in lines if line.startswith(("job ", "refused", "ignored", "visib"))]
    assert [_state_of(line) for line in said] == [
        "active", "retryable", None, "active", "discarded", "available", "active", "retryable",
    ]  # fmt: skip
    assert "attempt 2 of 3 failed, the error is not retryable" in said[4]
    assert any(f"visibility_timeout job {JOB_ID}" in line for line in lines)


def _state_of(line: str) -> str | None:
    if "→" not in line:
        return None
    return line.split("→ ")[1].split(" ")[0].rstrip(":")


def test_a_retryable_job_says_its_retry_delay():
    failed = moved(moved(job(), T0, type="job.started"), T0 + 10, type="job.failed",
                   error={"message": "x"})  # fmt: skip
    assert failed["state"] == "retryable"
    assert ms(failed["next_attempt_at"]) == T0 + 10 + failed["retry_delay_ms"]


def test_a_jobs_own_visibility_timeout_is_its_claims_lease_unless_the_fetch_names_one():
    request = parse_request(
        {"type": "report.build", "args": [], "options": {"visibility_timeout_ms": 3_000}}
    )
    assert isinstance(request, Request) and request.envelope.visibility_timeout_ms == 3_000
    own = job(visibility_timeout_ms=3_000)
    assert ms(moved(own, T0, type="job.started")["lease_expires_at"]) == T0 + 3_000
    named = moved(own, T0, type="job.started", visibility_timeout_ms=9_000)
    assert ms(named["lease_expires_at"]) == T0 + 9_000


@pytest.mark.parametrize(
    ("retry", "strategy"),
    [
        ({"backoff_strategy": "linear"}, "linear"),
        ({"backoff_type": "constant"}, "none"),
        ({"backoff": "exponential", "backoff_type": "exponential"}, "exponential"),
    ],
)
def test_the_backoff_strategy_has_ojs_openapi_names(retry: dict[str, Any], strategy: str):
    request = parse_request({"type": "report.build", "args": [], "retry": retry})
    assert isinstance(request, Request) and request.envelope.retry.strategy == strategy


def test_two_strategies_that_differ_are_refused():
    refused = parse_request(
        {
            "type": "report.build",
            "args": [],
            "retry": {"backoff": "linear", "backoff_type": "constant"},
        }
    )
    assert getattr(refused, "code", None) == "invalid_request"


def test_a_shorter_lease_taken_after_a_longer_one_ends_on_its_own_time() -> None:
    """The schedule's first entry (a 60 s lease) must not hold back a later, earlier one."""
    log = Partition()
    other = "019b0a4c-1f00-7000-8000-000000000002"
    for job_id, lease in ((other, 60_000), (JOB_ID, 2_000)):
        decided = log.request({**UNIQUE, "args": [job_id], "id": job_id}, T0)
        key = next(payload(o.value)["unique_key"] for o in decided if o.role == "decisions")
        started = {"job_id": job_id, "unique_key": key, "type": "job.started",
                   "visibility_timeout_ms": lease}  # fmt: skip
        log.send(orjson.dumps(started), key.encode(), T0 + 10, JOB_EVENT)
    due = LEASES.seen_at(T0 + 10 + 2_000)
    expired = log.tick(due)
    assert [payload(o.value)["id"] for o in expired if o.role == "job_states"] == [JOB_ID]
    assert log.tick(LEASES.seen_at(T0 + 10 + 60_000) - 1) == []
    later = log.tick(LEASES.seen_at(T0 + 10 + 60_000))
    assert [payload(o.value)["id"] for o in later if o.role == "job_states"] == [other]
