"""The SDK without a broker: local validation, the record it would send, result mapping."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator

import orjson
import pytest

from gateway.core import GatewayError, Outcome, parse_request
from gateway.sdk import Client, ClientClosed, ClientError, EnqueueResult, InvalidJob
from gateway.sdk.prepare import Outgoing, prepare
from gateway.sdk.ticket import Ticket
from gateway.sdk.transport import librdkafka_name

JOB = {
    "type": "email.send",
    "args": {"user_id": 42, "locale": "en"},
    "unique": {"keys": ["type", "args"], "args_keys": ["user_id"]},
}
NOWHERE = "127.0.0.1:1"  # nothing listens: any attempt to reach Kafka fails


def key_of(job: dict) -> str:
    request = parse_request(job)
    assert not isinstance(request, GatewayError) and request.unique_key
    return request.unique_key


# -- prepare ----------------------------------------------------------------------


def test_a_valid_job_is_keyed_by_its_fingerprint_with_a_fresh_request_id():
    first, second = prepare(JOB), prepare(JOB)
    assert isinstance(first, Outgoing) and isinstance(second, Outgoing)
    assert first.unique_key == key_of(JOB) and first.key == key_of(JOB).encode()
    assert len(first.request_id) == 32 and first.request_id != second.request_id
    assert parse_request(__import__("orjson").loads(first.value)) == parse_request(JOB)


def test_a_job_without_a_unique_policy_is_given_an_id_and_keyed_by_it():
    out = prepare({"type": "report.build", "args": []})
    assert isinstance(out, Outgoing) and out.unique_key is None and out.key is not None
    sent = orjson.loads(out.value)
    assert out.key == sent["id"].encode() and uuid.UUID(sent["id"]).version == 7
    given = "019078a3-b5c7-7def-8a12-3456789abcde"
    kept = prepare({"type": "report.build", "args": [], "id": given})
    assert isinstance(kept, Outgoing) and kept.key == given.encode()


def test_the_jobs_own_request_id_is_kept():
    out = prepare({**JOB, "request_id": "order-17"})
    assert isinstance(out, Outgoing) and out.request_id == "order-17"


@pytest.mark.parametrize(
    ("job", "message"),
    [
        ({"type": "t", "args": [], "unique": {"keys": ["meta"]}}, "unique.meta_keys is required"),
        ({"args": []}, "type is required"),
        ({"type": "t", "args": [], "request_id": 5}, "request_id, when given, must be"),
        ({"type": "t", "args": [object()]}, "cannot be encoded as JSON"),
        (["not", "an", "object"], "must be a JSON object"),
    ],
)
def test_an_invalid_job_is_an_invalid_request(job: object, message: str):
    error = prepare(job)
    assert isinstance(error, GatewayError) and error.code == "invalid_request"
    assert message in error.message


# -- results -----------------------------------------------------------------------

ACCEPTED = {
    "request_id": "r1",
    "outcome": "accepted",
    "unique_key": "k" * 64,
    "job_id": "j1",
    "existing_job_id": None,
    "existing_job_state": None,
    "cancelled_job_id": None,
    "error": None,
    "job": {"id": "j1", "type": "t"},
    "decided_at": "2025-01-01T00:00:00.000Z",
    "source": {"topic": "requests", "partition": 3, "offset": 9},
    "dialect": "ojs",
}


def test_an_accepted_record_maps_to_a_result():
    result = EnqueueResult.from_record(ACCEPTED)
    assert result.outcome is Outcome.ACCEPTED and result.request_id == "r1"
    assert (result.job_id, result.job, result.error) == ("j1", {"id": "j1", "type": "t"}, None)
    assert result.record == ACCEPTED


def test_a_rejected_record_names_the_existing_job_and_the_error():
    record = {
        **ACCEPTED,
        "outcome": "rejected",
        "existing_job_id": "j0",
        "existing_job_state": "active",
        "error": {"code": "duplicate", "message": "exists", "retryable": False},
    }
    result = EnqueueResult.from_record(record)
    assert result.outcome is Outcome.REJECTED
    assert (result.existing_job_id, result.existing_job_state) == ("j0", "active")
    assert result.error == GatewayError("duplicate", "exists")


def test_a_replaced_record_names_the_cancelled_job():
    record = {**ACCEPTED, "outcome": "replaced", "cancelled_job_id": "j0"}
    assert EnqueueResult.from_record(record).cancelled_job_id == "j0"


# -- ticket ------------------------------------------------------------------------


def test_a_ticket_keeps_input_order_and_the_first_answer_per_slot() -> None:
    ticket = Ticket(3)
    done: list[bool] = []
    ticket.add_done_callback(lambda: done.append(True))
    ticket.fill(2, "c")
    ticket.fill(0, "a")
    ticket.fill(0, "late")  # a delivery report after the reply changes nothing
    assert ticket.values() == ["a", None, "c"] and ticket.missing == 1 and not done
    assert not ticket.wait(0)
    threading.Thread(target=ticket.fill, args=(1, "b")).start()
    assert ticket.wait(5) and ticket.values() == ["a", "b", "c"] and done == [True]
    ticket.add_done_callback(lambda: done.append(True))  # already done: called at once
    assert done == [True, True]


# -- the client, with no broker to reach -----------------------------------------------


@pytest.fixture
def offline() -> Iterator[Client]:
    client = Client(NOWHERE, "unit", log_level=0)
    yield client
    client.close(timeout=0)


class Untouchable:
    """Stands in for the producer: polling is fine, reaching Kafka fails the test."""

    def poll(self, timeout: float) -> int:
        time.sleep(timeout)
        return 0

    def flush(self, timeout: float) -> int:
        return 0

    def produce(self, *args: object, **kwargs: object) -> None:
        raise AssertionError("an invalid job was sent")

    def list_topics(self, *args: object, **kwargs: object) -> None:
        raise AssertionError("Kafka was contacted for an invalid job")


def test_an_invalid_job_raises_before_anything_is_sent(offline: Client):
    offline._transport._producer = Untouchable()  # type: ignore[assignment]
    with pytest.raises(InvalidJob) as caught:
        offline.enqueue({"type": "t", "args": [], "unique": {"keys": ["meta"]}}, wait=True)
    assert caught.value.code == "invalid_request"
    assert caught.value.error.message.startswith("unique.meta_keys is required")
    assert str(caught.value).startswith("invalid_request: unique.meta_keys")


def test_enqueue_many_answers_invalid_jobs_in_place_without_sending(offline: Client):
    offline._transport._producer = Untouchable()  # type: ignore[assignment]
    answers = offline.enqueue_many([{"args": []}, {"type": "t"}], wait=True)
    assert all(isinstance(a, InvalidJob) for a in answers)
    assert "type is required" in str(answers[0]) and "args is required" in str(answers[1])


def test_kafka_out_of_reach_is_one_clear_error(offline: Client):
    with pytest.raises(ClientError) as caught:
        offline.enqueue(JOB, timeout=1)
    assert caught.value.code == "kafka" and NOWHERE in caught.value.message


def test_a_closed_client_refuses_work(offline: Client):
    offline.close(timeout=0)
    offline.close(timeout=0)  # idempotent
    with pytest.raises(ClientClosed):
        offline.enqueue(JOB)


def test_a_timeout_names_how_many_answers_are_missing(offline: Client):
    ticket = Ticket(3)
    ticket.fill(1, "decided")
    error = offline._give_up(ticket, wait=True)
    assert error.code == "timeout" and error.message == "2 of 3 replies missing"
    assert (error.missing, error.total, error.results) == (2, 3, [None, "decided", None])


def test_kafka_settings_take_librdkafka_names():
    assert librdkafka_name("linger_ms") == "linger.ms"
    assert librdkafka_name("security.protocol") == "security.protocol"
    assert librdkafka_name("log_level") == "log_level"
    assert librdkafka_name("error_cb") == "error_cb"


def test_import_gateway_stays_cheap_and_exports_the_clients():
    code = (
        "import sys, gateway; assert 'confluent_kafka' not in sys.modules; "
        "from gateway import AsyncClient, Client; import gateway.sdk as s; "
        "assert (Client, AsyncClient) == (s.Client, s.AsyncClient)"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_send_that_would_wait_stops_and_leaves_the_rest_for_a_blocking_send():
    """The event loop's send produces what it can; a full local queue stops it with
    nothing registered for the item it could not produce, and the rest is left."""
    client = Client(NOWHERE, "unit", log_level=0, queue_buffering_max_messages=1)
    try:
        call = client._prepare([{"type": "t", "args": [n]} for n in range(3)], None)
        deadline = time.monotonic() + 5
        assert not client._send(call, True, deadline, block=False)  # topics never checked
        transport = client._transport
        assert len(call.unsent) == 3 and not transport.pending
        transport.ready.update({*transport.topics.values(), transport.replies_topic})
        assert not client._send(call, True, deadline, block=False)  # the queue holds one
        assert len(call.unsent) == 2
        assert list(transport.pending) == call.ticket.correlation_ids
        assert len(call.ticket.correlation_ids) == 1
    finally:
        client.close(timeout=0)


# -- idempotency keys ---------------------------------------------------------------


class Recording(Untouchable):
    """Stands in for the producer and keeps what would be produced."""

    def __init__(self) -> None:
        self.sent: list[tuple[bytes, bytes, dict[str, bytes]]] = []

    def produce(self, *args: object, **kwargs: object) -> None:
        _topic, value, key = args
        assert isinstance(value, bytes) and isinstance(key, bytes)
        self.sent.append((value, key, dict(kwargs["headers"])))  # type: ignore[call-overload]
        kwargs["on_delivery"](None, None)  # type: ignore[operator]

    def list_topics(self, *args: object, **kwargs: object) -> None:
        raise AssertionError("unused: the topics count as checked")


def test_a_job_under_an_idempotency_key_goes_to_the_keys_home_without_a_minted_id(
    offline: Client,
):
    producer = offline._transport._producer = Recording()  # type: ignore[assignment]
    offline._transport.ready.add(offline._transport.topics["requests"])
    plain = {"type": "report.build", "args": []}
    offline.enqueue(plain, idempotency_key="order-17")
    offline.enqueue_many([plain, JOB], idempotency_key="batch-3")
    [(value, key, headers), *batch] = producer.sent
    assert key == b"\x00idem\x00order-17" and "id" not in orjson.loads(value)
    assert headers["idempotency_key"] == b"order-17" and "idempotency_item" not in headers
    assert [(k, h["idempotency_item"]) for _, k, h in batch] == [
        (b"\x00idem\x00batch-3", b"0/2"), (b"\x00idem\x00batch-3", b"1/2"),
    ]  # fmt: skip


@pytest.mark.parametrize("key", ["", "k" * 257, "line\nbreak"])
def test_a_bad_idempotency_key_raises_before_anything_is_sent(offline: Client, key: str):
    offline._transport._producer = Untouchable()  # type: ignore[assignment]
    with pytest.raises(InvalidJob) as caught:
        offline.enqueue(JOB, idempotency_key=key)
    assert caught.value.code == "invalid_request" and "idempotency_key" in caught.value.message
    with pytest.raises(InvalidJob):
        offline.enqueue_many([JOB], idempotency_key=key)
