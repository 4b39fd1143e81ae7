"""The binding's shapes for real clients: content negotiation, the job as sent, batch
refusals, events and their SSE frames, heartbeat bodies, and the view's readiness."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from confluent_kafka import TopicPartition
from starlette.requests import Request

from gateway.catalogue import Catalogue, TopicSpec
from gateway.core.retry import iso_duration, ojs_retry
from gateway.http import plumbing
from gateway.http.answers import Answer, batch_item, for_result
from gateway.http.errors import ApiError
from gateway.http.events import matches, sse_frame
from gateway.http.responses import JSON_TYPE, MEDIA_TYPE, negotiate
from gateway.http.shared import shown
from gateway.sdk import EnqueueResult
from gateway.view.apply import Change
from gateway.view.events import derive
from gateway.view.follower import Follower
from gateway.view.store import JobView

KEY = "a" * 64
JOB_ID = "01900000-0000-7000-8000-000000000001"


@pytest.mark.parametrize(
    ("accept", "media_type"),
    [
        (None, MEDIA_TYPE),
        ("", MEDIA_TYPE),
        ("*/*", MEDIA_TYPE),
        ("application/openjobspec+json", MEDIA_TYPE),
        ("application/json", JSON_TYPE),
        ("application/json; charset=utf-8", JSON_TYPE),
        ("text/html, application/json;q=0.9", JSON_TYPE),
        ("application/json, application/openjobspec+json", MEDIA_TYPE),
        ("application/json;q=0", MEDIA_TYPE),
    ],
)
def test_the_answer_is_plain_json_only_for_a_caller_that_asks_for_it(
    accept: str | None, media_type: str
):
    assert negotiate(accept) == media_type


@pytest.mark.parametrize(
    ("user_agent", "version", "media_type"),
    [
        # The official OJS Python SDK: reads only bodies typed application/json.
        ("python-httpx/0.28.1", "1.0", JSON_TYPE),
        # Another httpx caller, and the OJS conformance suite's runner (Go), which checks
        # for the OJS type.
        ("python-httpx/0.28.1", None, MEDIA_TYPE),
        ("Go-http-client/1.1", None, MEDIA_TYPE),
        ("Go-http-client/1.1", "1.0", MEDIA_TYPE),
        ("curl/8.5.0", "1.0", MEDIA_TYPE),
        ("my-python-httpx/1", "1.0", MEDIA_TYPE),
        (None, "1.0", MEDIA_TYPE),
    ],
)
def test_the_official_python_sdk_gets_plain_json_whatever_it_accepts(
    user_agent: str | None, version: str | None, media_type: str
):
    assert negotiate("application/openjobspec+json", user_agent, version) == media_type


STORED_RETRY = {
    "max_attempts": 5, "initial_interval_ms": 1000, "backoff_coefficient": 2.0,
    "max_interval_ms": 300_000, "jitter": False, "backoff": "exponential",
    "non_retryable_errors": ["fatal"],
}  # fmt: skip


def test_get_shows_the_retry_object_as_ojs_defines_it():
    assert ojs_retry(STORED_RETRY) == {
        "max_attempts": 5, "initial_interval": "PT1S", "backoff_coefficient": 2.0,
        "max_interval": "PT5M", "jitter": False, "non_retryable_errors": ["fatal"],
    }  # fmt: skip
    sent = {"initial_interval_ms": 1000, "on_exhaustion": "dead_letter"}
    as_sent = ojs_retry(STORED_RETRY | {"backoff": "linear"}, sent)
    assert as_sent["initial_interval_ms"] == 1000 and "initial_interval" not in as_sent
    assert as_sent["max_interval"] == "PT5M"
    assert as_sent["backoff"] == "linear" and as_sent["on_exhaustion"] == "dead_letter"


def enqueued(job: dict[str, Any]) -> EnqueueResult:
    """The SDK's result for `job` as the core decides it (a new job, accepted)."""
    from gateway.core import Request, decide, parse_request
    from gateway.stage.records import Source, decision_record

    request = parse_request(job)
    assert isinstance(request, Request), request
    decision = decide((), request, 1_770_000_000_000, seed=b"0")
    source = Source("requests", 0, 0, 1_770_000_000_000, {})
    return EnqueueResult.from_record(decision_record(decision, source, "r", request.dialect))


@pytest.mark.parametrize(
    "retry",
    [
        None,
        {"max_attempts": 4, "initial_interval": "PT2S", "backoff_type": "linear"},
        {"initial_interval_ms": 1500, "max_interval_ms": 60_000, "backoff": "exponential"},
        {"initial_interval_ms": 0, "jitter": False, "on_exhaustion": "dead_letter"},
    ],
)
def test_one_retry_shape_on_every_surface(retry: dict[str, Any] | None):
    """POST, batch, the SDK and the CLI show a job's retry as GET and fetch do: the OJS
    retry object. The records keep the stored form (milliseconds, the strategy named)."""
    from gateway.core import stored_job
    from gateway.core.retry import RetryPolicy

    job = {"type": "email.send", "args": [1], "options": {"retry": retry} if retry else {}}
    result = enqueued(job)
    stored = result.record["job"]["retry"]
    assert set(stored) == set(RetryPolicy().to_dict())  # the record is as the core wrote it
    assert result.job is not None
    get = shown(stored_job(result.record["job"], None, 0))["retry"]  # GET and fetch
    assert get == ojs_retry(stored, retry)
    assert result.job["retry"] == get  # the SDK
    assert result.answer["job"]["retry"] == get  # the POST body
    post = for_result(result)
    assert isinstance(post, Answer) and post.body["job"]["retry"] == get
    assert shown(batch_item(result, "r.0"))["retry"] == get  # a batch item
    # Shown twice is shown once: a surface that shows a shown job changes nothing.
    assert ojs_retry(get, retry) == get
    if retry is None or "initial_interval_ms" not in retry:
        assert "initial_interval_ms" not in get and "initial_interval" in get
    else:
        assert get["initial_interval_ms"] == retry["initial_interval_ms"]


def test_the_cli_prints_the_decision_with_its_job_shown(monkeypatch, capsys):
    """`gateway enqueue` prints the decision record, its job shown as GET shows it."""
    import io
    import sys

    import gateway.sdk
    from gateway.cli import enqueue, main

    result = enqueued({"type": "email.send", "args": [1]})

    class FakeClient:
        def __init__(self, *_: Any, **__: Any) -> None: ...
        def __enter__(self) -> FakeClient:
            return self

        def __exit__(self, *_: Any) -> None: ...
        def enqueue(self, *_: Any, **__: Any) -> EnqueueResult:
            return result

    monkeypatch.setattr(gateway.sdk, "Client", FakeClient)
    monkeypatch.setattr(enqueue, "reachable_config", lambda _: {"bootstrap.servers": "x:1"})
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b'{"type": "t", "args": []}')))
    assert main(["enqueue"]) == 0
    printed = orjson.loads(capsys.readouterr().out)
    assert printed == {**result.record, "job": result.job}
    assert printed["job"]["retry"]["initial_interval"] == "PT1S"
    assert "initial_interval_ms" not in printed["job"]["retry"]
    assert "initial_interval_ms" in result.record["job"]["retry"]  # the record, as stored


@pytest.mark.parametrize(
    ("millis", "iso"),
    [(0, "PT0S"), (1000, "PT1S"), (1500, "PT1.5S"), (300_000, "PT5M"), (3_600_000, "PT1H"),
     (90_061_001, "P1DT1H1M1.001S"), (86_400_000, "P1D")],
)  # fmt: skip
def test_intervals_are_iso_8601_durations(millis: int, iso: str):
    assert iso_duration(millis) == iso


def a_record(**fields: Any) -> dict[str, Any]:
    return {
        "id": JOB_ID, "type": "email.send", "queue": "default", "state": "retryable",
        "attempt": 1, "max_attempts": 5, "args": [1], "route": KEY, "partition": 3,
        "unique_key": KEY, "retry": STORED_RETRY, **fields,
    }  # fmt: skip


def test_get_shows_what_was_sent_and_no_internal_fields():
    policy = {"keys": ["type", "args"], "on_conflict": "reject"}
    job = shown(a_record(options={"unique": policy}, error={"message": "b"}))
    assert "route" not in job and "partition" not in job
    assert job["unique"] == policy
    assert job["retry"]["initial_interval"] == "PT1S"
    assert job["errors"] == [{"message": "b"}]
    kept = [{"message": "a"}, {"message": "b"}]
    assert shown(a_record(unique=policy, errors=kept, error=kept[-1]))["errors"] == kept
    assert shown(a_record(state="available"))["errors"] == []


def test_a_refused_batch_item_carries_an_error_and_does_not_look_like_a_job():
    rejected = EnqueueResult.from_record(
        {
            "outcome": "rejected", "request_id": "r", "unique_key": KEY, "job_id": JOB_ID,
            "existing_job_id": JOB_ID, "existing_job_state": "active",
            "job": {"id": JOB_ID, "type": "t", "state": "active"},
            "error": {"code": "duplicate", "message": "a live job holds the key"},
        }
    )  # fmt: skip
    item = batch_item(rejected, "r.1")
    assert item["error"]["code"] == "duplicate" and item["status"] == 409
    assert item["existing_job_id"] == JOB_ID and item["existing_job_state"] == "active"
    assert not {"id", "type", "state"} & set(item)
    invalid = EnqueueResult.from_record(
        {
            "outcome": "invalid",
            "request_id": "r",
            "error": {"code": "invalid_request", "message": "x"},
        }
    )
    assert batch_item(invalid, "r.2") == {
        "error": {
            "code": "invalid_request", "message": "x", "retryable": False, "details": {},
            "request_id": "r.2",
        },
        "status": 400,
    }  # fmt: skip


def job(state: str, **fields: Any) -> dict[str, Any]:
    return {"id": JOB_ID, "type": "t.x", "queue": "q", "state": state, "attempt": 1, **fields}


def test_each_transition_becomes_the_ojs_events_it_amounts_to():
    def types(before: dict[str, Any] | None, after: dict[str, Any] | None) -> list[str]:
        return [e["type"] for e in derive((0, 7, before, after))]

    assert types(None, job("available", enqueued_at="2026-01-01T00:00:00Z")) == ["job.enqueued"]
    assert types(job("available"), job("active")) == ["job.started"]
    assert types(job("active"), job("completed")) == ["job.completed"]
    assert types(job("active"), job("retryable")) == ["job.failed", "job.retrying"]
    assert types(job("active"), job("discarded")) == ["job.failed", "job.discarded"]
    assert types(job("retryable"), job("discarded")) == ["job.discarded"]
    assert types(job("scheduled"), job("cancelled")) == ["job.cancelled"]
    assert types(job("discarded"), job("available")) == ["job.enqueued"]
    assert types(job("active", lease_expires_at="a"), job("active", lease_expires_at="b")) == [
        "job.heartbeat"
    ]
    assert types(job("active"), job("active")) == []
    assert types(job("discarded"), None) == []  # a tombstone: deleted, or past retention


def test_a_job_a_cron_enqueued_is_first_its_crons_trigger():
    meta = {"cron_name": "nightly", "cron_slot": "2026-01-01T03:00:00.000Z",
            "cron_triggered_at": "2026-01-01T03:00:00.250Z"}  # fmt: skip
    fired = job("available", meta=meta, enqueued_at="2026-01-01T03:00:00.400Z")
    triggered, enqueued = derive((0, 9, None, fired))
    assert (triggered["type"], enqueued["type"]) == ("cron.triggered", "job.enqueued")
    assert triggered["time"] == meta["cron_triggered_at"]
    assert triggered["data"] == {
        "job_id": JOB_ID, "job_type": "t.x", "queue": "q", "from": None, "to": "available",
        "attempt": 1, "cron_name": "nightly", "scheduled_time": meta["cron_slot"],
        "actual_time": meta["cron_triggered_at"],
    }  # fmt: skip
    assert [e["type"] for e in derive((0, 10, fired, job("active", meta=meta)))] == [
        "job.started"
    ]  # only its first record: the slot fired once


def test_an_event_is_the_ojs_envelope_with_the_transitions_own_time():
    before = job("active", started_at="2026-01-01T00:00:00Z")
    after = job(
        "completed", started_at="2026-01-01T00:00:00Z", completed_at="2026-01-01T00:00:01.5Z",
        result={"ok": True},
    )  # fmt: skip
    [event] = derive((2, 41, before, after))
    assert event["specversion"] == "1.0" and event["id"] == "evt_2-41-0"
    assert event["type"] == "job.completed" and event["subject"] == JOB_ID
    assert event["time"] == "2026-01-01T00:00:01.5Z"
    assert event["data"] == {
        "job_id": JOB_ID, "job_type": "t.x", "queue": "q", "from": "active", "to": "completed",
        "attempt": 1, "duration_ms": 1500, "result": {"ok": True},
    }  # fmt: skip


def test_sse_frames_carry_id_event_and_data():
    [event] = derive((0, 1, None, job("available")))
    frame = sse_frame("0:1.1,1:7", event)
    assert frame.startswith(b"id: 0:1.1,1:7\nevent: job.enqueued\ndata: {")
    assert frame.endswith(b"}\n\n")
    data_line = frame.split(b"\n")[2]
    assert orjson.loads(data_line.removeprefix(b"data: ")) == event


def test_events_are_filtered_by_type_and_queue():
    [started] = derive((0, 2, job("available"), job("active")))
    assert matches(started, frozenset({"job.started"}), frozenset({"q"}))
    assert matches(started, None, None)
    assert not matches(started, None, frozenset({"other"}))
    assert not matches(started, frozenset({"job.completed"}), None)


def test_the_view_indexes_states_and_counts_queues(tmp_path: Path):
    changes: list[Change] = []

    def seen(batch: list[Change], _: dict[int, int]) -> list[tuple[bytes, bytes | None]]:
        changes.extend(batch)
        return []

    view = JobView(tmp_path, also_write=seen)
    later = "2999-01-01T00:00:00Z"

    def rec(partition: int, offset: int, **fields: Any) -> tuple[int, int, bytes, bytes | None]:
        return (partition, offset, fields["id"].encode(), orjson.dumps(fields))

    records = [
        rec(0, 0, id="a", queue="q", state="available", created_at="T1"),
        rec(0, 1, id="b", queue="q", state="discarded", completed_at=later),
        rec(1, 0, id="c", queue="r", state="discarded", completed_at=later),
    ]
    view.apply(records, 0)
    assert [(before, after["state"]) for _, _, before, after in changes if after] == [
        (None, "available"), (None, "discarded"), (None, "discarded"),
    ]  # fmt: skip
    assert list(view.in_state("discarded")) == ["b", "c"]
    assert list(view.in_state("discarded", "r")) == ["c"]
    view.apply([(0, 2, b"a", orjson.dumps({"id": "a", "queue": "q", "state": "active"}))], 0)
    view.apply([(1, 1, b"c", None)], 0)
    assert list(view.in_state("discarded")) == ["b"]
    queues = view.queues()
    assert queues["q"] == {
        "created_at": "T1",
        "counts": {"available": 0, "active": 1, "discarded": 1},
    }
    assert queues["r"]["counts"] == {"discarded": 0}
    view.close()


class FakeConsumer:
    """Metadata that lists the topic's partitions only from the third ask on."""

    def __init__(self, topic: str, partitions: int, ends: dict[int, int]) -> None:
        self.topic, self.partitions, self.ends = topic, partitions, ends
        self.asked = 0
        self.assigned: list[TopicPartition] = []
        self.positions = {p: -1001 for p in range(partitions)}

    def list_topics(self, topic: str, timeout: float) -> Any:
        self.asked += 1
        listed = {} if self.asked < 2 else {0: None}
        if self.asked >= 3:
            listed = {p: None for p in range(self.partitions)}
        return SimpleNamespace(topics={topic: SimpleNamespace(error=None, partitions=listed)})

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float, cached: bool) -> Any:
        return 0, self.ends[tp.partition]

    def assign(self, partitions: list[TopicPartition]) -> None:
        self.assigned = partitions

    def consume(self, num_messages: int, timeout: float) -> list[Any]:
        time.sleep(timeout)
        return []

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        return [
            TopicPartition(tp.topic, tp.partition, self.positions[tp.partition])
            for tp in partitions
        ]

    def close(self) -> None:
        pass


def test_the_view_is_live_only_once_metadata_lists_every_partition_and_it_caught_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr("gateway.view.follower._METADATA_RETRY_S", 0.01)
    cat = Catalogue((TopicSpec("job_states", "ns.job_states", 3, 1),))
    fake = FakeConsumer("ns.job_states", 3, {0: 0, 1: 5, 2: 2})
    view = JobView(tmp_path)
    follower = Follower(view, cat, {}, consumer=fake)
    assert not follower.live.is_set() and follower.reason
    follower.start()
    try:
        wait_until(lambda: bool(fake.assigned))
        assert fake.asked == 3  # an empty list, then one partition of three: asked again
        assert [tp.partition for tp in fake.assigned] == [0, 1, 2]
        assert not follower.live.is_set()
        assert "2 partitions to go" in follower.reason  # partition 0 is empty: nothing to read
        fake.positions.update({1: 5, 2: 1})
        wait_until(lambda: "1 partitions to go" in follower.reason)
        assert not follower.live.is_set()
        fake.positions[2] = 2  # past the last transaction marker
        wait_until(follower.live.is_set)
        assert follower.reason == ""
    finally:
        follower.stop()
    view.close()


def wait_until(done: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "not in time"
        time.sleep(0.005)


# -- fetch never leaves a job active that it did not hand out --------------------------


class FakeView:
    def __init__(self, jobs: list[dict[str, Any]]) -> None:
        self.jobs = {j["id"]: j for j in jobs}
        self.answered: dict[str, dict[str, Any] | None] = {}

    def provisional(self, job_id: str, job: dict[str, Any] | None) -> None:
        self.answered[job_id] = job

    def waiting(self, queue: str, _tenants: Any = None) -> Any:
        return iter(
            [i for i, j in self.jobs.items() if (j["state"], j["queue"]) == ("available", queue)]
        )

    def get(self, job_id: str) -> dict[str, Any] | None:
        found = self.jobs.get(job_id)
        return None if found is None else dict(found)

    def controls(self, prefix: bytes) -> dict[str, dict[str, Any]]:
        return {}  # no queue paused, no cron


class FakeClient:
    """Claims of `a` are applied, of `b` time out (sent, no answer), of `c` are not sent."""

    def __init__(self, view: FakeView) -> None:
        self.view = view
        self.sent: list[tuple[dict[str, Any], bool]] = []

    async def publish_event(self, event: dict[str, Any], wait: bool = True, **_: Any) -> Any:
        from gateway.sdk import ClientError, EnqueueTimeout, EventAck

        self.sent.append((event, wait))
        if event["type"] != "job.started":
            return None
        if event["job_id"] == "b":
            raise EnqueueTimeout(1, 1, "replies", [None])
        if event["job_id"] == "c":
            raise ClientError("kafka", "Kafka is down")
        moved = {**self.view.jobs["a"], "state": "active", "attempt": 1, "route": "a"}
        self.view.jobs["a"] = moved
        return EventAck.from_record(
            {"outcome": "applied", "job_id": "a", "previous_state": "available",
             "state": "active", "job": moved}
        )  # fmt: skip


def post_request(body: dict[str, Any]) -> Any:
    from starlette.requests import Request

    data = orjson.dumps(body)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": data, "more_body": False}

    scope = {
        "type": "http", "method": "POST", "path": "/", "query_string": b"",
        "headers": [(b"content-type", b"application/json")],
    }  # fmt: skip
    return Request(scope, receive)


def fake_binding(ids: list[str]) -> Any:
    from gateway.http.binding import HttpSettings

    view = FakeView(
        [
            {
                "id": i,
                "type": "t",
                "queue": "q",
                "state": "available",
                "created_at": "2026-01-01T00:00:00Z",
            }
            for i in ids
        ]
    )
    return SimpleNamespace(settings=HttpSettings(), view=view, client=FakeClient(view), claims={})


def test_fetch_hands_out_what_it_claimed_and_requeues_a_claim_with_no_answer():
    import asyncio

    from gateway.http.answers import Answer
    from gateway.http.workers import fetch

    binding = fake_binding(["a", "b", "c"])
    body = {"queues": ["q"], "count": 3, "visibility_timeout_ms": 777}
    answer = asyncio.run(fetch(post_request(body), binding, "r"))
    assert isinstance(answer, Answer) and answer.status == 200
    assert [j["id"] for j in answer.body["jobs"]] == ["a"]
    assert answer.body["job"]["state"] == "active" and "route" not in answer.body["job"]
    # The job as the answer left it, in this process's view before its record is read.
    assert binding.view.answered == {"a": binding.view.jobs["a"]}
    claims = [e for e, _ in binding.client.sent if e["type"] == "job.started"]
    assert sorted(e["job_id"] for e in claims) == ["a", "b", "c"]
    assert all(e["visibility_timeout_ms"] == 777 for e in claims)
    events = [(e["job_id"], e["type"], wait) for e, wait in binding.client.sent]
    # The claim of b had no answer: a requeue follows it on its key, without waiting.
    assert events.index(("b", "job.enqueued", False)) > events.index(("b", "job.started", True))
    assert not any(t == "job.enqueued" and j != "b" for j, t, _ in events)


class PausingClient:
    """A processor that has read a pause of queue `paused` (the view has not): it refuses
    those claims as paused, and applies any other."""

    def __init__(self, view: FakeView) -> None:
        self.view = view
        self.sent: list[dict[str, Any]] = []

    async def publish_event(self, event: dict[str, Any], **_: Any) -> Any:
        from gateway.core.queues import paused_refusal
        from gateway.sdk import EventAck

        self.sent.append(event)
        job = self.view.jobs[event["job_id"]]
        if job["queue"] == "paused":
            refusal = paused_refusal(job["id"], "paused")
            return EventAck.from_record(
                {"outcome": "refused", "job_id": job["id"], "previous_state": "available",
                 "state": "available", "reason": "not_allowed", "job": job,
                 "error": {"code": refusal.code, "message": refusal.message}}
            )  # fmt: skip
        moved = {**job, "state": "active", "attempt": 1}
        return EventAck.from_record(
            {"outcome": "applied", "job_id": job["id"], "previous_state": "available",
             "state": "active", "job": moved}
        )  # fmt: skip


def test_fetch_asks_a_queue_no_more_once_a_claim_finds_it_paused_before_its_view_does():
    import asyncio

    from gateway.http.answers import Answer
    from gateway.http.binding import HttpSettings
    from gateway.http.workers import fetch

    view = FakeView(
        [
            {"id": job_id, "type": "t", "queue": queue, "state": "available",
             "created_at": "2026-01-01T00:00:00Z"}
            for job_id, queue in (("p1", "paused"), ("p2", "paused"), ("o1", "open"))
        ]
    )  # fmt: skip
    binding = SimpleNamespace(
        settings=HttpSettings(), view=view, client=PausingClient(view), claims={}
    )
    body = {"queues": ["paused", "open"], "count": 1}
    answer = asyncio.run(fetch(post_request(body), binding, "r"))
    assert isinstance(answer, Answer) and answer.status == 200
    assert [j["id"] for j in answer.body["jobs"]] == ["o1"]
    # One refused claim stops the queue: p2 is never asked, the next queue is.
    assert [e["job_id"] for e in binding.client.sent] == ["p1", "o1"]


def test_fetch_answers_an_error_only_when_it_claimed_nothing():
    import asyncio

    from gateway.http.errors import ApiError
    from gateway.http.workers import fetch

    binding = fake_binding(["c"])
    with pytest.raises(ApiError) as raised:
        asyncio.run(fetch(post_request({"queues": ["q"]}), binding, "r"))
    answer = raised.value
    assert answer.status == 503 and answer.retryable
    assert "visibility_timeout_ms" not in binding.client.sent[0][0]


def test_json_responses_answers_plain_json_whatever_the_caller_accepts():
    from types import SimpleNamespace

    from gateway.http.plumbing import media_type_of

    def request(json_responses: bool) -> Any:
        settings = SimpleNamespace(json_responses=json_responses)
        state = SimpleNamespace(binding=SimpleNamespace(settings=settings))
        return SimpleNamespace(app=SimpleNamespace(state=state), headers={"accept": MEDIA_TYPE})

    assert media_type_of(request(False)) == MEDIA_TYPE
    assert media_type_of(request(True)) == JSON_TYPE


class VirtualClock:
    """The binding's clock, moved on by the binding's own sleeps: a wait is counted in
    the time it asked for, never timed."""

    def __init__(self, start_s: float) -> None:
        self.start = self.now = start_s

    def read(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        import asyncio

        self.now += seconds
        await asyncio.sleep(0)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> VirtualClock:
    from gateway.http import binding

    virtual = VirtualClock(time.time_ns() // 1_000_000 / 1000)  # whole ms, as ids carry
    monkeypatch.setattr(binding, "time", SimpleNamespace(time=virtual.read, monotonic=virtual.read))
    monkeypatch.setattr(binding, "asyncio", SimpleNamespace(sleep=virtual.sleep))
    return virtual


def test_a_job_made_moments_ago_elsewhere_is_waited_for_an_old_one_is_not(clock: VirtualClock):
    import asyncio

    from gateway.core import uuid7
    from gateway.http.binding import RECENT_JOB_WAIT_S, Binding, HttpSettings

    class Arriving:
        """A view that gets the job after `after` reads."""

        def __init__(self, after: int) -> None:
            self.reads, self.after = 0, after

        def get(self, job_id: str) -> dict[str, Any] | None:
            self.reads += 1
            return {"id": job_id} if self.reads > self.after else None

    def binding(view: Arriving) -> Binding:
        return Binding(HttpSettings(), None, view, None, "requests")  # type: ignore[arg-type]

    now_ms = int(clock.now * 1000)
    recent = uuid7(now_ms, None, b"seed")
    view = Arriving(after=3)
    assert asyncio.run(binding(view).job(recent)) == {"id": recent}
    assert view.reads == 4
    # Made long ago, or no UUIDv7: not there is not there.
    old = uuid7(now_ms - 60_000, None, b"seed")
    for job_id in (old, "not-an-id"):
        view = Arriving(after=3)
        assert asyncio.run(binding(view).job(job_id)) is None and view.reads == 1
    # Made moments ago and never arriving: None once RECENT_JOB_WAIT_S from its making.
    never = Arriving(after=10**9)
    assert asyncio.run(binding(never).job(recent)) is None
    until = now_ms / 1000 + RECENT_JOB_WAIT_S
    assert until <= clock.now < until + 0.1, (until, clock.now)
    assert never.reads > 1


# -- every route waits for a live view, then answers 503 -----------------------------------


class Liveness:
    """A follower's `live` that is set once the virtual clock reaches `at` (never: None)."""

    def __init__(self, clock: VirtualClock, at: float | None) -> None:
        self.clock, self.at = clock, at

    def is_set(self) -> bool:
        return self.at is not None and self.clock.now >= self.at


def served_with_view(clock: VirtualClock, live_after_s: float | None, jobs: list[str]) -> Any:
    """The app, its view holding `jobs`, its follower live `live_after_s` from now."""
    from gateway.http.app import HttpSettings, create_app
    from gateway.http.binding import Binding

    app = create_app(HttpSettings(bootstrap="127.0.0.1:1", namespace="unit"))
    at = None if live_after_s is None else clock.now + live_after_s
    follower: Any = SimpleNamespace(live=Liveness(clock, at), reason="the job view is catching up")
    view: Any = FakeView([{"id": i, "type": "t", "queue": "q", "state": "available"} for i in jobs])
    absent: Any = None  # the routes under test read the view only: no client, no admin
    app.state.binding = Binding(HttpSettings(), absent, view, absent, "requests", follower=follower)
    return app


def call_app(app: Any, method: str, path: str, body: Any = None) -> Any:
    import asyncio

    import httpx

    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
            return await client.request(method, path, json=body)

    return asyncio.run(go())


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", f"/ojs/v1/jobs/{JOB_ID}", None),
        ("POST", "/ojs/v1/jobs", {"type": "t", "args": []}),
        ("POST", "/ojs/v1/workers/fetch", {"queues": ["q"]}),
        ("GET", "/ojs/v1/queues", None),
        ("GET", "/ojs/v1/admin/jobs", None),
    ],
)
def test_a_route_waits_up_to_10s_for_the_view_then_answers_503_unavailable(
    clock: VirtualClock, method: str, path: str, body: Any
):
    from gateway.http.binding import VIEW_LIVE_WAIT_S

    answer = call_app(served_with_view(clock, None, []), method, path, body)
    assert answer.status_code == 503, answer.text
    error = answer.json()["error"]
    assert error["code"] == "unavailable" and error["retryable"] is True
    assert error["message"] == "the job view is catching up"
    deadline = clock.start + VIEW_LIVE_WAIT_S
    assert deadline <= clock.now < deadline + 0.1, (deadline, clock.now)


def test_a_view_that_goes_live_within_the_wait_answers_the_request(clock: VirtualClock):
    answer = call_app(served_with_view(clock, 4.0, [JOB_ID]), "GET", f"/ojs/v1/jobs/{JOB_ID}")
    assert answer.status_code == 200, answer.text
    assert answer.json()["job"]["id"] == JOB_ID
    assert clock.start + 4.0 <= clock.now < clock.start + 4.1, (clock.start, clock.now)


def test_a_body_not_whole_in_time_is_408_and_one_that_is_is_read(
    monkeypatch: pytest.MonkeyPatch,
):
    monkeypatch.setattr(plumbing, "BODY_READ_S", 0.2)
    scope = {"type": "http", "method": "POST", "path": "/", "headers": []}

    async def slow() -> dict[str, Any]:
        await asyncio.sleep(0.15)  # a chunk now and then, never the last one
        return {"type": "http.request", "body": b"{", "more_body": True}

    async def whole() -> dict[str, Any]:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    with pytest.raises(ApiError) as refused:
        asyncio.run(plumbing.read_body(Request(scope, slow), 1_000_000))
    assert (refused.value.status, refused.value.code) == (408, "timeout")
    assert asyncio.run(plumbing.read_body(Request(scope, whole), 100)) == b"{}"
