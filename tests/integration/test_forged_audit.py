"""Forged audit records on a real log are reported (issue 46): a decision copied onto another
partition with its outcome changed, and a record chained onto a partition's head, its digest
made again, past the last input. Replay (whole and of either partition) exits 1 naming them,
explain marks the copy, and with the processor's key the resealed one fails its digest."""

from __future__ import annotations

import re
import uuid
from hashlib import blake2b
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Consumer, TopicPartition

from gateway.sdk import Client, EnqueueResult
from tests.integration.cli import gateway
from tests.integration.harness import Processor, apply_topics, producer

pytestmark = pytest.mark.kafka


def job(n: int) -> dict[str, Any]:
    return {"type": "forged.job", "args": {"n": n}, "unique": {"keys": ["type", "args"]}}


def read_all(bootstrap: str, topic: str, partitions: int) -> dict[int, list[tuple[int, bytes]]]:
    """Every committed record of `topic`, (offset, value) by partition."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
        "isolation.level": "read_committed", "enable.partition.eof": True,
    })  # fmt: skip
    found: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    ended: set[int] = set()
    try:
        while len(ended) < partitions:
            for msg in consumer.consume(500, timeout=1):
                if msg.error():
                    ended.add(msg.partition() or 0)
                else:
                    found[msg.partition() or 0].append((msg.offset() or 0, msg.value() or b""))
    finally:
        consumer.close()
    return found


def resealed(record: dict[str, Any]) -> bytes:
    """The record with its digest made again, as anyone who can write the topic can."""
    body = orjson.dumps({k: v for k, v in record.items() if k != "digest"})
    digest = blake2b(body, digest_size=16).hexdigest().encode()
    return body[:-1] + b',"digest":"' + digest + b'"}'


def test_forged_records_are_named_by_replay_and_explain(
    kafka_bootstrap: str, namespace: str, tmp_path: Path
) -> None:
    cat = apply_topics(kafka_bootstrap, namespace)
    keys = tmp_path / "audit.keys"
    keys.write_text(f"k1 {'ab' * 32}\n")
    proc = Processor(kafka_bootstrap, namespace, tmp_path, "1", "--audit-key-file", str(keys))
    proc.start()
    client = Client(kafka_bootstrap, namespace)
    try:
        answers = client.enqueue_many([job(n) for n in range(16)] * 2, wait=True)
        assert all(isinstance(a, EnqueueResult) for a in answers), answers
    finally:
        client.close()
        proc.stop()

    decisions, partitions = cat.name("decisions"), cat.by_role("decisions").partitions
    log = read_all(kafka_bootstrap, decisions, partitions)
    home = next(p for p, records in log.items() if records)
    other = (home + 1) % partitions
    accepted = next(orjson.loads(v) for _, v in log[home] if b'"outcome":"accepted"' in v)
    assert accepted["sealed_by"] == "k1"  # the processor sealed it with its key
    head = orjson.loads(log[home][-1][1])
    requests_end = max(orjson.loads(v)["source"]["offset"] for _, v in log[home]) + 1

    prod = producer(kafka_bootstrap)
    # (a) an accepted decision copied onto another partition, its outcome changed.
    copy = orjson.dumps({**accepted, "outcome": "rejected"})
    prod.produce(decisions, copy, partition=other)
    # (b) a record chained onto the head, its digest made again, past the last input.
    past = {**head, "source": {**head["source"], "offset": requests_end + 5},
            "prev": head["digest"]}  # fmt: skip
    prod.produce(decisions, resealed(past), partition=home)
    prod.flush(30)
    after = read_all(kafka_bootstrap, decisions, partitions)
    copied_at, past_at = after[other][-1][0], after[home][-1][0]
    copied = f"misplaced: {decisions}[{other}]@{copied_at}: it sits on partition {other}"
    beyond = f"beyond the last input: {decisions}[{home}]@{past_at}: its source"

    where = ["--bootstrap", kafka_bootstrap, "--namespace", namespace]
    for only in ([], ["--partition", str(home)], ["--partition", str(other)]):
        replayed = gateway("replay", *where, *only)
        assert replayed.returncode == 1, replayed.stdout + replayed.stderr
        assert copied in replayed.stdout, replayed.stdout
        if only != ["--partition", str(other)]:
            assert beyond in replayed.stdout, replayed.stdout
        # Without the key, keyed digests are not checked, and that is said.
        assert "sealed with a key that no --audit-key-file given holds" in replayed.stdout

    keyed = gateway("replay", *where, "--audit-key-file", str(keys))
    assert keyed.returncode == 1, keyed.stdout + keyed.stderr
    assert copied in keyed.stdout and "no --audit-key-file given holds" not in keyed.stdout
    # Made again without the key, its digest fails: it was not the processor's.
    assert re.search(rf"altered: {re.escape(decisions)}\[{home}\]@{past_at}: its bytes do not "
                     "match its digest", keyed.stdout), keyed.stdout  # fmt: skip

    told = gateway("explain", accepted["unique_key"], *where, "--audit-key-file", str(keys),
                   "--index", str(tmp_path / "index"))  # fmt: skip
    assert told.returncode == 0, told.stdout + told.stderr
    # Every record of the key is listed; the forged ones, and only they, marked.
    marked = {re.sub(r" from .*", "", line.split("(", 1)[1]) for line in told.stdout.splitlines()
              if line.startswith("REFUTED  ")}  # fmt: skip
    forged = {f"{decisions}[{other}]@{copied_at}", f"{decisions}[{home}]@{past_at}"}
    assert f"{decisions}[{other}]@{copied_at}" in marked and marked <= forged, told.stdout
    assert f"REFUTED: it sits on partition {other}, but the audit records of its source" in (
        told.stdout
    )
    assert told.stdout.rstrip().endswith("(`gateway replay` checks every record against its input)")
