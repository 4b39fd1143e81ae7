"""An operator's job filter (core.job_filter): every field checked, anything else refused,
and the jobs it names."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.core import GatewayError, State
from gateway.core.job_filter import FIELDS, JobFilter, bulk_filter, parse_filter
from gateway.core.times import parse_rfc3339

DAY = "2099-01-01T00:00:00Z"
NOW = parse_rfc3339("2026-06-01T00:00:00Z") or 0
NEXT_DAY = "2099-01-02T00:00:00Z"


def job(state: str = "available", **fields: Any) -> dict[str, Any]:
    return {"id": "j", "type": "mail.send", "queue": "mail", "state": state,
            "created_at": "2026-01-01T00:00:00.000Z", **fields}  # fmt: skip


def refused(raw: object, **kwargs: Any) -> str:
    parsed = parse_filter(raw, **kwargs)
    assert isinstance(parsed, GatewayError), parsed
    assert parsed.code == "invalid_request"
    return parsed.message


def test_the_admin_uis_fields_are_read():
    parsed = parse_filter({"queue": "mail", "state": "discarded", "type": "mail.send",
                           "since": DAY, "until": NEXT_DAY})  # fmt: skip
    assert parsed == JobFilter("mail", State.DISCARDED, "mail.send",
                               parse_rfc3339(DAY), parse_rfc3339(NEXT_DAY))  # fmt: skip


@pytest.mark.parametrize("raw", [{}, {"queue": None, "state": None}])
def test_an_empty_filter_names_every_job(raw: dict[str, Any]):
    assert parse_filter(raw) == JobFilter()
    assert all(JobFilter().matches(job(s), NOW) for s in State)


@pytest.mark.parametrize("name", ["queues", "status", "created_after", "limit", ""])
def test_an_unknown_field_is_refused_by_name(name: str):
    assert f'"filter.{name}"' in refused({name: "x"}, where="filter.")


@pytest.mark.parametrize("raw", [[], False, None, "mail", 5, [{"queue": "mail"}]])
def test_a_filter_that_is_not_an_object_is_refused(raw: object):
    assert "filter must be an object" in refused(raw, where="filter.")


@pytest.mark.parametrize("value", [5, ["a"], {"a": 1}, True, 1.5, ""])
@pytest.mark.parametrize("name", FIELDS)
def test_each_field_is_a_non_empty_string(name: str, value: object):
    assert f"{name} must be a non-empty string" in refused({name: value})


@pytest.mark.parametrize("queue", ["Mail", "a b", "a\x00b", "ünï", "-mail", "q" * 256])
def test_a_queue_is_a_queue_name(queue: str):
    assert "is no queue name" in refused({"queue": queue})


def test_a_state_is_an_ojs_state():
    assert "is no job state" in refused({"state": "dead"})


@pytest.mark.parametrize("text", ["yesterday", "2099-01-01", "2099-13-01T00:00:00Z",
                                  "2099-01-01T00:00:00", "٢٠٩٩-01-01T00:00:00Z"])  # fmt: skip
def test_times_are_rfc_3339(text: str):
    assert "is not an RFC 3339 date-time" in refused({"since": text})
    assert "is not an RFC 3339 date-time" in refused({"until": text})


def test_since_is_not_after_until():
    assert "since is after filter.until" in refused(
        {"since": NEXT_DAY, "until": DAY}, where="filter."
    )
    assert isinstance(parse_filter({"since": DAY, "until": DAY}), JobFilter)


def test_a_caller_may_take_fewer_fields():
    assert "a filter takes queue, type" in refused({"state": "active"}, fields=("queue", "type"))


def test_since_and_until_bound_created_at_both_inclusive():
    chosen = parse_filter({"since": "2026-01-01T00:00:00Z", "until": "2026-01-02T00:00:00Z"})
    assert isinstance(chosen, JobFilter)
    assert chosen.matches(job(created_at="2026-01-01T00:00:00.000Z"), NOW)
    assert chosen.matches(job(created_at="2026-01-02T00:00:00.000Z"), NOW)
    assert not chosen.matches(job(created_at="2026-01-02T00:00:00.001Z"), NOW)
    assert not chosen.matches(job(created_at="2025-12-31T23:59:59.999Z"), NOW)
    assert not chosen.matches(job(created_at=None), NOW), "no creation time: outside any bound"
    assert not chosen.by_index() and JobFilter(queue="q", state=State.ACTIVE).by_index()


def test_bulk_retry_means_dead_jobs_and_cancel_live_ones_unless_a_state_is_named():
    retry, cancel = bulk_filter("retry", JobFilter()), bulk_filter("cancel", JobFilter())
    assert retry.states() == (State.DISCARDED,)
    assert State.COMPLETED not in cancel.states() and State.ACTIVE in cancel.states()
    assert not cancel.matches(job("cancelled"), NOW) and cancel.matches(job("retryable"), NOW)
    named = JobFilter(state=State.SCHEDULED)
    assert bulk_filter("cancel", named) == bulk_filter("retry", named) == named


def test_a_due_scheduled_or_retryable_job_is_named_as_available():
    due = {"scheduled_at": "2026-05-31T23:59:59.999Z"}
    later = {"scheduled_at": "2026-06-01T00:00:00.001Z"}
    available, scheduled = JobFilter(state=State.AVAILABLE), JobFilter(state=State.SCHEDULED)
    assert available.matches(job("scheduled", **due), NOW)
    assert not scheduled.matches(job("scheduled", **due), NOW)
    assert scheduled.matches(job("scheduled", **later), NOW)
    assert not available.matches(job("scheduled", **later), NOW)
    assert available.matches(job("retryable"), NOW)  # no backoff recorded: due at once
    retry_later = job("retryable", next_attempt_at=later["scheduled_at"])
    assert JobFilter(state=State.RETRYABLE).matches(retry_later, NOW)


@given(st.dictionaries(st.text(max_size=8), st.none() | st.booleans() | st.integers()
                       | st.text(max_size=30) | st.lists(st.integers(), max_size=2)))  # fmt: skip
def test_any_object_is_a_filter_or_a_refusal(raw: dict[str, Any]):
    parsed = parse_filter(raw)
    if isinstance(parsed, JobFilter):
        assert set(raw) <= set(FIELDS)
        parsed.matches(job(), NOW)
    else:
        assert parsed.code == "invalid_request" and parsed.message
