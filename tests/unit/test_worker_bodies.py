"""The worker routes' bodies (fetch, ack, nack, heartbeat): unknown fields, wrong types,
sizes and bad ids are a 400 naming the field before anything is asked of the processor,
by the processor's own rules; what the official OJS SDK and the conformance suite send
is taken."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core import GatewayError
from gateway.core.job_events import parse_event
from gateway.core.limits import MAX_DURATION_MS, MAX_ID_BYTES
from gateway.http import workers
from gateway.http.errors import ApiError
from gateway.http.worker_bodies import (
    ACK_FIELDS,
    FETCH_FIELDS,
    HEARTBEAT_FIELDS,
    MAX_FETCH_QUEUES,
    MAX_HEARTBEAT_JOBS,
    NACK_FIELDS,
    check_worker_description,
    heartbeat_job_ids,
    job_id_of,
    queues_of,
    visibility_timeout,
)
from tests.http_requests import Handler, refusal, refused, request

JOB = "019078a3-b5c7-7def-8a12-3456789abcde"
ROUTES: dict[str, tuple[Handler, dict[str, Any]]] = {
    "fetch": (workers.fetch, {"queues": ["default"]}),
    "ack": (workers.ack, {"job_id": JOB}),
    "nack": (workers.nack, {"job_id": JOB, "error": {"code": "e", "message": "m"}}),
    "heartbeat": (workers.heartbeat, {"worker_id": "w1", "active_jobs": [JOB]}),
}
# What a JSON body can hold: no NaN or infinity, which JSON cannot write.
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)


@pytest.mark.parametrize("route", sorted(ROUTES))
@pytest.mark.parametrize("field", ["requeue", "visibility_timeout", "queue", "Job_Id", "é"])
def test_a_field_the_route_does_not_take_is_refused_by_name(route: str, field: str):
    handler, body = ROUTES[route]
    refused = refusal(handler, request({**body, field: 1}))
    assert repr(field) in refused.message and refused.details["unknown_fields"] == [field]


def test_a_very_long_unknown_field_is_named_cut_short():
    refused = refusal(workers.fetch, request({"queues": ["q"], "x" * 100_000: 1}))
    assert len(refused.message) < 400 and "xxxx" in refused.message


@pytest.mark.parametrize("route", sorted(ROUTES))
@pytest.mark.parametrize("body", [None, [], "x", 1, True])
def test_a_body_that_is_no_object_is_refused(route: str, body: object):
    handler, _ = ROUTES[route]
    refusal(handler, request(body, raw=b"null" if body is None else None))


# What the official OJS Python SDK (0.4) and OJS's conformance suite send: taken as is.
SDK_AND_SUITE_BODIES = [
    ("fetch", {"queues": ["q"], "count": 1, "visibility_timeout_ms": 30000, "worker_id": "w"}),
    ("fetch", {"queues": ["q"], "worker_id": "worker-1"}),
    ("ack", {"job_id": JOB, "result": {"ok": True}}),
    ("ack", {"job_id": JOB, "worker_id": "w", "result": None}),
    ("nack", {"job_id": JOB, "error": {"code": "handler_error", "message": "boom",
                                       "retryable": True, "details": {"traceback": "..."}}}),
    ("nack", {"job_id": JOB, "worker_id": "w", "error": {"code": "c", "message": "m"}}),
    ("heartbeat", {"worker_id": "w", "active_jobs": [JOB], "visibility_timeout_ms": 30000}),
    ("heartbeat", {"worker_id": "w", "active_jobs": 1, "active_job_ids": [JOB]}),
    # The OJS worker protocol's heartbeat, every field.
    ("heartbeat", {"worker_id": "w", "state": "running", "active_jobs": 1,
                   "active_job_ids": [JOB], "started_at": "2025-06-01T08:00:00Z",
                   "hostname": "web-1", "pid": 12345, "queues": ["email", "default"],
                   "concurrency": 10, "labels": ["canary", "v2.1"]}),
]  # fmt: skip


@pytest.mark.parametrize(("route", "body"), SDK_AND_SUITE_BODIES)
def test_what_real_clients_send_passes_every_body_check(route: str, body: dict[str, Any]):
    from gateway.http.plumbing import unknown_fields

    fields = {"fetch": FETCH_FIELDS, "ack": ACK_FIELDS, "nack": NACK_FIELDS,
              "heartbeat": HEARTBEAT_FIELDS}[route]  # fmt: skip
    unknown_fields(body, fields, "the body")  # raises if one is unknown
    visibility_timeout(body)
    if route == "fetch":
        assert queues_of(body["queues"]) == body["queues"]
    if route == "heartbeat":
        check_worker_description(body)
        assert heartbeat_job_ids(body) == [JOB]
    if "job_id" in body:
        assert job_id_of(body["job_id"], "job_id") == JOB


# -- the lease: the processor's rule, so a fetch never answers [] for a lease it refused ----


@given(st.one_of(JSON, st.integers(min_value=-(2**70), max_value=2**70)))
def test_the_binding_takes_a_lease_exactly_when_the_processor_would(value: object):
    taken = refused(visibility_timeout, {"visibility_timeout_ms": value})
    event = parse_event({"job_id": JOB, "type": "job.started", "visibility_timeout_ms": value})
    if value is None:
        assert taken is None
    elif isinstance(event, GatewayError):
        assert isinstance(taken, ApiError) and "visibility_timeout_ms" in taken.message
    else:
        assert taken == value


@pytest.mark.parametrize("lease", [0, -1, MAX_DURATION_MS + 1, 2**80, 1.5, "30000", True])
@pytest.mark.parametrize("route", ["fetch", "heartbeat"])
def test_a_lease_no_claim_could_carry_is_refused_before_any_claim(route: str, lease: object):
    handler, body = ROUTES[route]
    refused = refusal(handler, request({**body, "visibility_timeout_ms": lease}))
    assert "visibility_timeout_ms" in refused.message


@pytest.mark.parametrize("lease", [1, MAX_DURATION_MS])
def test_the_shortest_and_longest_lease_are_taken(lease: int):
    assert visibility_timeout({"visibility_timeout_ms": lease}) == lease


# -- queues, count, worker ids ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("queues", "named"),
    [(None, "queues"), ([], "queues"), ("q", "queues"), (["q", 1], "queues[1]"),
     (["q", ""], "queues[1]"), (["Q"], "queues[0]"), (["q" * 256], "queues[0]"),
     (["q\u0663"], "queues[0]"), ([f"q{i}" for i in range(MAX_FETCH_QUEUES + 1)], "queues")],
)  # fmt: skip
def test_fetch_names_the_queue_that_is_no_queue_name(queues: object, named: str):
    body = {} if queues is None else {"queues": queues}
    assert named in refusal(workers.fetch, request(body)).message


def test_fetch_asks_each_queue_once_in_order():
    assert queues_of(["b", "a", "b"]) == ["b", "a"]


@pytest.mark.parametrize("count", [0, -1, 1001, 2**64, 1.0, "1", True, None])
def test_fetch_count_is_an_integer_from_1_to_1000(count: object):
    assert "count" in refusal(workers.fetch, request({"queues": ["q"], "count": count})).message


@pytest.mark.parametrize("worker_id", ["", 1, ["w"], "w" * (MAX_ID_BYTES + 1)])
@pytest.mark.parametrize("route", sorted(ROUTES))
def test_a_worker_id_is_a_short_non_empty_string_on_every_route(route: str, worker_id: object):
    handler, body = ROUTES[route]
    refused = refusal(handler, request({**body, "worker_id": worker_id}))
    assert "worker_id" in refused.message


def test_heartbeat_needs_its_worker_id():
    assert "worker_id" in refusal(workers.heartbeat, request({"active_jobs": [JOB]})).message


# -- job ids ---------------------------------------------------------------------------------

BAD_IDS = [
    "", "x", 1, None, [JOB], JOB + " ", " " + JOB, JOB[:-1], "0" * 36,
    "019078a3b5c74def8a123456789abcde",  # a UUID's digits without its form
    "019078a3-b5c7-7def-8a12-3456789abcd\u0663",  # an Arabic-Indic digit
    "019078a3-b5c7-7def-8a12-" + "a" * 100_000,
]  # fmt: skip


@pytest.mark.parametrize("job_id", BAD_IDS)
@pytest.mark.parametrize("route", ["ack", "nack"])
def test_ack_and_nack_name_a_job_id_that_is_no_jobs_id(route: str, job_id: object):
    handler, body = ROUTES[route]
    refused = refusal(handler, request({**body, "job_id": job_id}))
    assert "job_id" in refused.message and len(refused.message) < 200


@pytest.mark.parametrize("job_id", [j for j in BAD_IDS if j is not None])
@pytest.mark.parametrize("field", ["active_jobs", "active_job_ids"])
def test_heartbeat_names_the_active_job_id_that_is_no_jobs_id(field: str, job_id: object):
    body = {"worker_id": "w", field: [JOB, job_id]}
    assert f"{field}[1]" in refusal(workers.heartbeat, request(body)).message


def test_an_id_in_capitals_names_its_job_as_the_processor_reads_it():
    assert job_id_of(JOB.upper(), "job_id") == JOB


def test_a_uuid_that_is_no_jobs_is_left_to_the_route_to_answer_not_found():
    other = "019078a3-b5c7-4def-8a12-3456789abcde"  # a UUIDv4: well formed, no job's
    assert job_id_of(other, "job_id") == other


@pytest.mark.parametrize(
    ("field", "value"),
    [("state", "busy"), ("state", 1), ("started_at", "yesterday"), ("hostname", 1),
     ("pid", "1"), ("pid", True), ("pid", -1), ("concurrency", 1.5), ("queues", "q"),
     ("queues", [1]), ("labels", {"a": 1})],
)  # fmt: skip
def test_the_worker_protocols_heartbeat_fields_have_its_types(field: str, value: object):
    body = {"worker_id": "w", "active_job_ids": [JOB], field: value}
    assert refusal(workers.heartbeat, request(body)).message.startswith(field)


def test_heartbeat_names_jobs_as_the_binding_or_the_worker_protocol_does():
    other = JOB[:-1] + "f"
    assert heartbeat_job_ids({"active_jobs": [JOB, other, JOB]}) == [JOB, other]
    assert heartbeat_job_ids({"active_jobs": 2, "active_job_ids": [JOB, other]}) == [JOB, other]
    assert heartbeat_job_ids({"job_id": JOB}) == [JOB]
    assert heartbeat_job_ids({}) == []
    for count in (-1, True, 1.5):
        assert isinstance(refused(heartbeat_job_ids, {"active_jobs": count}), ApiError)


def test_heartbeat_names_at_most_1000_jobs():
    ids = [f"019078a3-b5c7-7def-8a12-{n:012x}" for n in range(MAX_HEARTBEAT_JOBS + 1)]
    refused = refusal(workers.heartbeat, request({"worker_id": "w", "active_jobs": ids}))
    assert "at most" in refused.message


# -- the nack's error: the processor's rule -------------------------------------------------


@pytest.mark.parametrize(
    ("error", "named"),
    [([], "error"), ("boom", "error"), ({"message": 1}, "error.message"),
     ({"code": 5}, "error.code"), ({"retryable": "false"}, "error.retryable"),
     ({"retryable": 0}, "error.retryable"), ({"details": "x"}, "error.details"),
     ({"type": ["t"]}, "error.type")],
)  # fmt: skip
def test_a_nack_error_the_processor_would_refuse_is_refused_by_name(error: object, named: str):
    refused = refusal(workers.nack, request({"job_id": JOB, "error": error}))
    assert refused.message.startswith(named)
    event = parse_event({"job_id": JOB, "type": "job.failed", "error": error})
    assert isinstance(event, GatewayError) and event.message == refused.message


@settings(max_examples=200)
@given(st.dictionaries(st.sampled_from(["code", "message", "retryable", "details", "type", "x"]),
                       JSON, max_size=4))  # fmt: skip
def test_the_binding_takes_an_error_exactly_when_the_processor_would(error: dict[str, Any]):
    from gateway.core.job_events import failure_problem

    event = parse_event({"job_id": JOB, "type": "job.failed", "error": error})
    assert (failure_problem(error) is None) == (not isinstance(event, GatewayError))
