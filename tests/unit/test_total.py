"""The processor's per-record path is total: any record gets its answer, all or nothing.

Drives the processor's own Dedup and Router (as replay does) over an in-memory
store, with arbitrary bytes, keys, headers and sizes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.core import INTERNAL, Request, parse_request
from gateway.core.limits import (
    MAX_EVENT_BYTES,
    MAX_HEADERS_BYTES,
    MAX_RECORD_BYTES,
    MAX_REQUEST_BYTES,
)
from gateway.partitioner import partition_for
from gateway.processor.metrics import Metrics
from gateway.processor.replies import NOT_ALLOWED, reply_refusal
from gateway.stage import requests as requests_module
from gateway.stage.dedup import Dedup
from gateway.stage.parsing import Limits
from gateway.stage.records import Output, Source, record_size
from gateway.stage.requests import Requests
from gateway.stage.router import Router
from gateway.stage.trail import CHAIN_KEY
from gateway.wire import CRON_COMMAND, ID_REPORT, JOB_EVENT, KIND_HEADER, QUEUE_COMMAND, TICK
from tests.memory_store import Store
from tests.support import replaces_code

REQ, INTAKE, EVENTS = "gateway.requests", "gateway.intake", "gateway.job-events"
PARTITIONS = 8
T0 = 1_760_000_000_000
JOB = {"type": "email.send", "args": {"user_id": 7}, "unique": {"keys": ["type", "args"]}}


class Harness:
    """One Dedup and one Router, their outputs, and the partitions' stores."""

    def __init__(self) -> None:
        self.outputs: list[tuple[Output, Source]] = []
        self.stores: dict[int, Store] = {}
        self.metrics = Metrics()

        def emit(output: Output, source: Source) -> None:
            self.outputs.append((output, source))

        self.dedup = Dedup(PARTITIONS, emit, self.metrics, Limits(), self.state_of)
        self.router = Router(emit, self.metrics, Limits())
        self.offset = 0

    def store(self, partition: int) -> Store:
        return self.stores.setdefault(partition, Store())

    def state_of(self, source: Source, key: bytes) -> Any:
        return self.store(source.partition).state(key)

    def source(self, topic: str, partition: int, headers: dict[str, bytes]) -> Source:
        self.offset += 1
        return Source(topic, partition, self.offset, T0 + self.offset, headers)

    def to_requests(
        self, value: bytes | None, key: bytes | None, headers: dict[str, bytes], partition: int = 0
    ) -> list[Output]:
        source = self.source(REQ, partition, headers)
        store = self.store(partition)
        store.at(source.timestamp_ms)
        before = len(self.outputs)
        self.dedup.on_record(value, key, source, store.state(key or b""))
        return [o for o, _ in self.outputs[before:]]

    def to_intake(
        self, value: bytes | None, key: bytes | None, headers: dict[str, bytes]
    ) -> list[Output]:
        before = len(self.outputs)
        self.router.on_record(value, key, self.source(INTAKE, 0, headers))
        return [o for o, _ in self.outputs[before:]]

    def to_job_events(
        self, value: bytes | None, key: bytes | None, headers: dict[str, bytes]
    ) -> list[Output]:
        before = len(self.outputs)
        self.router.on_event(value, key, self.source(EVENTS, 0, headers))
        return [o for o, _ in self.outputs[before:]]


def roles(outputs: list[Output]) -> list[str | None]:
    return [o.role or f"reply:{o.topic}" for o in outputs]


def fits(outputs: list[Output]) -> bool:
    """Every output fits its topic, and none is a dead letter: the core refused what was bad."""
    return all(record_size(o) <= MAX_RECORD_BYTES and o.role != "dead_letters" for o in outputs)


def routed(job: dict[str, Any]) -> tuple[bytes, int]:
    request = parse_request(job)
    assert isinstance(request, Request) and request.unique_key
    key = request.unique_key.encode()
    return key, partition_for(key, PARTITIONS)


# -- arbitrary records ------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=30,
)
jobish = st.fixed_dictionaries(
    {"type": st.sampled_from(["email.send", "a", "x.y"])},
    optional={
        "args": json_values, "unique": json_values, "meta": json_values, "id": json_values,
        "dialect": st.sampled_from(["ojs", "oban", "zizq", "faktory", "nope"]),
        "retry": json_values, "scheduled_at": json_values,
    },
)  # fmt: skip
values = st.one_of(
    st.none(),
    st.sampled_from([MAX_EVENT_BYTES + 1, MAX_REQUEST_BYTES + 1]).map(
        lambda n: b"[" + b" " * n + b"]"
    ),
    st.binary(max_size=200),
    # The standard library writes integers of any size, as an attacker may.
    jobish.map(lambda v: json.dumps(v).encode()),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.integers(1, 300).map(lambda depth: b"[" * depth + b"]" * depth),
    st.integers(1, 300).map(
        lambda depth: b'{"type":"a","args":' + b"[" * depth + b"]" * depth + b"}"
    ),
)
header_names = st.sampled_from(["reply_to", "correlation_id", "request_id", "kind", "x"])
headers = st.dictionaries(
    header_names,
    st.one_of(
        st.binary(max_size=40),
        st.just(b"gateway.replies"),
        st.just(b"job_event"),
        st.just(TICK),
        st.just(QUEUE_COMMAND),
        st.just(CRON_COMMAND),
        st.just(ID_REPORT),
    ),
    max_size=4,
)
keys = st.one_of(st.none(), st.binary(max_size=64))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=values, key=keys, headers=headers, partition=st.integers(0, PARTITIONS - 1))
def test_any_record_on_requests_is_answered_within_limits(value, key, headers, partition):
    harness = Harness()
    outputs = harness.to_requests(value, key, headers, partition)
    assert fits(outputs)
    kinds = roles(outputs)
    if headers.get(KIND_HEADER) == JOB_EVENT:
        # An event is answered by its reply when it asked for one; it makes no decision.
        assert "decisions" not in kinds
    elif headers.get(KIND_HEADER) == TICK and not value:
        assert kinds == []  # a tick only moves time: nothing is due on a fresh partition
    elif headers.get(KIND_HEADER) == ID_REPORT:
        # A route's report to an id's home: the gateway's own record, answered by nobody;
        # one it cannot read changes nothing.
        assert kinds == []
    elif headers.get(KIND_HEADER) in (QUEUE_COMMAND, CRON_COMMAND):
        # A command is answered when it asked, or sent on to its cron's partition; a valid
        # one publishes what it changed. It makes no decision.
        assert "decisions" not in kinds
        assert all(k in ("job_states", "requests") or k.startswith("reply:") for k in kinds)
    else:
        # Decided here once, or else sent on once: to its route's partition (`requests`),
        # through the router while it has no route (`intake`), to its id's home (`requests`).
        forwards = sum(kinds.count(k) for k in ("intake", "requests"))
        decided = kinds.count("decisions")
        assert decided == 1 or (decided == 0 and forwards == 1), (value[:300], key, headers, kinds)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=values, key=keys, headers=headers)
def test_any_record_on_intake_is_decided_or_forwarded(value, key, headers):
    outputs = Harness().to_intake(value, key, headers)
    assert fits(outputs)
    kinds = roles(outputs)
    assert kinds.count("decisions") + kinds.count("requests") == 1


@settings(max_examples=200, deadline=None)
@given(value=values, key=keys, headers=headers)
def test_any_job_event_is_forwarded_or_refused_with_its_reply(value, key, headers):
    outputs = Harness().to_job_events(value, key, headers)
    assert fits(outputs)
    forwarded = [o for o in outputs if o.role == "requests"]
    replies = [o for o in outputs if o.topic is not None]
    assert len(forwarded) == 1 or (
        len(replies) == bool(headers.get("reply_to")) and len(outputs) == len(replies)
    )


def test_a_job_event_too_large_to_forward_is_refused_with_a_reply():
    harness = Harness()
    value = orjson.dumps({"job_id": "j", "type": "job.completed", "result": "x" * MAX_EVENT_BYTES})
    headers = {"reply_to": b"gateway.replies", "correlation_id": b"c1"}
    [reply] = harness.to_job_events(value, b"j", headers)
    assert reply.topic == "gateway.replies" and reply.key
    body = orjson.loads(reply.value or b"")
    assert body["outcome"] == "invalid" and body["error"]["code"] == "payload_too_large"
    assert str(MAX_EVENT_BYTES) in body["error"]["message"]


def test_headers_too_large_are_refused_before_the_request_is_read():
    harness = Harness()
    key, partition = routed(JOB)
    outputs = harness.to_requests(
        orjson.dumps(JOB), key, {"x": b"h" * (MAX_HEADERS_BYTES + 1)}, partition
    )
    decision = orjson.loads(next(o.value for o in outputs if o.role == "decisions") or b"")
    assert decision["outcome"] == "invalid" and decision["error"]["code"] == "payload_too_large"


def test_a_reply_never_has_a_null_key():
    harness = Harness()
    outputs = harness.to_intake(b"not json", None, {"reply_to": b"gateway.replies"})
    [reply] = [o for o in outputs if o.topic == "gateway.replies"]
    assert reply.key


# -- an unexpected failure --------------------------------------------------


@pytest.fixture
def failing_decide(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    def boom(*_: Any, **__: Any) -> Any:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(requests_module, "decide", boom)
    yield


@replaces_code
def test_an_exception_becomes_an_internal_rejection_and_a_dead_letter(failing_decide):
    harness = Harness()
    key, partition = routed(JOB)
    headers = {"reply_to": b"gateway.replies", "correlation_id": b"c9"}
    outputs = harness.to_requests(orjson.dumps(JOB), key, headers, partition)
    assert sorted(roles(outputs)) == sorted(
        ["rejections", "decisions", "reply:gateway.replies", "dead_letters"]
    )
    decision = orjson.loads(next(o.value for o in outputs if o.role == "decisions") or b"")
    assert decision["outcome"] == "invalid" and decision["error"]["code"] == INTERNAL
    assert "dead_letters" in decision["error"]["message"]
    dead = orjson.loads(next(o.value for o in outputs if o.role == "dead_letters") or b"")
    assert dead["stage"] == "dedup" and dead["error"].startswith("RecursionError")
    assert dead["source"]["topic"] == REQ and dead["value_bytes"] == len(orjson.dumps(JOB))
    assert harness.metrics.dead_letters.labels("dedup", "RecursionError")._value.get() == 1


@replaces_code
def test_a_failed_record_leaves_no_partial_state(monkeypatch: pytest.MonkeyPatch):
    harness = Harness()
    key, partition = routed(JOB)

    def fail_after_storing(*_: Any) -> None:
        raise ValueError("after the entries were written")

    # Accepting writes the key's entries first, then the job record: fail in between.
    monkeypatch.setattr(Requests, "_record_jobs", fail_after_storing)
    harness.to_requests(orjson.dumps(JOB), key, {}, partition)
    # Only the audit trail moved on: the failure's own record is in it.
    assert [k for k, _ in harness.store(partition).items] == [CHAIN_KEY]
    monkeypatch.undo()
    # The same job again is accepted: nothing of the failed one holds the key.
    outputs = harness.to_requests(orjson.dumps(JOB), key, {}, partition)
    decision = orjson.loads(next(o.value for o in outputs if o.role == "decisions") or b"")
    assert decision["outcome"] == "accepted"


@replaces_code
def test_an_output_too_large_for_its_topic_is_never_produced(monkeypatch: pytest.MonkeyPatch):
    harness = Harness()
    key, partition = routed(JOB)
    real = requests_module.decision_outputs

    def bloated(*args: Any, **kwargs: Any) -> list[Output]:
        return [*real(*args, **kwargs), Output(b"x" * (MAX_RECORD_BYTES + 1), b"k", role="jobs")]

    monkeypatch.setattr(requests_module, "decision_outputs", bloated)
    outputs = harness.to_requests(orjson.dumps(JOB), key, {}, partition)
    assert "jobs" not in roles(outputs)
    assert all(record_size(o) <= MAX_RECORD_BYTES for o in outputs)
    dead = orjson.loads(next(o.value for o in outputs if o.role == "dead_letters") or b"")
    assert dead["error"].startswith("OutputTooLarge")


# -- reply addresses --------------------------------------------------------

OWNED = frozenset({"gateway.requests", "gateway.jobs", "gateway.job-states", "gateway.replies"})


@pytest.mark.parametrize(
    ("name", "refusal"),
    [
        ("gateway.replies", None),
        ("gateway.replies.billing", None),
        ("gateway.jobs", NOT_ALLOWED),
        ("gateway.job-states", NOT_ALLOWED),
        ("__consumer_offsets", NOT_ALLOWED),
        ("__transaction_state", NOT_ALLOWED),
        ("changelog__gateway-dedup--gateway.requests--default", NOT_ALLOWED),
        ("somewhere.else", NOT_ALLOWED),
        ("gateway.replies.bad/name", NOT_ALLOWED),
        ("gateway.replies." + "x" * 300, NOT_ALLOWED),
        ("", NOT_ALLOWED),
    ],
)
def test_reply_addresses(name: str, refusal: str | None):
    assert reply_refusal(name, "gateway.replies", "gateway.replies.", OWNED) == refusal


def test_an_empty_prefix_allows_the_replies_topic_only():
    assert reply_refusal("gateway.replies", "gateway.replies", "", OWNED) is None
    assert reply_refusal("gateway.replies.x", "gateway.replies", "", OWNED) == NOT_ALLOWED
