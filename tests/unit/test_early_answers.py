"""Early answers: a reply leaves through its own producer once its record is handled; the
rest commits. Drives the processor's own Dedup and its emitter over an in-memory store.
"""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest

from gateway.core import INTERNAL
from gateway.processor.emitter import emitter
from gateway.processor.metrics import Metrics
from gateway.processor.replies import ReplyTopics
from gateway.stage import requests as requests_module
from gateway.stage.dedup import Dedup
from gateway.stage.parsing import Limits
from gateway.stage.records import Source
from gateway.wire import JOB_EVENT, KIND_HEADER
from tests.memory_store import Store
from tests.support import replaces_code
from tests.unit.test_total import JOB, PARTITIONS, REQ, T0, routed

REPLIES = "gateway.replies"
NAMES = {
    role: f"gateway.{role}"
    for role in ("jobs", "job_states", "decisions", "rejections", "dead_letters",
                 "cancellations", "requests", "intake")
}  # fmt: skip

Sent = tuple[str, bytes | None, bytes | None, Any]


class Processor:
    """A Dedup whose outputs go through the processor's emitter into two lists: what the
    transaction would commit and what leaves early."""

    def __init__(self, early: bool = True, store: Store | None = None) -> None:
        self.committed: list[Sent] = []
        self.early: list[Sent] = []
        self.store = store or Store()
        topics = ReplyTopics(REPLIES, f"{REPLIES}.", NAMES.values(), lambda: {REPLIES})
        metrics = Metrics()

        def into(sent: list[Sent]) -> Any:
            def produce(
                topic: str, key: Any, value: Any, headers: Any, _partition: int = -1
            ) -> None:
                sent.append((topic, key, value, headers))

            return produce

        emit = emitter(NAMES, topics, metrics, into(self.committed),
                       into(self.early) if early else None)  # fmt: skip
        self.dedup = Dedup(PARTITIONS, emit, metrics, Limits(), lambda _, k: self.store.state(k))

    def record(
        self, offset: int, value: dict[str, Any], key: bytes, partition: int, **headers: bytes
    ) -> None:
        source = Source(REQ, partition, offset, T0 + offset, headers)
        self.store.at(source.timestamp_ms)
        self.dedup.on_record(orjson.dumps(value), key, source, self.store.state(key))

    def topics(self, sent: list[Sent]) -> list[str]:
        return [topic for topic, *_ in sent]


def asking(correlation: bytes) -> dict[str, bytes]:
    return {"reply_to": REPLIES.encode(), "correlation_id": correlation}


def test_a_reply_leaves_early_and_the_rest_commits():
    processor = Processor()
    key, partition = routed(JOB)
    processor.record(1, JOB, key, partition, **asking(b"c1"))
    assert processor.topics(processor.early) == [REPLIES]
    assert REPLIES not in processor.topics(processor.committed)
    assert {"gateway.jobs", "gateway.job_states", "gateway.decisions"} <= set(
        processor.topics(processor.committed)
    )
    # The early reply is the decision record the transaction commits, less the audit trail
    # (the state it was decided from, its place in the chain) the committed one adds.
    [(_, _, reply, headers)] = processor.early
    [decision] = [v for t, _, v, _ in processor.committed if t == "gateway.decisions"]
    assert decision.startswith(reply[:-1] + b',"kind":"request","state":{')
    assert headers == [("correlation_id", b"c1")]


def test_committed_answers_put_the_reply_in_the_transaction():
    processor = Processor(early=False)
    key, partition = routed(JOB)
    processor.record(1, JOB, key, partition, **asking(b"c1"))
    assert processor.early == [] and REPLIES in processor.topics(processor.committed)


def test_an_event_reply_leaves_early():
    processor = Processor()
    key, partition = routed(JOB)
    processor.record(1, JOB, key, partition)
    [job] = [orjson.loads(v or b"") for t, _, v, _ in processor.committed if t == "gateway.jobs"]
    event = {"job_id": job["id"], "unique_key": key.decode(), "type": "job.started"}
    processor.record(2, event, key, partition, **asking(b"e1"), **{KIND_HEADER: JOB_EVENT})
    [(_, _, reply, _)] = processor.early
    answer = orjson.loads(reply or b"")
    assert answer["outcome"] == "applied" and answer["state"] == "active"
    # The job the reply carries is the record job_states commits for it.
    states = [v for t, _, v, _ in processor.committed if t == "gateway.job_states"]
    assert answer["job"] == orjson.loads(states[-1] or b"")


@replaces_code
def test_a_failed_handling_sends_only_its_internal_answer_early(
    monkeypatch: pytest.MonkeyPatch,
):
    def boom(*_: Any, **__: Any) -> Any:
        raise RuntimeError("decide failed")

    monkeypatch.setattr(requests_module, "decide", boom)
    processor = Processor()
    key, partition = routed(JOB)
    processor.record(1, JOB, key, partition, **asking(b"c1"))
    [(_, _, reply, _)] = processor.early
    answer = orjson.loads(reply or b"")
    assert answer["outcome"] == "invalid" and answer["error"]["code"] == INTERNAL
    assert sorted(processor.topics(processor.committed)) == [
        "gateway.dead_letters", "gateway.decisions", "gateway.rejections",
    ]  # fmt: skip


def test_a_successor_deciding_again_from_the_committed_state_sends_the_same_replies():
    """A crash after early replies and before their commit: the successor starts from the
    last committed state and reads the same records at the same offsets."""
    first = Processor()
    key, partition = routed(JOB)
    first.record(1, JOB, key, partition, **asking(b"c1"))  # committed before the crash
    committed_state = copy.deepcopy(first.store)
    first.early.clear()
    uncommitted = [
        (2, JOB, asking(b"c2")),
        (3, {**JOB, "args": {"user_id": 8}}, asking(b"c3")),
        (4, JOB, asking(b"c4")),
    ]

    def decide_all(processor: Processor) -> list[Sent]:
        for offset, job, headers in uncommitted:
            job_key, job_partition = routed(job)
            processor.record(offset, job, job_key, job_partition, **headers)
        return processor.early

    answered = decide_all(first)
    successor = decide_all(Processor(store=committed_state))
    assert [orjson.loads(r or b"")["outcome"] for _, _, r, _ in answered] == [
        "rejected", "accepted", "rejected",
    ]  # fmt: skip
    assert successor == answered


def test_the_reply_address_filter_holds_for_early_replies():
    processor = Processor()
    key, partition = routed(JOB)
    processor.record(1, JOB, key, partition, reply_to=b"gateway.jobs", correlation_id=b"c1")
    assert processor.early == []
    assert not any(headers and ("correlation_id", b"c1") in headers
                   for *_, headers in processor.committed)  # fmt: skip
