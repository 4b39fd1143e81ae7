"""Early answers under SIGKILL: every answer a caller got before its decision was committed
is the decision finally committed, though the processor that sent it died uncommitted."""

from __future__ import annotations

import itertools
import random
import threading
import time
import uuid
from collections import defaultdict
from typing import Any

import pytest

from gateway.core.decision_records import JOB_REF, job_shown
from gateway.processor.replies import EarlyReplies
from gateway.sdk import Client, EnqueueResult
from tests.integration.harness import Processor, Reader, apply_topics

pytestmark = pytest.mark.kafka

BATCH = 20
# Lives of the processor once it answers again after a restart: most end before its first
# commit (every 2 s), so what it answered is decided again by the next; some commit.
LIVES_S = (0.5, 1.0, 0.3, 3.0, 0.7)
KILLS = 5


def test_every_early_answer_is_the_decision_committed_after_sigkills(
    kafka_bootstrap, namespace, tmp_path
):
    cat = apply_topics(kafka_bootstrap, namespace)
    proc = Processor(kafka_bootstrap, namespace, tmp_path, "1", "--commit-interval", "2")
    proc.start()
    tag = uuid.uuid4().hex[:8]
    rng = random.Random(7)
    answers: list[Any] = []
    keys: set[int] = set()
    killing = threading.Event()
    killing.set()

    def load() -> None:
        """Batches while the kills go on; each key comes back in the next few batches."""
        with Client(kafka_bootstrap, namespace) as client:
            for batch in itertools.count():
                if not killing.is_set() and batch > 0:
                    return
                ns = [rng.randrange(8 * batch, 8 * batch + 24) for _ in range(BATCH)]
                keys.update(ns)
                jobs = [
                    {"type": "early.check", "args": {"n": n, "tag": tag},
                     "unique": {"keys": ["type", "args"]}}
                    for n in ns
                ]  # fmt: skip
                answers.extend(client.enqueue_many(jobs, wait=True))
                time.sleep(0.05)

    loader = threading.Thread(target=load)
    loader.start()
    try:
        for life in itertools.islice(itertools.cycle(LIVES_S), KILLS):
            answered = len(answers)
            while len(answers) == answered and loader.is_alive():
                time.sleep(0.05)
            time.sleep(life)
            proc.kill()
            proc.start()
        killing.clear()
        loader.join(timeout=300)
        assert not loader.is_alive(), proc.log()
    finally:
        killing.clear()
        proc.stop()  # a graceful stop commits

    assert all(isinstance(a, EnqueueResult) for a in answers), answers
    reader = Reader(kafka_bootstrap, [cat.name("decisions"), cat.name("replies")])
    try:
        decisions = reader.poll_until(cat.name("decisions"), len(answers))
        reader.settle()
        replies = reader.records.get(cat.name("replies"), [])
    finally:
        reader.close()

    decisions = [d for d in decisions if d["value"].get("kind") == "request"]
    committed = {d["value"]["request_id"]: d["value"] for d in decisions}
    assert len(decisions) == len(committed) == len(answers)  # exactly once still
    for answer in answers:
        final = committed[answer.request_id]
        got = (answer.outcome, answer.job_id, answer.existing_job_id)
        assert got == (final["outcome"], final["job_id"], final["existing_job_id"])
        # The committed record is the answer and its audit trail (docs/audit.md); a
        # duplicate's names the job it met (job_ref), which the answer carries.
        trail = {"kind", "state", "prev", "digest", JOB_REF}
        told = {k: v for k, v in final.items() if k not in trail}
        if JOB_REF in final:
            told["job"] = job_shown(final)
        assert answer.record == told
    assert [a.outcome for a in answers].count("accepted") == len(keys)

    # The kills landed between early answers and their commit: those requests were
    # answered twice, by the processor that died and by its successor, the same.
    by_correlation: dict[bytes, list[Any]] = defaultdict(list)
    for reply in replies:
        by_correlation[reply["headers"]["correlation_id"]].append(reply["value"])
    twice = [values for values in by_correlation.values() if len(values) > 1]
    assert twice, "no answer was sent again after a kill: the test proved nothing"
    assert all(value == values[0] for values in twice for value in values)


def test_only_an_undelivered_early_reply_is_reported(kafka_bootstrap, namespace):
    """The replies' producer reports failed deliveries alone (librdkafka's
    delivery.report.only.error): a reply that arrives is not counted, one that cannot is."""
    cat = apply_topics(kafka_bootstrap, namespace)
    lost: list[int] = []
    replies = EarlyReplies(
        {"bootstrap.servers": kafka_bootstrap, "message.timeout.ms": 2_000,
         "topic.metadata.propagation.max.ms": 1_000},
        lambda: lost.append(1),
    )  # fmt: skip
    replies.send(cat.name("replies"), b"k", b"delivered", [("h", b"1")])
    replies.close(10)
    assert lost == []
    replies.send(f"{namespace}.no-such-topic", b"k", b"lost", None)
    replies.close(10)
    assert lost == [1]
