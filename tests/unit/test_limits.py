"""The limits (core/limits.py): each one at its boundary, and the totality they buy."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.core import (
    INVALID_EVENT,
    INVALID_PAYLOAD,
    INVALID_REQUEST,
    PAYLOAD_TOO_LARGE,
    EventOutcome,
    GatewayError,
    JobEvent,
    Request,
    RetryPolicy,
    apply_job_event,
    audit_fields,
    decide,
    parse_event,
    parse_event_json,
    parse_request,
    parse_request_json,
)
from gateway.core.limits import (
    MAX_DEPTH,
    MAX_DURATION_MS,
    MAX_ERROR_BYTES,
    MAX_EVENT_BYTES,
    MAX_INSTANT_MS,
    MAX_JOB_RECORD_BYTES,
    MAX_REQUEST_BYTES,
    MAX_RESULT_BYTES,
    MAX_SAFE_INTEGER,
    json_problem,
)
from gateway.core.times import format_rfc3339, parse_rfc3339

T0 = 1_770_000_000_000
JOB_ID = "019078a3-b5c7-7def-8a12-3456789abcde"
CODES = {INVALID_REQUEST, INVALID_PAYLOAD, INVALID_EVENT, PAYLOAD_TOO_LARGE}


def nest(levels: int) -> Any:
    """A value `levels` containers deep (0: a scalar)."""
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


def padded(template: dict[str, Any], size: int) -> bytes:
    """`template` as JSON of exactly `size` bytes, grown by its "pad" string."""
    text = orjson.dumps({**template, "pad": ""})
    return orjson.dumps({**template, "pad": "x" * (size - len(text))})


def refused(result: object, code: str, *words: str) -> None:
    assert isinstance(result, GatewayError), result
    assert result.code == code, result
    for word in words:
        assert word in result.message, result


# -- sizes ---------------------------------------------------------------------


@pytest.mark.parametrize("size", [MAX_REQUEST_BYTES, MAX_REQUEST_BYTES + 1])
def test_a_request_may_be_as_large_as_the_limit_and_no_larger(size: int) -> None:
    data = padded({"type": "t", "args": []}, size)
    assert len(data) == size
    for result in (parse_request_json(data), parse_request(orjson.loads(data))):
        if size <= MAX_REQUEST_BYTES:
            assert isinstance(result, Request), result
        else:
            refused(result, PAYLOAD_TOO_LARGE, f"is {size} bytes", f"{MAX_REQUEST_BYTES} bytes")


def test_a_request_is_measured_as_it_will_be_serialised() -> None:
    # 9e15 is 4 bytes in the request and 18 once serialised: the record is what must fit.
    count = MAX_REQUEST_BYTES // 5 - 10
    data = b'{"type":"t","args":[' + b",".join([b"9e15"] * count) + b"]}"
    assert len(data) <= MAX_REQUEST_BYTES
    refused(parse_request_json(data), PAYLOAD_TOO_LARGE, "the request is")


@pytest.mark.parametrize("size", [MAX_EVENT_BYTES, MAX_EVENT_BYTES + 1])
def test_an_event_may_be_as_large_as_the_limit_and_no_larger(size: int) -> None:
    data = padded({"job_id": JOB_ID, "type": "job.started"}, size)
    for result in (parse_event_json(data), parse_event(orjson.loads(data))):
        if size <= MAX_EVENT_BYTES:
            assert isinstance(result, JobEvent), result
        else:
            refused(result, PAYLOAD_TOO_LARGE, "the event is", f"{MAX_EVENT_BYTES} bytes")


@pytest.mark.parametrize(
    ("field", "limit", "base"),
    [
        ("result", MAX_RESULT_BYTES, {"job_id": JOB_ID, "type": "job.completed"}),
        ("error", MAX_ERROR_BYTES, {"job_id": JOB_ID, "type": "job.failed"}),
    ],
)
@pytest.mark.parametrize("over", [0, 1])
def test_results_and_errors_are_bounded(
    field: str, limit: int, base: dict[str, Any], over: int
) -> None:
    value = orjson.loads(padded({"message": "boom"}, limit + over))
    result = parse_event({**base, field: value})
    if over:
        refused(result, PAYLOAD_TOO_LARGE, f"the {field} is {limit + 1} bytes", str(limit))
    else:
        assert isinstance(result, JobEvent), result


def accepted_job(**fields: Any) -> dict[str, Any]:
    request = parse_request({"type": "t", "args": [], **fields})
    assert isinstance(request, Request), request
    decision = decide((), request, T0, seed=b"test")
    assert decision.job is not None
    return {**decision.job, "state": "active", "attempt": 1}


def test_an_event_that_would_grow_the_job_record_past_its_limit_is_refused() -> None:
    big = accepted_job(meta={"pad": "x" * (MAX_REQUEST_BYTES - 1000)})
    result = {"pad": "y" * (MAX_RESULT_BYTES - 100)}
    done = apply_job_event(big, parse_event({"job_id": big["id"], "type": "job.completed",
                                              "result": result}), T0)  # fmt: skip
    assert done.outcome is EventOutcome.APPLIED
    assert len(orjson.dumps(done.job)) <= MAX_JOB_RECORD_BYTES
    # A record from the log may be larger than any request today (an Oban update).
    huge = {**big, "meta": {"pad": "x" * (MAX_JOB_RECORD_BYTES - 1000)}}
    refusal = apply_job_event(huge, parse_event({"job_id": big["id"], "type": "job.completed",
                                                 "result": result}), T0)  # fmt: skip
    assert refusal.outcome is EventOutcome.REFUSED
    refused(refusal.error, PAYLOAD_TOO_LARGE, "the job record is", str(MAX_JOB_RECORD_BYTES))
    assert refusal.job == huge


# -- nesting and numbers ----------------------------------------------------------


@pytest.mark.parametrize("levels", [MAX_DEPTH - 1, MAX_DEPTH])
def test_nesting_is_bounded_at_the_limit(levels: int) -> None:
    # The request object is the first level, so args may hold MAX_DEPTH - 1 more.
    request = parse_request_json(orjson.dumps({"type": "t", "args": nest(levels)}))
    event = parse_event({"job_id": JOB_ID, "type": "job.completed", "result": nest(levels)})
    if levels < MAX_DEPTH:
        assert isinstance(request, Request), request
        assert isinstance(event, JobEvent), event
    else:
        refused(request, INVALID_REQUEST, f"args{'[0]' * (MAX_DEPTH - 1)} is nested deeper")
        refused(event, INVALID_EVENT, "result", f"deeper than {MAX_DEPTH} levels")


def test_nesting_the_serialiser_cannot_handle_is_refused_never_raised() -> None:
    deep = b'{"type":"t","args":{"a":{"b":' + b"[" * 253 + b"]" * 253 + b"}}}"
    refused(parse_request_json(deep), INVALID_REQUEST, "args.a.b", "deeper than 64 levels")
    deeper = b'{"type":"t","args":' + b"[" * 5000 + b"]" * 5000 + b"}"
    refused(parse_request_json(deeper), INVALID_REQUEST, "not valid JSON")
    refused(parse_event_json(b'{"job_id":"j","type":"job.completed","result":' + b"[" * 5000
                             + b"]" * 5000 + b"}"), INVALID_EVENT)  # fmt: skip


@pytest.mark.parametrize(
    ("number", "ok"),
    [
        (b"9007199254740991", True),
        (b"-9007199254740991", True),
        (b"9007199254740991.0", True),
        (b"1.5e-300", True),
        (b"9007199254740992", False),
        (b"-9007199254740992", False),
        (b"18446744073709551616", False),  # 2**64: orjson reads it as a float
        (b"18446744073709551617", False),
        (b"1e16", True),  # a double, whatever its size: JCS writes it exactly
        (b"1e21", True),
        (b"-1.7976931348623157e308", True),
    ],
)
def test_integers_beyond_the_safe_range_are_refused_everywhere(number: bytes, ok: bool) -> None:
    request = parse_request_json(b'{"type":"t","args":{"n":' + number + b"}}")
    event = parse_event_json(b'{"job_id":"j","type":"job.completed","result":[' + number + b"]}")
    if ok:
        assert isinstance(request, Request), request
        assert isinstance(event, JobEvent), event
    else:
        refused(request, INVALID_REQUEST, "args.n: integers beyond ±(2^53−1)", "as strings")
        refused(event, INVALID_EVENT, "result[0]: integers beyond")


def test_two_integers_beyond_64_bits_cannot_collide_in_a_key() -> None:
    unique = b',"unique":{"keys":["type","args"]}}'
    for n in (b"18446744073709551616", b"18446744073709551617"):
        refused(parse_request_json(b'{"type":"t","args":[' + n + b"]" + unique), INVALID_REQUEST)


def test_the_walk_names_the_first_offending_place() -> None:
    assert json_problem({"a": [1, {"b": 2**53}]}) == (
        "a[1].b: integers beyond ±(2^53−1) are not exact; send them as strings"
    )
    assert json_problem(2**60, "result") == (
        "result: integers beyond ±(2^53−1) are not exact; send them as strings"
    )
    assert json_problem({"a": [float("nan")]}) == "a[0] is nan, which is not a JSON number"
    assert json_problem({"ok": [True, None, "s", -MAX_SAFE_INTEGER, 0.5, 1e21, -1e300]}) is None


# -- durations and instants -------------------------------------------------------

MAX_S = MAX_DURATION_MS // 1000


@pytest.mark.parametrize(
    ("job", "message"),
    [
        ({"unique": {"period": MAX_S}}, None),
        ({"unique": {"period": "P36500D"}}, None),
        ({"unique": {"period": MAX_S + 1}}, "unique.period is longer than 36500 days"),
        ({"unique": {"period": "P36500DT0.001S"}}, "unique.period is longer than 36500 days"),
        ({"unique": {"period": "P99999999D"}}, "unique.period is longer than 36500 days"),
        ({"retry": {"initial_interval_ms": MAX_DURATION_MS}}, None),
        ({"retry": {"initial_interval_ms": MAX_DURATION_MS + 1}},
         "retry.initial_interval_ms is longer than 36500 days"),
        ({"retry": {"max_interval": "P36500D"}}, None),
        ({"retry": {"max_interval": "P99999999D"}}, "retry.max_interval is longer"),
        ({"options": {"retry": {"initial_interval": "P36501D"}}}, "retry.initial_interval is"),
        ({"scheduled_at": "1970-01-01T00:00:00Z"}, None),
        ({"scheduled_at": "8999-12-31T23:59:59.999Z"}, None),
        ({"scheduled_at": "1969-12-31T23:59:59.999Z"},
         "scheduled_at must be from 1970-01-01T00:00:00Z up to (not including) 9000"),
        ({"scheduled_at": "9000-01-01T00:00:00Z"}, "scheduled_at must be from 1970"),
        ({"options": {"delay_until": "9999-12-31T23:59:59Z"}}, "scheduled_at must be from"),
        ({"dialect": "oban", "worker": "W", "unique": {"period": [36500, "days"]}}, None),
        ({"dialect": "oban", "worker": "W", "unique": {"period": [36501, "days"]}},
         "unique.period is longer than 36500 days"),
        ({"dialect": "oban-py", "worker": "W", "unique": {"period": MAX_S + 1}},
         "unique.period is longer"),
        ({"dialect": "oban", "worker": "W", "scheduled_at": "9000-01-01T00:00:00Z"},
         "scheduled_at must be from"),
        ({"dialect": "faktory", "jobtype": "J", "custom": {"unique_for": MAX_S}}, None),
        ({"dialect": "faktory", "jobtype": "J", "custom": {"unique_for": MAX_S + 0.001}},
         "custom.unique_for must be from 0.001 s to 36500 days"),
        ({"dialect": "faktory", "jobtype": "J", "at": "0001-01-01T00:00:00Z"},
         "at must be from 1970"),
    ],
)  # fmt: skip
def test_durations_and_instants_are_bounded_at_enqueue(
    job: dict[str, Any], message: str | None
) -> None:
    result = parse_request({"type": "t", "args": [], **job} if "dialect" not in job else job)
    if message is None:
        assert isinstance(result, Request), result
    else:
        refused(result, INVALID_REQUEST, message)


@pytest.mark.parametrize(
    ("at", "ok"), [("8999-12-31T23:59:59.999Z", True), ("9000-01-01T00:00:00Z", False)]
)
def test_an_event_s_scheduled_time_is_bounded(at: str, ok: bool) -> None:
    event = parse_event({"job_id": JOB_ID, "type": "job.scheduled", "scheduled_at": at})
    if ok:
        assert isinstance(event, JobEvent) and event.scheduled_at == MAX_INSTANT_MS - 1
    else:
        refused(event, INVALID_EVENT, "scheduled_at must be from")


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (0, "1970-01-01T00:00:00.000Z"),
        (10**18, "9999-12-31T23:59:59.999Z"),
        (-(10**18), "0001-01-01T00:00:00.000Z"),
    ],
)
def test_format_rfc3339_is_total(ms: int, text: str) -> None:
    assert format_rfc3339(ms) == text


def test_a_nack_of_a_job_with_a_huge_stored_interval_still_computes_its_retry() -> None:
    # Such a job was accepted before intervals were bounded; its record is in the log.
    job = accepted_job()
    job["retry"] = {**job["retry"], "initial_interval_ms": 10**18, "max_interval_ms": 10**18}
    failed = parse_event({"job_id": job["id"], "type": "job.failed", "error": {"message": "x"}})
    moved = apply_job_event(job, failed, T0)
    assert moved.outcome is EventOutcome.APPLIED
    assert moved.job is not None and moved.job["next_attempt_at"] == "9999-12-31T23:59:59.999Z"


# -- properties -------------------------------------------------------------------

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.sampled_from([2**53 - 1, 2**53, -(2**53), 2**64, 2**64 + 1, -(2**63)])
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=5)
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=12,
) | st.integers(min_value=0, max_value=300).map(nest)
dialect_jobs = st.sampled_from(
    [
        {"type": "t", "unique": {"keys": ["type", "args"]}},
        {"type": "t", "unique": {"keys": ["args", "meta"], "meta_keys": ["m"]}, "meta": {"m": 1}},
        {"dialect": "oban", "worker": "W", "unique": {"fields": ["args"]}},
        {"dialect": "faktory", "jobtype": "J", "custom": {"unique_for": 60}},
        {"dialect": "zizq", "type": "t", "uniqueKey": "k"},
    ]
)


@given(dialect_jobs, json_values)
def test_any_request_is_decided_or_refused_and_every_record_serialises(
    job: dict[str, Any], value: Any
) -> None:
    field = "payload" if job.get("dialect") == "zizq" else "args"
    data = json.dumps({**job, field: {"v": value}})  # the standard library writes big ints
    request = parse_request_json(data)
    if isinstance(request, GatewayError):
        assert request.code in CODES
        return
    orjson.dumps(request.envelope.raw)
    decision = decide((), request, T0, seed=b"prop")
    orjson.dumps(audit_fields(decision))
    orjson.dumps(decision.job)


@given(json_values, json_values)
def test_any_event_is_parsed_or_refused_and_its_job_record_serialises(
    result: Any, error: Any
) -> None:
    job = accepted_job()
    for raw in (
        {"job_id": job["id"], "type": "job.completed", "result": result},
        {"job_id": job["id"], "type": "job.failed", "error": {"message": "m", "detail": error}},
    ):
        event = parse_event_json(json.dumps(raw))
        if isinstance(event, GatewayError):
            assert event.code in CODES
            continue
        moved = apply_job_event(job, event, T0)
        orjson.dumps(moved.job)


retry_policies = st.fixed_dictionaries(
    {},
    optional={
        "initial_interval_ms": st.integers(min_value=0, max_value=MAX_DURATION_MS + 1),
        "max_interval_ms": st.integers(min_value=0, max_value=MAX_DURATION_MS + 1),
        "backoff_coefficient": st.floats(min_value=1, max_value=MAX_SAFE_INTEGER),
        "backoff": st.sampled_from(["exponential", "polynomial", "linear", "none"]),
        "jitter": st.booleans(),
    },
)


@given(retry_policies, st.integers(min_value=1, max_value=10_000))
def test_any_accepted_retry_policy_gives_a_printable_retry_time(
    raw: dict[str, Any], attempt: int
) -> None:
    request = parse_request({"type": "t", "args": [], "retry": raw})
    if isinstance(request, GatewayError):
        assert request.code == INVALID_REQUEST and "longer than" in request.message
        return
    policy = RetryPolicy.from_dict(request.envelope.retry.to_dict())
    delay = policy.delay_ms(attempt, JOB_ID)
    assert 0 <= delay <= 1.5 * MAX_DURATION_MS
    at = format_rfc3339(MAX_INSTANT_MS + delay)
    assert parse_rfc3339(at) == MAX_INSTANT_MS + delay
