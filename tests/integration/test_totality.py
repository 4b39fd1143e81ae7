"""No input stops a partition: each class of bad record on the real broker gets its coded
answer, the processor never restarts, and a valid request right after is decided."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from gateway.catalogue import Catalogue
from gateway.partitioner import PRODUCER_SETTING
from gateway.processor.changelogs import previous_name
from gateway.wire import group_name
from tests.integration.harness import Processor, Reader, apply_topics, fingerprint_of, send

pytestmark = pytest.mark.kafka

ROLES = ("decisions", "rejections", "replies", "dead_letters", "jobs", "job_states")
RESTARTED = "exited; restarting"  # what the supervisor logs when the runtime ended
FAULTS = Path(__file__).parent / "faults"


class Stack:
    def __init__(self, bootstrap: str, cat: Catalogue, processor: Processor) -> None:
        self.bootstrap, self.cat, self.processor = bootstrap, cat, processor
        # Large enough for the records a test sends to be over the gateway's limits.
        self.producer = Producer(
            {"bootstrap.servers": bootstrap, "message.max.bytes": 1_048_000} | PRODUCER_SETTING
        )
        self.reader = Reader(bootstrap, [cat.name(r) for r in ROLES])

    def send(
        self, role: str, value: bytes | dict[str, Any], key: Any = None, **headers: Any
    ) -> str:
        headers.setdefault("request_id", uuid.uuid4().hex)
        # The standard library writes what orjson refuses to: deep values, huge integers.
        data = value if isinstance(value, bytes) else json.dumps(value).encode()
        send(self.producer, self.cat.name(role), data, key, headers)
        self.producer.flush()
        return headers["request_id"]

    def find(self, role: str, match: Any, timeout: float = 30) -> dict[str, Any]:
        """The one record of `role` that `match` picks, once committed."""
        deadline = time.monotonic() + timeout
        while True:
            found = [r for r in self.reader.records.get(self.cat.name(role), []) if match(r)]
            if found or time.monotonic() > deadline:
                break
            self.reader.drain(0.3)
        assert len(found) == 1, (role, found, self.processor.log())
        return found[0]

    def decision(self, request_id: str) -> dict[str, Any]:
        return self.find("decisions", lambda r: r["value"].get("request_id") == request_id)["value"]

    def reply(self, correlation_id: str) -> dict[str, Any]:
        cid = correlation_id.encode()
        return self.find("replies", lambda r: r["headers"].get("correlation_id") == cid)["value"]

    def accept(self) -> dict[str, Any]:
        """A valid request after a bad one: decided, by a processor that never restarted."""
        valid = job()
        record = self.decision(self.send("requests", valid, fingerprint_of(valid)))
        assert record["outcome"] == "accepted"
        assert self.processor.alive and RESTARTED not in self.processor.log()
        return record

    def event(self, job_id: str, route: str, correlation_id: str, **fields: Any) -> None:
        """A job event through `job_events`, asking for a reply."""
        value = {"job_id": job_id, "unique_key": route, **fields}
        self.send("job_events", value, route, reply_to=self.cat.name("replies"),
                  correlation_id=correlation_id)  # fmt: skip


@pytest.fixture
def stack(kafka_bootstrap: str, namespace: str, tmp_path: Path) -> Iterator[Stack]:
    cat = apply_topics(kafka_bootstrap, namespace)
    proc = Processor(kafka_bootstrap, namespace, tmp_path, "1").start()
    stack = Stack(kafka_bootstrap, cat, proc)
    yield stack
    stack.reader.close()
    proc.stop()


def job(**fields: Any) -> dict[str, Any]:
    return {
        "type": "email.send",
        "args": {"user_id": uuid.uuid4().hex},
        "unique": {"keys": ["type", "args"]},
        **fields,
    }


def deep(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def refused(stack: Stack, value: bytes | dict[str, Any]) -> dict[str, Any]:
    """A request through intake that the gateway must refuse; its decision record."""
    return stack.decision(stack.send("intake", value))


def test_deep_nesting_in_args_is_refused(stack: Stack):
    record = refused(stack, job(args={"a": deep(253)}))
    assert record["outcome"] == "invalid" and record["error"]["code"] == "invalid_request"
    assert "deep" in record["error"]["message"]
    stack.accept()


def test_integers_beyond_the_exact_range_are_refused_not_rounded(stack: Stack):
    record = refused(stack, job(args={"n": 2**64}))
    assert record["outcome"] == "invalid" and record["error"]["code"] == "invalid_request"
    stack.accept()


def test_a_retry_interval_out_of_range_is_refused_at_enqueue(stack: Stack):
    bad = job(retry={"max_attempts": 3, "initial_interval": "P99999999D"})
    record = refused(stack, bad)
    assert record["outcome"] == "invalid" and record["error"]["code"] == "invalid_request"
    stack.accept()


def test_meta_keys_without_meta_in_keys_is_refused(stack: Stack):
    bad = job(unique={"keys": ["type", "args"], "meta_keys": ["tenant"]})
    record = refused(stack, bad)
    assert record["error"]["code"] == "invalid_request" and "meta" in record["error"]["message"]
    stack.accept()


def test_an_oversized_request_on_intake_is_refused(stack: Stack):
    big = job(args={"blob": "x" * 900_000})
    record = refused(stack, big)
    assert record["error"]["code"] == "payload_too_large"
    stack.accept()


def test_job_events_that_cannot_be_applied_or_forwarded_get_coded_replies(stack: Stack):
    accepted = stack.accept()
    route, job_id = accepted["unique_key"], accepted["job_id"]
    stack.event(job_id, route, "started", type="job.started")
    assert stack.reply("started")["outcome"] == "applied"
    # A result nested too deep, a result too large, a record too large to forward.
    stack.event(job_id, route, "deep", type="job.completed", result=deep(253))
    stack.event(job_id, route, "large", type="job.completed", result="r" * 900_000)
    stack.send("job_events", b"{" + b" " * 1_040_000 + b"}", route,
               reply_to=stack.cat.name("replies"), correlation_id="huge")  # fmt: skip
    for correlation_id in ("deep", "large", "huge"):
        reply = stack.reply(correlation_id)
        assert reply["outcome"] == "invalid", (correlation_id, reply)
        assert reply["error"]["code"] in ("invalid_event", "payload_too_large"), reply
    # The job is still active: none of them completed it.
    stack.event(job_id, route, "done", type="job.completed", result={"ok": True})
    assert stack.reply("done")["state"] == "completed"
    stack.accept()


def test_reply_to_goes_only_where_the_deployment_allows(stack: Stack):
    cat = stack.cat
    compacted = f"{cat.name('replies')}.compacted"
    admin = AdminClient({"bootstrap.servers": stack.bootstrap})
    topic = NewTopic(compacted, 1, 1, config={"cleanup.policy": "compact"})
    admin.create_topics([topic])[compacted].result()
    forbidden = ["__consumer_offsets", cat.name("jobs"), cat.name("job_states"),
                 cat.name("decisions"), "somewhere-else"]  # fmt: skip
    for target in forbidden:
        record = stack.decision(stack.send("intake", job(), reply_to=target))
        assert record["outcome"] == "accepted", target
    # A keyless refusal replied to a compacted topic under the prefix: it gets a key.
    reader = Reader(stack.bootstrap, [compacted])
    deadline = time.monotonic() + 30
    while not reader.records.get(compacted) and time.monotonic() < deadline:
        stack.send("intake", b"not json", reply_to=compacted)
        reader.drain(2)
    assert reader.records.get(compacted) and reader.records[compacted][0]["key"]
    reader.close()
    stack.reader.settle(quiet=2)
    # Nothing but job records on job_states, nothing but jobs on jobs.
    for record in stack.reader.records.get(cat.name("job_states"), []):
        a_job = record["value"] is None or "id" in record["value"] and "state" in record["value"]
        assert a_job or (record["key"] or b"").startswith(b"\x00"), record
    for record in stack.reader.records.get(cat.name("jobs"), []):
        assert "outcome" not in record["value"], record
    stack.accept()


def test_an_unexpected_exception_is_answered_internal_and_kept(
    kafka_bootstrap: str, namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    # The processor's processes load faults/sitecustomize.py: handling type fault.raise raises.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(FAULTS), *sys.path]))
    monkeypatch.setenv("GATEWAY_TEST_FAULT", "fault.raise")
    cat = apply_topics(kafka_bootstrap, namespace)
    proc = Processor(kafka_bootstrap, namespace, tmp_path, "1").start()
    stack = Stack(kafka_bootstrap, cat, proc)
    try:
        bad = {"type": "fault.raise", "args": [1], "unique": {}}
        request_id = stack.send("requests", bad, fingerprint_of(bad), reply_to=cat.name("replies"),
                                correlation_id="fault")  # fmt: skip
        record = stack.decision(request_id)
        assert record["outcome"] == "invalid" and record["error"]["code"] == "internal"
        assert stack.reply("fault")["error"]["code"] == "internal"
        dead = stack.find("dead_letters", lambda r: True)["value"]
        assert dead["stage"] == "dedup" and "injected" in dead["error"]
        assert dead["source"]["topic"] == cat.name("requests")
        assert orjson.loads(__import__("base64").b64decode(dead["value"])) == bad
        rejection = stack.find("rejections", lambda r: True)["value"]
        assert rejection["error"]["code"] == "internal"
        stack.accept()
    finally:
        stack.reader.close()
        proc.stop()


def test_the_processor_refuses_topics_that_differ_from_the_catalogue(
    kafka_bootstrap: str, namespace: str, tmp_path: Path
):
    # The topics of another catalogue: requests and job_events with 4 partitions, not 8.
    source = Path(__file__).resolve().parents[2] / "topics"
    other = tmp_path / "topics"
    other.mkdir()
    (other / "schemas").symlink_to(source / "schemas")
    text = (source / "topics.toml").read_text()
    (other / "topics.toml").write_text(text.replace("partitions = 8", "partitions = 4"))
    env = {**os.environ, "GATEWAY_CATALOGUE": str(other / "topics.toml")}
    subprocess.run(
        [sys.executable, "-m", "gateway", "topics", "apply", "--bootstrap", kafka_bootstrap,
         "--namespace", namespace], env=env, check=True, capture_output=True,
    )  # fmt: skip
    done = _process_once(kafka_bootstrap, namespace, tmp_path)
    assert done.returncode == 78, done.stderr[-3000:]
    assert "has 4 partitions, the catalogue says 8" in done.stderr
    assert RESTARTED not in done.stderr


def test_a_group_whose_state_a_previous_version_kept_is_refused_with_what_to_do(
    kafka_bootstrap: str, namespace: str, tmp_path: Path
):
    cat = apply_topics(kafka_bootstrap, namespace)
    # What a gateway before 0.2 left: its changelog of `requests`, and none of this version's.
    old = previous_name(group_name(namespace), cat.name("requests"))
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(old, 8, 1, config={"cleanup.policy": "compact"})])[old].result()
    done = _process_once(kafka_bootstrap, namespace, tmp_path)
    assert done.returncode == 78, done.stderr[-3000:]
    assert f"is in {old}, written by a gateway before 0.2" in done.stderr
    assert "--namespace" in done.stderr and f"delete {old}" in done.stderr
    assert RESTARTED not in done.stderr


def _process_once(kafka_bootstrap: str, namespace: str, tmp_path: Path) -> Any:
    """`gateway process` in the namespace, until it ends (it is expected to refuse)."""
    return subprocess.run(
        [sys.executable, "-m", "gateway", "process", "--bootstrap", kafka_bootstrap,
         "--namespace", namespace, "--state-dir", str(tmp_path / "state")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
