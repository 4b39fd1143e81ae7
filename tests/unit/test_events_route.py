"""GET /ojs/v1/events without a broker: what it refuses, and a reader slower than the window."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from starlette.applications import Starlette
from starlette.routing import Route

from gateway.http import events_route
from gateway.http.access import INSPECT_ALL
from gateway.http.binding import Binding, HttpSettings
from gateway.http.plumbing import endpoint
from gateway.view.event_feed import EventFeed
from gateway.view.store import JobView


def job(job_id: str, state: str = "available") -> dict[str, Any]:
    return {"id": job_id, "type": "t", "queue": "q", "state": state, "attempt": 1}


def stage(feed: EventFeed, partition: int, offsets: range) -> None:
    for offset in offsets:
        feed.stage(
            [(partition, offset, None, job(f"j{partition}-{offset}"))], {partition: offset + 1}
        )


class Served:
    """The events route alone, over a feed of five events (three on partition 0, two on 1)."""

    def __init__(self, app: Starlette) -> None:
        self.app = app

    def get(self, url: str, params: dict[str, Any] | None = None) -> httpx.Response:
        async def call() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
                return await client.get(url, params=params)

        return asyncio.run(call())


@pytest.fixture
def served(tmp_path: Path) -> Any:
    feed = EventFeed()
    stage(feed, 0, range(3))
    stage(feed, 1, range(2))
    view = JobView(tmp_path)
    binding = Binding(HttpSettings(), None, view, None, "requests", None, feed)  # type: ignore[arg-type]
    app = Starlette(
        routes=[
            Route(
                "/ojs/v1/events",
                endpoint(events_route.events, INSPECT_ALL, query=events_route.PARAMETERS),
            )
        ]
    )
    app.state.binding = binding
    yield Served(app)
    view.close()


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("?since=3", "'since'"),
        ("?after=0:0&cursor=1&zz=2", "'cursor', 'zz'"),
        ("?%E2%9C%93=1", "'✓'"),
        ("?Types=job.started", "'Types'"),
    ],
)
def test_unknown_query_parameters_are_refused_by_name(served: Served, query: str, named: str):
    answer = served.get("/ojs/v1/events" + query)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["code"] == "invalid_request" and named in error["message"]
    assert "after, limit" in error["message"]  # and what the route takes


def test_a_parameter_given_twice_is_refused(served: Served):
    answer = served.get("/ojs/v1/events?after=0:1&after=0:2")
    assert (
        answer.status_code == 400
        and "'after' is given more than once" in answer.json()["error"]["message"]
    )


@pytest.mark.parametrize(
    "after",
    ["-1", "42", "abc", "true", "1.5", "0:-1", "0:1.-1", "-0:1", "0:٣", "0:1 ", "0:1,0:2",
     "0:" + "9" * 19, "0:0," * 1100, "null", "[0]", "0:1\x00"],
)  # fmt: skip
def test_a_malformed_after_is_a_400_naming_it(served: Served, after: str):
    answer = served.get("/ojs/v1/events", params={"after": after})
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["message"].startswith("after ")


@pytest.mark.parametrize("limit", ["0", "-5", "1001", "١٠", "1_0", " 5", "9" * 5000, "x"])
def test_a_malformed_limit_is_a_400_naming_it(served: Served, limit: str):
    answer = served.get("/ojs/v1/events", params={"limit": limit})
    assert answer.status_code == 400, answer.text
    assert "limit must be an integer from 1 to 1000" in answer.json()["error"]["message"]


def test_json_pages_through_with_last_id(served: Served):
    first = served.get("/ojs/v1/events", params={"after": "0:0", "limit": 2}).json()
    assert [e["id"] for e in first["events"]] == ["evt_0-0-0", "evt_0-1-0"]
    assert first["last_id"] == "0:1.1,1:0" and first["missed"] is False
    rest = served.get("/ojs/v1/events", params={"after": first["last_id"]}).json()
    assert [e["id"] for e in rest["events"]] == ["evt_0-2-0", "evt_1-0-0", "evt_1-1-0"]
    assert rest["last_id"] == "0:3,1:2"  # past everything read
    assert served.get("/ojs/v1/events", params={"after": rest["last_id"]}).json()["events"] == []
    latest = served.get("/ojs/v1/events", params={"limit": 1}).json()
    assert [e["id"] for e in latest["events"]] == ["evt_1-1-0"] and latest["last_id"] == "0:3,1:2"


class Connected:
    """A request whose client never goes away."""

    async def is_disconnected(self) -> bool:
        return False


def frames(chunks: list[bytes]) -> list[dict[str, str]]:
    found = []
    for block in b"".join(chunks).decode().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "data" in fields:
            found.append(fields)
    return found


def test_a_reader_slower_than_the_window_is_told_what_it_missed(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(events_route, "POLL_S", 0)
    feed = EventFeed(size=2)
    stage(feed, 0, range(2))
    binding = Binding(HttpSettings(), None, None, None, "requests", None, feed)  # type: ignore[arg-type]
    stream = events_route._stream(Connected(), binding, {}, None, lambda _: True)  # type: ignore[arg-type]

    async def read() -> tuple[list[bytes], list[bytes]]:
        early = [await anext(stream), await anext(stream)]  # the preamble, both events
        stage(feed, 0, range(2, 300))  # while the reader reads nothing: most are evicted
        late = [await anext(stream), await anext(stream)]  # the notice, then what is kept
        await stream.aclose()
        return early, late

    early, late = asyncio.run(read())
    assert [f["id"] for f in frames(early)] == ["0:0.1", "0:1.1"]
    notice, *kept = frames(late)
    assert notice["event"] == "events.missed"
    body = orjson.loads(notice["data"])
    assert "older than what is kept on partition 0" in body["message"]
    oldest = feed.kept()[0][0]
    assert body["resumes_from"] == notice["id"] == f"0:{oldest.offset - 1}.1"
    assert [orjson.loads(f["data"])["id"] for f in kept] == [k.event["id"] for k in feed.kept()[0]]


def test_after_a_gap_every_id_stands_past_what_was_missed(monkeypatch: pytest.MonkeyPatch):
    """Partition 0's unsent event was dropped and none of its events is kept: the ids
    that follow still stand past it, so a reconnect is not told again."""
    monkeypatch.setattr(events_route, "POLL_S", 0)
    feed = EventFeed(size=2)
    stage(feed, 0, range(2))
    binding = Binding(HttpSettings(), None, None, None, "requests", None, feed)  # type: ignore[arg-type]
    stream = events_route._stream(Connected(), binding, {}, None, lambda _: True)  # type: ignore[arg-type]

    async def read() -> list[bytes]:
        await anext(stream), await anext(stream)  # the preamble, both events
        stage(feed, 0, range(2, 3))
        stage(feed, 1, range(300))
        late = [await anext(stream), await anext(stream)]
        await stream.aclose()
        return late

    notice, *kept = frames(asyncio.run(read()))
    assert notice["event"] == "events.missed" and kept
    assert all(f["id"].startswith("0:2.1,1:") for f in kept)
