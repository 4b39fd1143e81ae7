"""The dedup processor end to end on a real broker: every strategy, events, bad input."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from gateway.catalogue import Catalogue
from gateway.core.decision_records import job_shown
from gateway.processor.changelogs import changelog_name
from gateway.wire import JOB_EVENT, KIND_HEADER, group_name
from tests.integration.harness import (
    Processor,
    Reader,
    apply_topics,
    fingerprint_of,
    producer,
    send,
    send_request,
)

pytestmark = pytest.mark.kafka


@dataclass
class Stack:
    bootstrap: str
    cat: Catalogue
    processor: Processor
    reader: Reader

    def __post_init__(self) -> None:
        self.producer = producer(self.bootstrap)

    def request(self, job: dict[str, Any], **headers: str) -> str:
        headers.setdefault("request_id", uuid.uuid4().hex)
        send_request(self.producer, self.cat, job, **headers)
        self.producer.flush()
        return headers["request_id"]

    def decision(self, request_id: str, timeout: float = 30) -> dict[str, Any]:
        """The committed decision record for one request (and check it is the only one)."""
        found: list[dict[str, Any]] = []
        for _ in range(int(timeout * 2)):
            found = [r for r in self.decisions() if r["request_id"] == request_id]
            if found:
                break
            self.reader.drain(0.5)
        assert len(found) == 1, (request_id, found, self.processor.log())
        return found[0]

    def decisions(self) -> list[dict[str, Any]]:
        """The decisions (the trail's other audit records left out)."""
        trail = self.reader.records.get(self.cat.name("decisions"), [])
        return [r["value"] for r in trail if "request_id" in r["value"]]

    def records(self, role: str) -> list[dict[str, Any]]:
        return self.reader.records.get(self.cat.name(role), [])

    def event(self, job_id: str, unique_key: str, **fields: Any) -> None:
        """Publish a job event onto the key's log, as the SDK does."""
        send(
            self.producer,
            self.cat.name("requests"),
            {"job_id": job_id, "unique_key": unique_key, **fields},
            unique_key,
            {KIND_HEADER: JOB_EVENT.decode()},
        )
        self.producer.flush()


@pytest.fixture
def stack(kafka_bootstrap: str, namespace: str, tmp_path) -> Iterator[Stack]:
    cat = apply_topics(kafka_bootstrap, namespace)
    proc = Processor(kafka_bootstrap, namespace, tmp_path, "1", "--max-request-bytes", "4096")
    proc.start()
    reader = Reader(
        kafka_bootstrap, [cat.name(r) for r in ("decisions", "jobs", "cancellations", "rejections")]
    )
    yield Stack(kafka_bootstrap, cat, proc, reader)
    reader.close()
    proc.stop()


def job(on_conflict: str = "reject", **unique: Any) -> dict[str, Any]:
    return {
        "type": "email.send",
        "args": {"user_id": uuid.uuid4().hex, "locale": "en"},
        "unique": {"keys": ["type", "args"], "args_keys": ["user_id"],
                   "on_conflict": on_conflict, **unique},
    }  # fmt: skip


def test_reject_accepts_one_and_rejects_the_duplicate(stack: Stack):
    first = job()
    accepted = stack.decision(stack.request(first))
    rejected = stack.decision(stack.request(first))
    assert accepted["outcome"] == "accepted" and accepted["unique_key"] == fingerprint_of(first)
    assert rejected["outcome"] == "rejected"
    assert rejected["existing_job_id"] == accepted["job_id"]
    assert rejected["existing_job_state"] == "available"
    assert rejected["error"]["code"] == "duplicate"
    assert rejected["policy"]["on_conflict"] == "reject" and rejected["dialect"] == "ojs"
    assert rejected["source"]["topic"] == stack.cat.name("requests")

    stack.reader.poll_until(stack.cat.name("rejections"), 1)
    [envelope] = [r["value"] for r in stack.records("rejections")]
    assert envelope["error"]["code"] == "duplicate"
    assert envelope["error"]["details"]["existing_job_id"] == accepted["job_id"]
    [accepted_job] = stack.records("jobs")
    assert accepted_job["value"]["id"] == accepted["job_id"]
    assert accepted_job["value"]["unique_key"] == accepted["unique_key"]
    assert accepted_job["headers"]["unique_key"] == accepted["unique_key"].encode()


def test_ignore_returns_the_existing_job(stack: Stack):
    first = job("ignore")
    accepted = stack.decision(stack.request(first))
    ignored = stack.decision(stack.request(first))
    assert ignored["outcome"] == "ignored" and ignored["error"] is None
    # Its audit record names the job it met (job_ref) in the state it carries.
    assert ignored["job_id"] == accepted["job_id"] == job_shown(ignored)["id"]
    stack.reader.settle(quiet=1)
    assert len(stack.records("jobs")) == 1 and not stack.records("rejections")


def test_replace_cancels_the_existing_job_even_when_active(stack: Stack):
    first = job("replace")
    accepted = stack.decision(stack.request(first))
    stack.event(accepted["job_id"], accepted["unique_key"], type="job.started")
    replaced = stack.decision(stack.request(first))
    assert replaced["outcome"] == "replaced"
    assert replaced["cancelled_job_id"] == accepted["job_id"]
    assert replaced["existing_job_state"] == "active"
    assert replaced["job_id"] != accepted["job_id"]
    [cancellation] = stack.reader.poll_until(stack.cat.name("cancellations"), 1)
    assert cancellation["value"]["job_id"] == accepted["job_id"]
    assert cancellation["value"]["previous_state"] == "active"
    assert cancellation["value"]["replaced_by"] == replaced["job_id"]
    assert len(stack.reader.poll_until(stack.cat.name("jobs"), 2)) == 2


def test_replace_except_schedule_keeps_the_original_time(stack: Stack):
    first = {**job("replace_except_schedule"), "scheduled_at": "2099-01-01T00:00:00Z"}
    accepted = stack.decision(stack.request(first))
    assert accepted["job"]["state"] == "scheduled"
    second = {**first, "scheduled_at": "2099-06-01T00:00:00Z"}
    replaced = stack.decision(stack.request(second))
    assert replaced["outcome"] == "replaced"
    assert replaced["job"]["scheduled_at"] == "2099-01-01T00:00:00.000Z"


def test_events_retryable_holds_completed_and_discarded_release(stack: Stack):
    held = job()
    a = stack.decision(stack.request(held))
    stack.event(a["job_id"], a["unique_key"], type="job.started")
    stack.event(a["job_id"], a["unique_key"], type="job.failed", attempt=1, max_attempts=3)
    assert stack.decision(stack.request(held))["existing_job_state"] == "retryable"
    time.sleep(1.6)  # the default first backoff: 1 s, jittered to at most 1.5 s
    stack.event(a["job_id"], a["unique_key"], type="job.started", attempt=3)
    stack.event(a["job_id"], a["unique_key"], type="job.failed", attempt=3, max_attempts=3)
    after_discard = stack.decision(stack.request(held))
    assert after_discard["outcome"] == "accepted"

    done = job()
    b = stack.decision(stack.request(done))
    stack.event(b["job_id"], b["unique_key"], type="job.started")
    stack.event(b["job_id"], b["unique_key"], type="job.completed")
    assert stack.decision(stack.request(done))["outcome"] == "accepted"


def test_completed_still_blocks_when_the_policy_lists_it(stack: Stack):
    states = ["available", "active", "scheduled", "retryable", "pending", "completed"]
    welcome = job("ignore", states=states, period="P7D")
    a = stack.decision(stack.request(welcome))
    stack.event(a["job_id"], a["unique_key"], state="active")
    stack.event(a["job_id"], a["unique_key"], state="completed")
    again = stack.decision(stack.request(welcome))
    assert again["outcome"] == "ignored" and again["existing_job_state"] == "completed"


BAD_INPUTS: dict[str, tuple[bytes | dict[str, Any], str]] = {
    "not_json": (b"{not json", "invalid_request"),
    "not_an_object": (b"[1, 2, 3]", "invalid_request"),
    "wrong_type": ({"type": 42, "args": []}, "invalid_request"),
    "missing_type": ({"args": [1]}, "invalid_request"),
    "too_large": ({"type": "t", "args": ["x" * 5000]}, "payload_too_large"),
    "invalid_policy": (
        {"type": "t", "args": [], "unique": {"keys": ["meta"]}},
        "invalid_request",
    ),
}


@pytest.mark.parametrize("role", ["intake", "requests"])
def test_bad_input_is_decided_invalid_and_never_stops_the_processor(stack: Stack, role: str):
    ids = {}
    for name, (value, _) in BAD_INPUTS.items():
        ids[name] = uuid.uuid4().hex
        send(stack.producer, stack.cat.name(role), value, b"k", {"request_id": ids[name]})
    stack.producer.flush()
    for name, (_, code) in BAD_INPUTS.items():
        record = stack.decision(ids[name])
        assert record["outcome"] == "invalid", name
        assert record["error"]["code"] == code, (name, record["error"])
        assert record["error"]["message"], name
    rejections = stack.reader.poll_until(stack.cat.name("rejections"), len(BAD_INPUTS))
    assert {r["value"]["error"]["request_id"] for r in rejections} >= set(ids.values())
    assert stack.processor.alive
    assert stack.decision(stack.request(job()))["outcome"] == "accepted"


def test_intake_routes_by_fingerprint_and_keeps_the_request_id(stack: Stack):
    first = job()
    request_id = uuid.uuid4().hex
    send(stack.producer, stack.cat.name("intake"), first, b"any-key", {"request_id": request_id})
    stack.producer.flush()
    record = stack.decision(request_id)
    assert record["outcome"] == "accepted"
    assert record["source"]["topic"] == stack.cat.name("requests")
    assert stack.decision(stack.request(first))["outcome"] == "rejected"


def test_a_request_keyed_wrongly_is_rerouted_and_decided_once(stack: Stack):
    first = job()
    stack.decision(stack.request(first))
    request_id = uuid.uuid4().hex
    send(stack.producer, stack.cat.name("requests"), first, b"not-the-fingerprint",
         {"request_id": request_id})  # fmt: skip
    stack.producer.flush()
    record = stack.decision(request_id)
    assert record["outcome"] == "rejected"
    assert record["unique_key"] == fingerprint_of(first)


def test_reply_to_gets_the_decision_with_the_correlation_id(stack: Stack):
    reply_topic = stack.cat.name("replies")
    reader = Reader(stack.bootstrap, [reply_topic])
    request_id = stack.request(job(), reply_to=reply_topic, correlation_id="corr-1")
    reader.poll_until(reply_topic, 1)
    replies = [
        r for r in reader.records.get(reply_topic, [])
        if r["headers"].get("correlation_id") == b"corr-1"
    ]  # fmt: skip
    reader.close()
    assert len(replies) == 1 and replies[0]["value"]["request_id"] == request_id


def test_bad_and_unknown_events_are_not_fatal(stack: Stack):
    key = "0" * 64
    send(stack.producer, stack.cat.name("job_events"), b"not json", key)
    stack.event("0190f000-0000-7000-8000-000000000000", key, type="job.completed")
    send(stack.producer, stack.cat.name("job_events"), {"job_id": 5}, key)
    stack.producer.flush()
    assert stack.decision(stack.request(job()))["outcome"] == "accepted"
    assert stack.processor.alive


def test_events_on_job_events_are_forwarded_to_the_keys_log_and_applied(stack: Stack):
    first = job()
    accepted = stack.decision(stack.request(first))
    replies = stack.cat.name("replies")
    reader = Reader(stack.bootstrap, [replies])
    stack.event(accepted["job_id"], accepted["unique_key"], type="job.started")
    completed = {"job_id": accepted["job_id"], "unique_key": accepted["unique_key"],
                 "type": "job.completed"}  # fmt: skip
    send(stack.producer, stack.cat.name("job_events"), completed, accepted["unique_key"],
         {"reply_to": replies, "correlation_id": "evt-1"})  # fmt: skip
    stack.producer.flush()
    deadline = time.monotonic() + 30

    def reply() -> list[dict[str, Any]]:
        return [r for r in reader.records.get(replies, []) if r["headers"].get("correlation_id")]

    while not reply():
        assert time.monotonic() < deadline, "the forwarded event was never applied"
        reader.drain(0.2)
    [forwarded] = reply()
    assert forwarded["value"]["outcome"] == "applied"
    assert forwarded["value"]["state"] == "completed"
    assert stack.decision(stack.request(first))["outcome"] == "accepted"


def test_a_restart_keeps_the_state(stack: Stack):
    first = job()
    stack.decision(stack.request(first))
    stack.processor.stop()
    stack.processor.start()
    assert stack.decision(stack.request(first))["outcome"] == "rejected"


def test_a_reply_to_a_missing_topic_is_dropped_not_fatal(stack: Stack):
    request_id = stack.request(job(), reply_to=f"no-such-topic-{uuid.uuid4().hex}")
    assert stack.decision(request_id)["outcome"] == "accepted"
    assert stack.decision(stack.request(job()))["outcome"] == "accepted"
    assert stack.processor.alive


def test_finished_keys_and_jobs_are_pruned_and_tombstoned(kafka_bootstrap, namespace, tmp_path):
    from confluent_kafka import Consumer

    from gateway.partitioner import partition_for

    cat = apply_topics(kafka_bootstrap, namespace)
    proc = Processor(kafka_bootstrap, namespace, tmp_path, "1", "--retention-seconds", "2")
    reader = Reader(kafka_bootstrap, [cat.name("decisions")])
    stack = Stack(kafka_bootstrap, cat, proc.start(), reader)
    try:
        finished = job()
        key = fingerprint_of(finished)
        accepted = stack.decision(stack.request(finished))
        stack.event(accepted["job_id"], key, type="job.started")
        stack.event(accepted["job_id"], key, type="job.completed")
        partition = partition_for(key.encode(), cat.by_role("requests").partitions)
        # Later records on the same partition move its event time past the expiry.
        neighbours = (
            j
            for j in iter(job, None)
            if partition_for(fingerprint_of(j).encode(), cat.by_role("requests").partitions)
            == partition
        )
        changelog = changelog_name(group_name(namespace), cat.name("requests"))
        consumer = Consumer(
            {
                "bootstrap.servers": kafka_bootstrap,
                "group.id": uuid.uuid4().hex,
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
            }
        )
        consumer.subscribe([changelog, cat.name("job_states")])
        # The key's entries leave the changelog, and the job leaves job_states.
        wanted = {changelog: key.encode(), cat.name("job_states"): accepted["job_id"].encode()}
        gone: set[str] = set()
        for _ in range(40):
            stack.decision(stack.request(next(neighbours)))
            end = time.monotonic() + 1
            while time.monotonic() < end and len(gone) < len(wanted):
                msg = consumer.poll(0.1)
                # A Message is falsy when its value is None: compare with None.
                if (
                    msg is not None
                    and not msg.error()
                    and wanted[msg.topic()] in msg.key()
                    and msg.value() is None
                ):
                    gone.add(msg.topic())
            if len(gone) == len(wanted):
                break
        consumer.close()
        assert gone == set(wanted), proc.log()
    finally:
        reader.close()
        proc.stop()


def test_a_client_id_is_taken_until_its_finished_job_leaves_the_store(
    kafka_bootstrap, namespace, tmp_path
):
    from gateway.partitioner import partition_for

    cat = apply_topics(kafka_bootstrap, namespace)
    proc = Processor(kafka_bootstrap, namespace, tmp_path, "1", "--retention-seconds", "2")
    reader = Reader(kafka_bootstrap, [cat.name("decisions")])
    stack = Stack(kafka_bootstrap, cat, proc.start(), reader)
    given, live = (f"0190f000-0000-7000-8000-{uuid.uuid4().hex[:12]}" for _ in range(2))
    partitions = cat.by_role("requests").partitions
    while partition_for(live.encode(), partitions) != partition_for(given.encode(), partitions):
        live = f"0190f000-0000-7000-8000-{uuid.uuid4().hex[:12]}"

    def enqueue(args: list[Any], job_id: str = given) -> dict[str, Any]:
        request_id = uuid.uuid4().hex
        job = {"type": "report.build", "args": args, "id": job_id}
        send(stack.producer, cat.name("requests"), job, job_id, {"request_id": request_id})
        stack.producer.flush()
        return stack.decision(request_id)

    try:
        # A live job stored before the partition's first expiring record must outlive
        # that record's expiry: the store's switch to expiring records keeps it forever.
        assert enqueue([0], live)["outcome"] == "accepted"
        assert enqueue([1])["outcome"] == "accepted"
        taken = enqueue([2])
        assert taken["outcome"] == "rejected" and taken["existing_job_id"] == given
        for event in ("job.started", "job.completed"):
            send(stack.producer, cat.name("requests"), {"job_id": given, "type": event}, given,
                 {KIND_HEADER: JOB_EVENT.decode()})  # fmt: skip
        assert enqueue([3])["outcome"] == "rejected"  # finished, still known
        time.sleep(2.5)  # the retention after it finished: the record leaves the store
        assert enqueue([4])["outcome"] == "accepted"
        assert enqueue([5], live)["outcome"] == "rejected"
    finally:
        reader.close()
        proc.stop()


def test_metrics_are_served(kafka_bootstrap, namespace, tmp_path):
    import urllib.request

    from tests.support import free_port_block

    cat = apply_topics(kafka_bootstrap, namespace)
    port = free_port_block()
    proc = Processor(kafka_bootstrap, namespace, tmp_path, "1", "--metrics-port", str(port))
    reader = Reader(kafka_bootstrap, [cat.name("decisions")])
    stack = Stack(kafka_bootstrap, cat, proc.start(), reader)
    try:
        first = job()
        stack.decision(stack.request(first))
        stack.decision(stack.request(first))
        partitions = cat.by_role("requests").partitions
        lag: list[str] = []
        # Lag comes with each process's client statistics, every second; with
        # several processes, the port adds theirs up.
        for _ in range(30):
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
            lag = [
                line
                for line in text.splitlines()
                if line.startswith("gateway_consumer_lag{") and cat.name("requests") in line
            ]
            if len(lag) == partitions:
                break
            time.sleep(0.5)
        assert 'gateway_decisions_total{dialect="ojs",outcome="accepted"} 1.0' in text
        assert 'gateway_decisions_total{dialect="ojs",outcome="rejected"} 1.0' in text
        assert "gateway_decision_latency_seconds_count 2.0" in text
        assert len(lag) == partitions
        assert all(float(line.split()[-1]) <= 1 for line in lag)  # caught up (a marker at most)
    finally:
        reader.close()
        proc.stop()
