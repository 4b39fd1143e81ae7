"""Real processors in subprocesses, and real producers and consumers around them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from gateway import admin, catalogue
from gateway.catalogue import Catalogue
from gateway.core import Request, parse_request
from gateway.partitioner import PRODUCER_SETTING

READY_LINE = "processing partitions"


class Processor:
    """`gateway process` as a user runs it, in its own process group."""

    def __init__(self, bootstrap: str, namespace: str, workdir: Path, instance: str, *extra: str):
        # One runtime unless the test asks for more: a test's processor starts and is ready
        # at once, with no second member joining later (test_processes.py runs several).
        if "--processes" not in extra:
            extra = ("--processes", "1", *extra)
        self.args = [
            sys.executable, "-m", "gateway", "process", "--bootstrap", bootstrap,
            "--namespace", namespace, "--instance-id", instance,
            "--state-dir", str(workdir / f"state-{instance}"), *extra,
        ]  # fmt: skip
        self.log_path = workdir / f"processor-{instance}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, wait: bool = True) -> Processor:
        self._log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None and self.proc.poll() is None, self.log()
            with open(self.log_path, "rb") as f:
                f.seek(self._log_start)
                if READY_LINE.encode() in f.read():
                    return
            time.sleep(0.1)
        raise AssertionError(f"processor not ready in {timeout}s:\n{self.log()}")

    def kill(self) -> None:
        """SIGKILL: no flush, no commit, no goodbye."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-5000:] if self.log_path.exists() else ""


def apply_topics(bootstrap: str, namespace: str) -> Catalogue:
    cat = catalogue.load(namespace=namespace)
    admin.apply(cat, {"bootstrap.servers": bootstrap})
    return cat


def producer(bootstrap: str) -> Producer:
    return Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5}
        | PRODUCER_SETTING
    )


def fingerprint_of(job: dict[str, Any]) -> str:
    request = parse_request(job)
    assert isinstance(request, Request) and request.unique_key, request
    return request.unique_key


def send(
    prod: Producer,
    topic: str,
    value: bytes | dict[str, Any],
    key: str | bytes | None = None,
    headers: dict[str, str] | None = None,
) -> None:
    data = value if isinstance(value, bytes) else orjson.dumps(value)
    prod.produce(topic, data, key=key, headers=list((headers or {}).items()))
    prod.poll(0)


def send_request(prod: Producer, cat: Catalogue, job: dict[str, Any], **headers: str) -> str:
    """Produce a job to `requests` keyed by its fingerprint, as the SDK does."""
    key = fingerprint_of(job)
    send(prod, cat.name("requests"), job, key, headers)
    return key


class Reader:
    """Reads committed records of some topics from the beginning, accumulating them."""

    def __init__(self, bootstrap: str, topics: Iterable[str]) -> None:
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"reader-{uuid.uuid4().hex}",
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
            }
        )
        self.consumer.subscribe(list(topics))
        self.records: dict[str, list[dict[str, Any]]] = {}

    def poll_until(self, topic: str, count: int, timeout: float = 60) -> list[dict[str, Any]]:
        """Read until `topic` has at least `count` records; return them all."""
        deadline = time.monotonic() + timeout
        while len(self.records.get(topic, [])) < count and time.monotonic() < deadline:
            self.drain(0.5)
        return self.records.get(topic, [])

    def drain(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            msg = self.consumer.poll(0.1)
            if msg is None or msg.error():
                continue
            self.records.setdefault(msg.topic() or "", []).append(
                {
                    "key": msg.key(),
                    "value": _loads(msg.value()),
                    "headers": dict(msg.headers() or []),
                    "partition": msg.partition(),
                }
            )

    def settle(self, quiet: float = 3.0, timeout: float = 60) -> None:
        """Read until nothing new arrives for `quiet` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            before = sum(map(len, self.records.values()))
            self.drain(quiet)
            if sum(map(len, self.records.values())) == before:
                return

    def close(self) -> None:
        self.consumer.close()


def _loads(value: bytes | None) -> Any:
    try:
        return orjson.loads(value or b"null")
    except orjson.JSONDecodeError:
        return value


def end_offsets(bootstrap: str, topic: str, partitions: int) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex})
    total = 0
    for p in range(partitions):
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
        total += high
    consumer.close()
    return total


def written(bootstrap: str, topic: str, partitions: int, timeout: float = 60) -> int:
    """Every record of `topic` up to its end, aborted ones too (read_uncommitted): more
    than the committed ones once a transaction was aborted."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"written-{uuid.uuid4().hex}",
            "isolation.level": "read_uncommitted",
            "enable.auto.commit": False,
        }
    )
    try:
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)
        }
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        count, deadline = 0, time.monotonic() + timeout
        # A position moves past transaction markers too, so it reaches each end offset.
        while any(tp.offset < ends[tp.partition] for tp in consumer.position(
            [TopicPartition(topic, p) for p in range(partitions)]
        )):  # fmt: skip
            assert time.monotonic() < deadline, f"{topic} not read to its end in {timeout}s"
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                count += 1
        return count
    finally:
        consumer.close()


def status(port: int, path: str) -> tuple[int, bytes]:
    """A processor's status port (`--metrics-port`): the status and body of GET `path`;
    0 while nothing listens there (the processor is starting, or gone)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read()
    except urllib.error.URLError:
        return 0, b""


def owned_partitions(port: int) -> int:
    """How many input partitions the processor on that status port owns now (0 until ready)."""
    code, body = status(port, "/ready")
    return int(orjson.loads(body)["partitions"]) if code == 200 else 0


def decided(port: int) -> float:
    """How many requests the processor on that status port has decided."""
    code, body = status(port, "/metrics")
    assert code == 200, f"no metrics on port {port}"
    return sum(
        float(line.split()[-1])
        for line in body.decode().splitlines()
        if line.startswith("gateway_decisions_total{")
    )


class DuplicateLoad:
    """Thousands of requests, each key several times under reject, with a check of the outcome.

    `disturb(batch)` runs between batches: kill a processor, add one, stop a broker.
    """

    def __init__(self, bootstrap: str, cat: Catalogue, keys: int, copies: int) -> None:
        self.bootstrap, self.cat = bootstrap, cat
        tag = uuid.uuid4().hex[:8]
        self.jobs = [
            {"type": "load.job", "args": {"n": i, "tag": tag}, "unique": {"keys": ["type", "args"]}}
            for i in range(keys)
        ]
        self.sent: list[str] = []
        self.copies = copies

    def run(self, batch: int = 100, disturb: Any = None, pause: float = 0.1) -> None:
        prod = producer(self.bootstrap)
        order = [j for _ in range(self.copies) for j in self.jobs]
        for start in range(0, len(order), batch):
            for job in order[start : start + batch]:
                request_id = uuid.uuid4().hex
                send_request(prod, self.cat, job, request_id=request_id)
                self.sent.append(request_id)
            prod.flush()
            if disturb is not None:
                disturb(start // batch)
            time.sleep(pause)
        prod.flush()

    def check(self, timeout: float = 180) -> dict[str, int]:
        """Read committed outputs and assert the guarantees; return counts for the report."""
        decisions_topic, jobs_topic = self.cat.name("decisions"), self.cat.name("jobs")
        reader = Reader(self.bootstrap, [decisions_topic, jobs_topic])
        try:
            reader.poll_until(decisions_topic, len(self.sent), timeout)
            reader.settle(quiet=3)
            # The decisions: the trail's other audit records (ticks, events) left out.
            decisions = [r["value"] for r in reader.records.get(decisions_topic, [])
                         if "request_id" in r["value"]]  # fmt: skip
            jobs = [r["value"] for r in reader.records.get(jobs_topic, [])]
        finally:
            reader.close()
        per_request: dict[str, int] = {}
        for d in decisions:
            per_request[d["request_id"]] = per_request.get(d["request_id"], 0) + 1
        missing = [r for r in self.sent if r not in per_request]
        repeated = {r: n for r, n in per_request.items() if n != 1}
        assert not missing, f"{len(missing)} requests have no decision"
        assert not repeated, f"requests decided more than once: {list(repeated.items())[:5]}"
        assert set(per_request) == set(self.sent)

        keys = {fingerprint_of(j) for j in self.jobs}
        accepted: dict[str, int] = {}
        for d in decisions:
            if d["outcome"] == "accepted":
                accepted[d["unique_key"]] = accepted.get(d["unique_key"], 0) + 1
        twice = {k: n for k, n in accepted.items() if n != 1}
        shown = [
            (d["unique_key"][:8], d["source"], d["decided_at"], d["request_id"], d["job_id"])
            for d in decisions
            if d["outcome"] == "accepted" and d["unique_key"] in twice
        ][:6]
        assert set(accepted) == keys and not twice, (
            f"{len(keys - set(accepted))} keys never accepted, {len(set(accepted) - keys)} "
            f"unknown, accepted more than once: {shown}"
        )
        job_keys = [j["unique_key"] for j in jobs]
        assert len(job_keys) == len(keys) and set(job_keys) == keys, "extra or missing jobs"
        return {"requests": len(self.sent), "decisions": len(decisions), "jobs": len(jobs)}
