"""expires_at: a job no worker took before it is discarded, never handed out (OJS core).
The core's rule, and the processor applying it on event time, ticks included."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.core import (
    EventOutcome,
    GatewayError,
    Request,
    State,
    apply_job_event,
    decide,
    expire_job,
    job_deadline,
    load_entries,
    parse_event,
    parse_request,
    past_expiry,
)
from gateway.core.jobs import accepted_job
from gateway.core.times import format_rfc3339
from gateway.stage.schedule import LEASES
from gateway.stage.shared import ENTRIES
from tests.support import payload
from tests.unit.test_leases import JOB_ID, T0, UNIQUE, Partition, job, states

EXPIRES = T0 + 2_000


def test_expires_at_is_read_at_the_top_level_and_under_options_and_echoed_as_sent():
    for body, sent in (
        ({"expires_at": "2026-02-12T10:00:00+01:00"}, "2026-02-12T10:00:00+01:00"),
        ({"options": {"expires_at": "2026-02-12T09:00:00Z"}}, "2026-02-12T09:00:00Z"),
    ):
        request = parse_request({"type": "a.b", "args": [], **body})
        assert isinstance(request, Request)
        assert request.envelope.expires_at == 1_770_886_800_000
        accepted = accepted_job(request.envelope, JOB_ID, None, T0, None)
        assert accepted["expires_at"] == sent


@pytest.mark.parametrize(
    "body",
    [
        {"expires_at": "tomorrow"},
        {"expires_at": 1770886800},
        {"expires_at": "2026-02-12T10:00:00"},  # no time zone
        {"expires_at": "2026-02-12T10:00:00Z", "options": {"expires_at": "2026-02-12T11:00:00Z"}},
    ],
)
def test_a_bad_expires_at_is_refused_naming_the_field(body: dict[str, Any]):
    refused = parse_request({"type": "a.b", "args": [], **body})
    assert isinstance(refused, GatewayError) and refused.code == "invalid_request"
    assert "expires_at" in refused.message


def test_a_claim_after_expires_at_discards_the_job_instead():
    waiting = job(expires_at=format_rfc3339(EXPIRES))
    started = parse_event({"job_id": JOB_ID, "type": "job.started"})
    assert not isinstance(started, GatewayError)
    before = apply_job_event(waiting, started, EXPIRES - 1)
    assert before.outcome is EventOutcome.APPLIED and before.state is State.ACTIVE
    after = apply_job_event(waiting, started, EXPIRES)
    assert after.outcome is EventOutcome.APPLIED and after.state is State.DISCARDED
    assert after.job is not None
    assert after.job["error"]["type"] == "expired"
    assert after.job["discarded_at"] == format_rfc3339(EXPIRES)
    assert after.job["attempt"] == 0  # it never ran


@given(
    state=st.sampled_from(["available", "scheduled", "retryable", "active", "completed"]),
    expires=st.integers(T0 - 10_000, T0 + 10_000),
    now=st.integers(T0 - 10_000, T0 + 10_000),
)
def test_only_a_waiting_job_expires_and_only_once_its_time_has_come(
    state: str, expires: int, now: int
):
    record = job(state=state, expires_at=format_rfc3339(expires))
    waiting = state in ("available", "scheduled", "retryable")
    assert past_expiry(record, now) is (waiting and expires <= now)
    if waiting:
        assert job_deadline(record) == expires
    result = expire_job(record, now)
    if waiting and expires <= now:
        assert result is not None and result.state is State.DISCARDED
    elif state != "active":
        assert result is None  # an active job runs to its end; its lease is another rule


def test_ticks_discard_an_expired_job_on_an_idle_partition_and_free_its_key():
    log = Partition()
    decided = log.request({**UNIQUE, "expires_at": format_rfc3339(EXPIRES)}, T0)
    key = next(payload(o.value)["unique_key"] for o in decided if o.role == "decisions")
    accepted = next(payload(o.value) for o in decided if o.role == "jobs")
    assert accepted["expires_at"] == format_rfc3339(EXPIRES)
    due = LEASES.seen_at(EXPIRES)
    for at in range(T0 + 500, due, 500):
        assert log.tick(at) == []
    expired = log.tick(due)
    assert states(expired) == ["discarded"]
    record = next(payload(o.value) for o in expired if o.role == "job_states")
    assert record["error"]["type"] == "expired"
    entries = load_entries(log.store.state(key.encode()).get_bytes(ENTRIES))
    assert [e.state for e in entries] == [State.DISCARDED]
    again = log.request({**UNIQUE}, due + 1)
    assert next(payload(o.value) for o in again if o.role == "decisions")["outcome"] == "accepted"


def test_a_fetch_after_expires_at_gets_nothing_and_the_job_is_discarded():
    log = Partition()
    decided = log.request({**UNIQUE, "expires_at": format_rfc3339(EXPIRES)}, T0)
    key = next(payload(o.value)["unique_key"] for o in decided if o.role == "decisions")
    job_id = next(payload(o.value)["id"] for o in decided if o.role == "jobs")
    out = log.event(key, EXPIRES + 1, unique_key=key, job_id=job_id, type="job.started")
    assert states(out) == ["discarded"]


@pytest.mark.parametrize(
    ("field", "where"),
    [("expires_at", "options"), ("expires_at", "top"), ("scheduled_at", "top"),
     ("delay_until", "options")],
)  # fmt: skip
def test_a_relative_time_counts_from_the_decision(field: str, where: str):
    job: dict = {"type": "t.relative", "args": [], "options": {}}
    (job["options"] if where == "options" else job)[field] = "+PT2.5S"
    request = parse_request(job)
    assert isinstance(request, Request)
    decided = decide((), request, T0, seed=b"relative").job
    assert decided is not None
    shown = decided["options"] if where == "options" else decided
    assert shown[field] == format_rfc3339(T0 + 2_500)
    name = "scheduled_at" if field in ("scheduled_at", "delay_until") else "expires_at"
    assert decided[name] == format_rfc3339(T0 + 2_500)
    again = decide((), request, T0 + 1_000, seed=b"relative").job  # replay at its own time
    assert again is not None and again[name] == format_rfc3339(T0 + 3_500)


@pytest.mark.parametrize("value", ["+", "+P1M", "+PT0S", "+-PT1S", "+PT0.0001S", "+P40000D", "+5"])
def test_a_relative_time_must_be_a_positive_fixed_duration(value: str):
    refused = parse_request({"type": "t.relative", "args": [], "expires_at": value})
    assert isinstance(refused, GatewayError) and refused.code == "invalid_request"
    assert "expires_at" in refused.message
