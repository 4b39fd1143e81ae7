"""`gateway replay` of a log whose start is gone: after the first half of every partition of
`requests` and `decisions` is deleted (as retention deletes it), each key starts from the
state its first surviving audit record carries, and every decision left beside its input is
decided again with no difference."""

from __future__ import annotations

import re
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from gateway.core.times import format_rfc3339
from gateway.sdk import Client, EnqueueResult
from tests.integration.cli import gateway
from tests.integration.harness import Processor, apply_topics

pytestmark = pytest.mark.kafka

KEYS = 40


def job(n: int, on_conflict: str = "reject") -> dict[str, Any]:
    return {
        "type": "window.job",
        "args": {"n": n},
        "unique": {"keys": ["type", "args"], "on_conflict": on_conflict},
    }


def test_a_replay_whose_start_is_gone_verifies_what_remains(
    kafka_bootstrap: str, namespace: str, tmp_path: Path
) -> None:
    cat = apply_topics(kafka_bootstrap, namespace)
    proc = Processor(kafka_bootstrap, namespace, tmp_path, "1").start()
    client = Client(kafka_bootstrap, namespace)
    decided, second_round = 0, ""
    try:
        # Three rounds over the same keys: duplicates, and between rounds some jobs run
        # and finish (the key is free again) or fail for good.
        for round_ in range(3):
            if round_ == 1:
                second_round = format_rfc3339(int(time.time() * 1000))
            answers = client.enqueue_many(
                [job(n, "ignore" if n % 3 else "reject") for n in range(KEYS)], wait=True
            )
            decided += len(answers)
            for n, answer in enumerate(answers):
                assert isinstance(answer, EnqueueResult), answer
                if str(answer.outcome) != "accepted" or n % 4 == round_ % 4:
                    continue
                ids = {"job_id": answer.job_id, "unique_key": answer.unique_key}
                client.publish_event({**ids, "type": "job.started"}, timeout=60)
                last = "job.completed" if n % 2 else "job.failed"
                extra = {"error": {"message": "no"}, "attempt": 25} if n % 2 == 0 else {}
                client.publish_event({**ids, "type": last, **extra}, timeout=60)
    finally:
        client.close()
        proc.stop()

    where = ["--bootstrap", kafka_bootstrap, "--namespace", namespace]
    whole = gateway("replay", *where)
    assert whole.returncode == 0, whole.stdout + whole.stderr
    assert "verified identical (100.0%), 0 different" in whole.stdout, whole.stdout
    assert "could not verify" not in whole.stdout

    # A window from the second round on, of one partition: its keys start from the state
    # their first records in it carry.
    window = gateway("replay", *where, "--from", second_round, "--partition", "0")
    assert window.returncode == 0, window.stdout + window.stderr
    assert re.search(r"decided [1-9]\d* again: \d+ verified identical \(100.0%\), 0 different",
                     window.stdout), window.stdout  # fmt: skip
    assert "problems" not in window.stdout and "could not verify" not in window.stdout
    # What is read before the window, for the state it starts from, is said to be context.
    assert re.search(r"^outside the window, read as its context \(expected\): [1-9]",
                     window.stdout, re.MULTILINE), window.stdout  # fmt: skip
    assert window.stdout.splitlines()[-1] == (
        "result: nothing wrong found: every decision decided again is identical"
    )

    remaining = _delete_first_half(kafka_bootstrap, [cat.name("requests"), cat.name("decisions")])
    window = gateway("replay", *where)
    assert window.returncode == 0, window.stdout + window.stderr
    verified = re.search(r"(\d+) verified identical \(100.0%\), 0 different", window.stdout)
    assert verified is not None, window.stdout
    # The records before each partition's first surviving audit record cannot be checked.
    assert int(verified[1]) >= 0.95 * _beside_their_input(kafka_bootstrap, cat, remaining)
    reasons = re.findall(r"^  \d+: (.+)$", window.stdout, re.MULTILINE)
    assert reasons and all(
        r.startswith(("decided before the oldest", "its input record is gone")) for r in reasons
    ), window.stdout
    assert window.stdout.splitlines()[-1].startswith("result: nothing wrong found; ")
    assert "problems" not in window.stdout and decided == 3 * KEYS


def _delete_first_half(bootstrap: str, topics: list[str]) -> dict[tuple[str, int], int]:
    """Delete the first half of every partition of `topics`, as retention would; the first
    offset each keeps."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex})
    admin = AdminClient({"bootstrap.servers": bootstrap})
    cut: dict[tuple[str, int], int] = {}
    try:
        for topic in topics:
            for partition in consumer.list_topics(topic, timeout=10).topics[topic].partitions:
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), 10)
                cut[(topic, partition)] = low + (high - low) // 2
    finally:
        consumer.close()
    futures = admin.delete_records([TopicPartition(t, p, o) for (t, p), o in cut.items()])
    for future in futures.values():
        future.result(timeout=30)
    return cut


def _beside_their_input(bootstrap: str, cat: Any, cut: dict[tuple[str, int], int]) -> int:
    """The audit records of requests left on `decisions` whose input is left too."""
    requests, decisions = cat.name("requests"), cat.name("decisions")
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
        "isolation.level": "read_committed", "enable.partition.eof": True,
    })  # fmt: skip
    parts = [p for t, p in cut if t == decisions]
    consumer.assign([TopicPartition(decisions, p, cut[(decisions, p)]) for p in parts])
    count, done = 0, set[int]()
    try:
        while len(done) < len(parts):
            for msg in consumer.consume(500, timeout=1):
                if msg.error():
                    done.add(msg.partition() or 0)
                    continue
                source = orjson.loads(msg.value() or b"{}")["source"]
                if (
                    source["topic"] == requests
                    and source["offset"] >= cut[(requests, source["partition"])]
                ):
                    count += 1
    finally:
        consumer.close()
    return count
