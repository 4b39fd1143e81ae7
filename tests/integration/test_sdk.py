"""The SDK against a real broker and a real `gateway process`: decisions by request-reply."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson
import pytest

from gateway import AsyncClient, Client
from gateway.catalogue import Catalogue
from gateway.core import Outcome
from gateway.sdk import (
    ClientError,
    EnqueueResult,
    EnqueueTimeout,
    EventAck,
    InvalidEvent,
    InvalidJob,
    Sent,
)
from tests.integration.cli import gateway
from tests.integration.harness import Processor, Reader, apply_topics, end_offsets, fingerprint_of

pytestmark = pytest.mark.kafka


@dataclass
class Stack:
    bootstrap: str
    namespace: str
    cat: Catalogue
    client: Client


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """One processor and one client for the module; every test uses keys of its own."""
    namespace = f"t{uuid.uuid4().hex[:10]}"
    cat = apply_topics(kafka_bootstrap, namespace)
    # Short transactions: a decision becomes visible at the commit, and the
    # threaded test makes 200 calls in a row per thread.
    proc = Processor(
        kafka_bootstrap, namespace, tmp_path_factory.mktemp("sdk"), "1", "--commit-interval", "0.02"
    ).start()
    client = Client(kafka_bootstrap, namespace)
    try:
        # The processor takes its partitions a few seconds after it says it is ready.
        client.enqueue({"type": "warm.up", "args": []}, wait=True, timeout=60)
        yield Stack(kafka_bootstrap, namespace, cat, client)
    finally:
        client.close()
        proc.stop()


def job(on_conflict: str = "reject", **args: Any) -> dict[str, Any]:
    """A job under `on_conflict`; its key is fresh unless `args` are given."""
    return {
        "type": "email.send",
        "args": args or {"user_id": uuid.uuid4().hex},
        "unique": {"keys": ["type", "args"], "on_conflict": on_conflict},
    }


def test_reject_accepts_then_rejects_naming_the_existing_job(stack: Stack):
    first = job()
    accepted = stack.client.enqueue(first, wait=True)
    rejected = stack.client.enqueue(first, wait=True)
    assert accepted.outcome is Outcome.ACCEPTED and accepted.error is None
    assert accepted.unique_key == fingerprint_of(first)
    assert accepted.job is not None and accepted.job["id"] == accepted.job_id
    assert rejected.outcome is Outcome.REJECTED
    assert (
        rejected.existing_job_id == accepted.job_id and rejected.existing_job_state == "available"
    )
    assert rejected.error is not None and rejected.error.code == "duplicate"
    assert rejected.request_id != accepted.request_id
    assert rejected.record["source"]["topic"] == stack.cat.name("requests")


def test_ignore_returns_the_existing_job(stack: Stack):
    first = job("ignore")
    accepted = stack.client.enqueue(first, wait=True)
    ignored = stack.client.enqueue(first, wait=True)
    assert ignored.outcome is Outcome.IGNORED and ignored.error is None
    assert ignored.job_id == accepted.job_id == ignored.existing_job_id


def test_an_invalid_job_raises_before_anything_is_sent(stack: Stack):
    requests = stack.cat.by_role("requests")
    before = end_offsets(stack.bootstrap, requests.name, requests.partitions)
    with pytest.raises(InvalidJob) as caught:
        stack.client.enqueue({"type": "t", "args": [], "unique": {"keys": ["meta"]}}, wait=True)
    assert caught.value.code == "invalid_request"
    stack.client.enqueue(job())  # flushed: anything sent before it is on the log too
    assert end_offsets(stack.bootstrap, requests.name, requests.partitions) == before + 1


def test_without_wait_the_request_is_keyed_by_its_fingerprint_with_its_headers(stack: Stack):
    keyed = job()
    unkeyed: dict[str, Any] = {"type": "report.build", "args": [], "request_id": uuid.uuid4().hex}
    sent = [stack.client.enqueue(keyed), stack.client.enqueue(unkeyed)]
    assert sent[0] == Sent(sent[0].request_id, fingerprint_of(keyed))
    assert sent[1] == Sent(unkeyed["request_id"], None)
    ours = _requests_by_id(stack, {s.request_id for s in sent})
    assert ours[sent[0].request_id]["key"] == fingerprint_of(keyed).encode()
    # A job without a policy is given an id and keyed by it (its route).
    assert ours[sent[1].request_id]["key"] == ours[sent[1].request_id]["value"]["id"].encode()
    assert "reply_to" not in ours[sent[0].request_id]["headers"]


def test_enqueue_many_ten_thousand_with_duplicates_answers_each_in_order(stack: Stack):
    tag = uuid.uuid4().hex
    unique = [job(tag=tag, n=i) for i in range(7000)]
    jobs: list[Any] = unique + unique[:3000]
    jobs[5000:5000] = [{"type": "t", "args": [], "unique": {"keys": ["meta"]}}]  # one invalid
    answers = stack.client.enqueue_many(jobs, wait=True, timeout=120)
    assert len(answers) == len(jobs)
    assert isinstance(answers[5000], InvalidJob)
    decided = [(j, a) for j, a in zip(jobs, answers, strict=True) if j is not jobs[5000]]
    assert all(isinstance(a, EnqueueResult) for _, a in decided)
    results = [(j, a) for j, a in decided if isinstance(a, EnqueueResult)]
    assert all(a.unique_key == fingerprint_of(j) for j, a in results)
    assert len({a.request_id for _, a in results}) == 10_000
    accepted = Counter(a.unique_key for _, a in results if a.outcome is Outcome.ACCEPTED)
    assert len(accepted) == 7000 and set(accepted.values()) == {1}
    assert Counter(a.outcome for _, a in results) == {
        Outcome.ACCEPTED: 7000,
        Outcome.REJECTED: 3000,
    }


def test_threads_each_get_their_own_decisions(stack: Stack):
    """8 threads x 200 calls over 200 shared keys: each key accepted once, 7 times rejected."""
    tag = uuid.uuid4().hex
    results: dict[str, EnqueueResult] = {}
    errors: list[BaseException] = []

    def worker(thread: int) -> None:
        try:
            for n in range(200):
                request_id = f"{thread}-{n}-{uuid.uuid4().hex}"
                result = stack.client.enqueue(
                    {**job(tag=tag, n=n), "request_id": request_id}, wait=True
                )
                results[request_id] = result
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    assert len(results) == 1600
    assert all(r.request_id == request_id for request_id, r in results.items())
    accepted = Counter(r.unique_key for r in results.values() if r.outcome is Outcome.ACCEPTED)
    assert len(accepted) == 200 and set(accepted.values()) == {1}
    rejected = [r for r in results.values() if r.outcome is Outcome.REJECTED]
    assert len(rejected) == 1400
    job_ids = {r.unique_key: r.job_id for r in results.values() if r.outcome is Outcome.ACCEPTED}
    assert all(r.existing_job_id == job_ids[r.unique_key] for r in rejected)


def test_async_client_gathers_hundreds_of_enqueues(stack: Stack):
    tag = uuid.uuid4().hex
    jobs = [{**job(tag=tag, n=i % 150), "request_id": uuid.uuid4().hex} for i in range(300)]

    async def main() -> tuple[list[EnqueueResult], Sent]:
        async with AsyncClient(stack.bootstrap, stack.namespace) as client:
            results = await asyncio.gather(*(client.enqueue(j, wait=True) for j in jobs))
            sent = await client.enqueue(job())
            return list(results), sent

    results, sent = asyncio.run(main())
    assert [r.request_id for r in results] == [j["request_id"] for j in jobs]
    accepted = Counter(r.unique_key for r in results if r.outcome is Outcome.ACCEPTED)
    assert len(accepted) == 150 and set(accepted.values()) == {1}
    assert Counter(r.outcome for r in results)[Outcome.REJECTED] == 150
    assert isinstance(sent, Sent) and len(sent.request_id) == 32


def test_the_cli_prints_the_decision_and_exits_by_outcome(stack: Stack):
    where = ("--bootstrap", stack.bootstrap, "--namespace", stack.namespace)
    args = orjson.dumps({"user_id": uuid.uuid4().hex}).decode()
    flags = ("--type", "email.send", "--args", args, "--unique", '{"keys": ["type", "args"]}')
    first = gateway("enqueue", *where, *flags, timeout=60)
    assert first.returncode == 0, first.stderr
    accepted = orjson.loads(first.stdout)
    assert accepted["outcome"] == "accepted" and accepted["job_id"]

    as_stdin = {
        "type": "email.send",
        "args": orjson.loads(args),
        "unique": {"keys": ["type", "args"]},
    }
    second = gateway("enqueue", *where, input=orjson.dumps(as_stdin).decode(), timeout=60)
    rejected = orjson.loads(second.stdout)
    assert second.returncode == 1 and rejected["outcome"] == "rejected"
    assert rejected["existing_job_id"] == accepted["job_id"]

    no_wait = gateway("enqueue", *where, "--no-wait", "--type", "t", timeout=60)
    assert no_wait.returncode == 0 and orjson.loads(no_wait.stdout)["unique_key"] is None

    invalid = gateway("enqueue", *where, "--type", "t", "--unique", '{"keys": ["meta"]}')
    assert invalid.returncode == 2 and invalid.stdout == ""
    assert invalid.stderr.startswith("invalid_request: unique.meta_keys is required")


def test_a_published_event_counts_for_the_very_next_decision(stack: Stack):
    first = job()
    accepted = stack.client.enqueue(first, wait=True)
    key, job_id = accepted.unique_key, accepted.job_id
    refused = stack.client.publish_event(
        {"job_id": job_id, "unique_key": key, "type": "job.completed"}
    )
    assert isinstance(refused, EventAck) and str(refused.outcome) == "refused"
    assert refused.error is not None and refused.error.code == "invalid_request"
    stack.client.publish_event({"job_id": job_id, "unique_key": key, "type": "job.started"})
    ack = stack.client.publish_event({"job_id": job_id, "unique_key": key, "type": "job.completed"})
    assert isinstance(ack, EventAck)
    assert (str(ack.outcome), ack.previous_state, ack.state) == ("applied", "active", "completed")
    assert ack.record["job"]["completed_at"] and ack.record["job"]["attempt"] == 1
    assert stack.client.enqueue(first, wait=True).outcome is Outcome.ACCEPTED  # no retry needed

    unknown = stack.client.publish_event(
        {"job_id": str(uuid.uuid4()), "unique_key": key, "state": "completed"}
    )
    assert isinstance(unknown, EventAck)
    assert (str(unknown.outcome), unknown.reason) == ("ignored", "unknown_job")
    with pytest.raises(InvalidEvent) as caught:
        stack.client.publish_event({"job_id": job_id, "unique_key": "not-a-key", "type": "x"})
    assert caught.value.code == "invalid_event"


def test_no_processor_means_a_timeout_naming_the_missing_replies(kafka_bootstrap, namespace):
    apply_topics(kafka_bootstrap, namespace)
    with Client(kafka_bootstrap, namespace) as client, pytest.raises(EnqueueTimeout) as caught:
        client.enqueue_many([job(), job(), {"args": []}], wait=True, timeout=3)
    error = caught.value
    assert error.code == "timeout" and error.message == "2 of 3 replies missing"
    assert error.results[:2] == [None, None] and isinstance(error.results[2], InvalidJob)


def test_missing_topics_are_named(kafka_bootstrap):
    client = Client(kafka_bootstrap, f"absent{uuid.uuid4().hex[:8]}")
    with client, pytest.raises(ClientError) as caught:
        client.enqueue(job(), timeout=10)
    assert caught.value.code == "unknown_topic"
    assert "gateway topics apply" in str(caught.value)


def _requests_by_id(stack: Stack, request_ids: set[str]) -> dict[str, dict[str, Any]]:
    """The records on `requests` carrying these request_id headers."""
    topic = stack.cat.name("requests")
    reader = Reader(stack.bootstrap, [topic])
    try:
        for _ in range(60):
            found = {
                r["headers"]["request_id"].decode(): r
                for r in reader.records.get(topic, [])
                if r["headers"].get("request_id", b"").decode() in request_ids
            }
            if len(found) == len(request_ids):
                return found
            reader.drain(0.5)
    finally:
        reader.close()
    raise AssertionError(f"only {sorted(found)} of {sorted(request_ids)} found on {topic}")


def test_one_client_id_under_two_keys_is_one_job_however_they_race(stack: Stack):
    """200 ids, each sent twice at once under two different unique keys, from two clients:
    the ids' homes let exactly one of each pair become a job."""
    ids = [str(uuid.UUID(int=(0x019B << 112) | (7 << 76) | (2 << 62) | i)) for i in range(200)]
    tag = uuid.uuid4().hex

    def jobs(side: str) -> list[dict[str, Any]]:
        return [
            {"type": "race.job", "args": [side, tag, i], "id": job_id,
             "unique": {"keys": ["type", "args"]}}
            for i, job_id in enumerate(ids)
        ]  # fmt: skip

    other = Client(stack.bootstrap, stack.namespace)
    results: dict[str, list[Any]] = {}
    try:
        threads = [
            threading.Thread(target=lambda c=client, s=side: results.__setitem__(
                s, c.enqueue_many(jobs(s), wait=True, timeout=120)))
            for client, side in ((stack.client, "a"), (other, "b"))
        ]  # fmt: skip
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        other.close()
    for i, job_id in enumerate(ids):
        pair = [results["a"][i], results["b"][i]]
        outcomes = sorted(str(r.outcome) for r in pair)
        assert outcomes == ["accepted", "rejected"], (job_id, pair)
        refused = next(r for r in pair if r.outcome is Outcome.REJECTED)
        assert refused.error is not None and refused.error.code == "duplicate"


def test_an_idempotency_key_answers_every_client_with_the_first_record(stack: Stack):
    """Two clients (sync and asyncio), one key: the same record, one job; another job under
    the key is decided invalid, idempotency_key_reused; a batch likewise, as a whole."""
    tag = uuid.uuid4().hex
    job = {"type": "sdk.idem", "args": [tag]}  # no key, no id: given one at the key's home
    batch = [{"type": "sdk.idem", "args": [tag, n]} for n in range(3)]
    first = stack.client.enqueue(job, wait=True, idempotency_key=f"{tag}-one")
    many = stack.client.enqueue_many(batch, wait=True, idempotency_key=f"{tag}-many")
    assert all(isinstance(r, EnqueueResult) for r in many)

    async def again() -> tuple[Any, list[Any]]:
        async with AsyncClient(stack.bootstrap, stack.namespace) as other:
            one = await other.enqueue(job, wait=True, timeout=60, idempotency_key=f"{tag}-one")
            more = await other.enqueue_many(batch, True, 60, idempotency_key=f"{tag}-many")
            return one, more

    one, more = asyncio.run(again())
    assert first.outcome is Outcome.ACCEPTED and one.record == first.record
    assert [r.record for r in more] == [r.record for r in many if isinstance(r, EnqueueResult)]
    assert len({r.job_id for r in many if isinstance(r, EnqueueResult)}) == 3
    refused = stack.client.enqueue({**job, "args": [tag, "x"]}, wait=True,
                                   idempotency_key=f"{tag}-one")  # fmt: skip
    assert refused.outcome is Outcome.INVALID and refused.error is not None
    assert refused.error.code == "idempotency_key_reused" and f"{tag}-one" in refused.error.message
    fewer = stack.client.enqueue_many(batch[:2], wait=True, idempotency_key=f"{tag}-many")
    assert {r.error.code for r in fewer if isinstance(r, EnqueueResult) and r.error} == {
        "idempotency_key_reused"
    }
    assert len(fewer) == 2
