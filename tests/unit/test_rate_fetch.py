"""Fetch over rate limits, through the real stages: the HTTP fetch handler asks a client
that sends each event as the SDK prepares it onto in-memory logs, run by the router and
the dedup stage (a rate key's home, the jobs' routes), and a view that reads what they
publish on `job_states`. The conformance suite's L4-RL-001, with the view in step and with
a view that has not read the first start yet."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from gateway import wire
from gateway.core import GatewayError
from gateway.http import workers
from gateway.http.answers import Answer
from gateway.http.binding import HttpSettings
from gateway.http.workers import fetch
from gateway.partitioner import partition_for
from gateway.sdk import EventAck
from gateway.sdk.prepare import prepare_event
from gateway.stage.records import Output
from gateway.view.store import JobView
from tests.unit.test_http_edge import post_request
from tests.unit.test_ids import PARTITIONS
from tests.unit.test_rate_stories import Story


class Wired:
    """The SDK's publish_event, onto the story's logs; the view reads job_states when
    `sync`."""

    def __init__(self, story: Story, view: JobView) -> None:
        self.story, self.view = story, view
        self.read = 0
        self.asked = 0
        self.following = True

    def sync(self) -> None:
        published = [o for o in self.story.sent if o.role == "job_states"][self.read :]
        records = [(0, self.read + i, o.key or b"", o.value) for i, o in enumerate(published)]
        self.read += len(published)
        self.view.apply(records, self.story.clock)

    async def publish_event(self, event: dict[str, Any], **_: Any) -> Any:
        out = prepare_event(event)
        assert not isinstance(out, GatewayError)
        self.asked += 1
        correlation = f"fetch-{self.asked}"
        headers = [*out.headers, (wire.REPLY_TO_HEADER, b"replies"),
                   (wire.CORRELATION_ID_HEADER, correlation.encode())]  # fmt: skip
        where = ("requests", partition_for(out.key or b"", PARTITIONS))
        self.story.logs.setdefault(where, deque()).append(
            Output(out.value, out.key, headers=headers)
        )
        self.story.run()
        if self.following:
            self.sync()
        return EventAck.from_record(self.story.answer(correlation))


def l4_setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Story, Wired]:
    story = Story()
    story.clock = time.time_ns() // 1_000_000
    monkeypatch.setattr(workers, "now_ms", lambda: story.clock)
    for task in ("first", "second", "third"):
        story.send({"type": f"ratelimit.test.job_{task}", "args": [{"task": task}],
                    "options": {"queue": "rate-limit-test",
                                "rate_limit": {"max_per_second": 1}}})  # fmt: skip
    story.run()
    view = JobView(tmp_path / "view")
    client = Wired(story, view)
    client.sync()
    binding = SimpleNamespace(settings=HttpSettings(), view=view, client=client, claims={})
    return binding, story, client


def fetched(binding: Any, worker: str) -> list[dict[str, Any]]:
    body = {"queues": ["rate-limit-test"], "worker_id": worker}
    answer = asyncio.run(fetch(post_request(body), binding, "r"))
    assert isinstance(answer, Answer) and answer.status == 200, answer
    jobs: list[dict[str, Any]] = answer.body["jobs"]
    return jobs


@pytest.mark.parametrize("view_follows", [True, False])
def test_l4_rl_001_one_job_a_second_from_a_queue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, view_follows: bool
) -> None:
    binding, story, client = l4_setup(tmp_path, monkeypatch)
    client.following = view_follows
    [first] = fetched(binding, "worker-rl-1")
    assert first["state"] == "active"
    # At once: no job (the home refuses a view that has not read the first start yet).
    assert fetched(binding, "worker-rl-2") == []
    asked = client.asked
    assert fetched(binding, "worker-rl-2") == []
    if view_follows:
        assert client.asked == asked  # the view shows no permit: nothing is even asked
    story.clock += 1500
    [third] = fetched(binding, "worker-rl-3")
    assert third["state"] == "active" and third["id"] != first["id"]
    binding.view.close()


def test_the_rate_limit_routes_show_a_key_from_the_view(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from starlette.requests import Request

    from gateway.http import rate_limits

    def get_request(path_params: dict[str, str] | None = None) -> Request:
        return Request({"type": "http", "method": "GET", "path": "/", "query_string": b"",
                        "headers": [], "path_params": path_params or {}})  # fmt: skip

    binding, _, _ = l4_setup(tmp_path, monkeypatch)
    fetched(binding, "w")
    key = "queue:rate-limit-test"
    answer = asyncio.run(rate_limits.get(get_request(path_params={"key": key}), binding, "r"))
    assert answer.status == 200 and answer.body["key"] == key
    assert answer.body["rate"]["current_count"] == 1 and answer.body["active"] == 1
    assert answer.body["waiting"] == answer.body["waiting_count"] == 2
    never = asyncio.run(rate_limits.get(get_request(path_params={"key": "never"}), binding, "r"))
    assert never.body == {**never.body, "key": "never", "active": 0, "policy": None}
    listed = asyncio.run(rate_limits.keys(get_request(), binding, "r"))
    assert [i["key"] for i in listed.body["items"]] == [key]
    binding.view.close()
