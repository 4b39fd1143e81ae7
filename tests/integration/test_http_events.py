"""GET /ojs/v1/events against a real broker and processor: a reader resumes exactly where
it stopped, on another serve process, after a restart, after a worker is killed."""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import orjson
import pytest

from gateway.http import events_route
from gateway.http.binding import HttpSettings
from gateway.view import event_feed
from gateway.view.event_cursor import parse
from tests.integration.test_http import Served, running
from tests.integration.test_serve_workers import _children, _wait_health
from tests.support import free_port_block

pytestmark = pytest.mark.kafka

EVENT_STREAM = {"Accept": "text/event-stream"}


@dataclass
class Env:
    bootstrap: str
    namespace: str
    settings: HttpSettings
    http: httpx.Client  # serve process A


@pytest.fixture(scope="module")
def env(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    workdir = tmp_path_factory.mktemp("events")
    with running(kafka_bootstrap, workdir) as (namespace, _, settings, _, http):
        yield Env(kafka_bootstrap, namespace, settings, http)


def a_queue() -> str:
    return f"q{uuid.uuid4().hex[:12]}"


def enqueue(http: httpx.Client, queue: str, count: int) -> list[str]:
    """`count` new jobs on `queue` (one job.enqueued event each); their ids."""
    jobs = [{"type": "ev.work", "args": [uuid.uuid4().hex], "queue": queue} for _ in range(count)]
    created = http.post("/ojs/v1/jobs/batch", json={"jobs": jobs})
    assert created.status_code == 201, created.text
    return [item["id"] for item in created.json()["jobs"]]


def now(http: httpx.Client) -> str:
    """A cursor past every event the process has."""
    answer = http.get("/ojs/v1/events", params={"limit": 1})
    assert answer.status_code == 200, answer.text
    return str(answer.json()["last_id"])


class Stream:
    """A server-sent event stream, read frame by frame. Its read timeout is a bound on
    what never happened, not a measure."""

    def __init__(self, base: str, queue: str, last_id: str | None = None, **params: str):
        headers = dict(EVENT_STREAM) | ({"Last-Event-ID": last_id} if last_id else {})
        self.client = httpx.Client(base_url=base, timeout=60)
        request = self.client.build_request(
            "GET", "/ojs/v1/events", params={"queues": queue, **params}, headers=headers
        )
        self.response = self.client.send(request, stream=True)
        assert self.response.status_code == 200, self.response.read()
        self.lines = self.response.iter_lines()
        assert self.frame() == {"retry": "3000"}  # from here on, where it starts is fixed

    def frame(self) -> dict[str, str]:
        fields: dict[str, str] = {}
        for line in self.lines:
            if not line:
                if fields:
                    return fields
                continue
            name, _, value = line.partition(":")
            fields[name or "comment"] = value.removeprefix(" ")
        raise EOFError("the stream ended")

    def until(self, done: Callable[[list[dict[str, str]]], bool]) -> list[dict[str, str]]:
        frames: list[dict[str, str]] = []
        while not done(frames):
            frames.append(self.frame())
        return frames

    def local_port(self) -> int:
        sock = self.response.extensions["network_stream"].get_extra_info("socket")
        return int(sock.getsockname()[1])

    def close(self) -> None:
        self.response.close()
        self.client.close()


def jobs_of(frames: list[dict[str, str]]) -> list[str]:
    return [orjson.loads(f["data"])["subject"] for f in frames if f.get("event") == "job.enqueued"]


def covering(expected: set[str]) -> Callable[[list[dict[str, str]]], bool]:
    return lambda frames: set(jobs_of(frames)) >= expected


def nothing_after(http: httpx.Client, queue: str, cursor: str) -> None:
    """No event of `queue` is past `cursor` on this process."""
    after = http.get("/ojs/v1/events", params={"after": cursor, "queues": queue})
    assert after.status_code == 200 and after.json()["events"] == [], after.text


def test_a_stream_resumes_after_any_event_on_another_serve_process(env: Env):
    queue = a_queue()
    start = now(env.http)
    made = enqueue(env.http, queue, 6)
    first = Stream(str(env.http.base_url), queue, after=start)
    seen = first.until(lambda frames: len(frames) == 3)
    first.close()
    with Served(env.settings) as other, httpx.Client(base_url=other.url, timeout=90) as http:
        resumed = Stream(other.url, queue, last_id=seen[-1]["id"])
        rest = resumed.until(covering(set(made) - set(jobs_of(seen))))
        resumed.close()
        assert sorted(jobs_of(seen) + jobs_of(rest)) == sorted(made)  # each once, none lost
        assert all(f["event"] == "job.enqueued" for f in rest)
        nothing_after(http, queue, rest[-1]["id"])


def test_a_cursor_past_the_newest_starts_with_the_next_event(env: Env):
    queue = a_queue()
    far = ",".join(f"{p}:{10**15}.3" for p in range(8)) + ",99:7"  # and a partition never had
    listed = env.http.get("/ojs/v1/events", params={"after": far, "queues": queue}).json()
    assert listed["events"] == [] and not listed["missed"]
    clamped = parse(listed["last_id"])
    assert isinstance(clamped, dict) and 99 not in clamped
    assert all(offset < 10**15 for offset, _ in clamped.values())
    stream = Stream(str(env.http.base_url), queue, last_id=far)
    [job] = enqueue(env.http, queue, 1)
    [frame] = stream.until(lambda frames: len(frames) == 1)
    stream.close()
    assert frame["event"] == "job.enqueued" and orjson.loads(frame["data"])["subject"] == job
    later = env.http.get("/ojs/v1/events", params={"after": listed["last_id"], "queues": queue})
    assert [e["subject"] for e in later.json()["events"]] == [job]


def test_a_cursor_older_than_kept_starts_at_the_oldest_and_says_so(
    env: Env, monkeypatch: pytest.MonkeyPatch
):
    queue = a_queue()
    made = enqueue(env.http, queue, 300)
    # Answers come before the commit: once A lists them all, they are committed.
    committed = Stream(str(env.http.base_url), queue, after="0:0")
    committed.until(covering(set(made)))
    committed.close()
    # A serve process keeping 2 events (evicting in runs of 256) reads all 300 and more
    # before it is live.
    monkeypatch.setattr("gateway.http.app.EventFeed", functools.partial(event_feed.EventFeed, 2))
    with Served(env.settings) as small, httpx.Client(base_url=small.url, timeout=90) as http:
        listed = http.get("/ojs/v1/events", params={"after": "0:0", "queues": queue}).json()
        assert listed["missed"] is True
        kept = http.get("/ojs/v1/events", params={"queues": queue, "limit": 1000}).json()
        assert 0 < len(kept["events"]) < len(made)
        stream = Stream(small.url, queue, last_id="0:0")
        notice = stream.frame()
        assert notice["event"] == "events.missed", notice
        body = orjson.loads(notice["data"])
        assert "events were missed" in body["message"] and body["resumes_from"] == notice["id"]
        replayed = stream.until(lambda frames: len(frames) == len(kept["events"]))
        stream.close()
        assert [orjson.loads(f["data"]) for f in replayed] == kept["events"]


def test_a_malformed_last_event_id_replays_what_is_kept_and_says_so(env: Env):
    queue = a_queue()
    made = enqueue(env.http, queue, 2)
    stream = Stream(str(env.http.base_url), queue, last_id="42")  # a per-process number of old
    notice = stream.frame()
    assert notice["event"] == "events.missed"
    assert "Last-Event-ID is not a cursor" in orjson.loads(notice["data"])["message"]
    replayed = stream.until(covering(set(made)))
    stream.close()
    assert sorted(jobs_of(replayed)) == sorted(made)


def test_an_idle_stream_sends_heartbeats(env: Env, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(events_route, "HEARTBEAT_S", 0.05)
    stream = Stream(str(env.http.base_url), a_queue())
    assert stream.frame() == {"comment": "heartbeat"}
    stream.close()


def test_many_concurrent_streams_each_get_every_event(env: Env):
    queue = a_queue()
    streams = [Stream(str(env.http.base_url), queue) for _ in range(20)]
    made = set(enqueue(env.http, queue, 3))
    got: list[list[str]] = []

    def read(stream: Stream) -> None:
        got.append(jobs_of(stream.until(covering(made))))
        stream.close()

    readers = [threading.Thread(target=read, args=(s,)) for s in streams]
    for reader in readers:
        reader.start()
    for reader in readers:
        reader.join()
    assert len(got) == 20 and all(sorted(jobs) == sorted(made) for jobs in got)


# -- serve processes killed under a reader -----------------------------------------------


def serve(env: Env, port: int, views: Path, log: Path, *extra: str) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "gateway", "serve", "--bootstrap", env.bootstrap,
             "--namespace", env.namespace, "--port", str(port), "--view-dir", str(views),
             *extra],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    _wait_health(f"http://127.0.0.1:{port}", process, log)
    return process


def holder(pids: set[int], server_port: int, client_port: int) -> int:
    """Which of `pids` holds the server end of the connection from `client_port`."""
    inode = None
    with open("/proc/net/tcp") as table:
        for row in table.read().splitlines()[1:]:
            fields = row.split()
            ports = [int(address.split(":")[1], 16) for address in fields[1:3]]
            if ports == [server_port, client_port]:
                inode = fields[9]
    assert inode is not None, "no such connection"
    for pid in pids:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == f"socket:[{inode}]":
                    return pid
            except FileNotFoundError:
                continue
    raise AssertionError(f"no process of {pids} holds the connection")


def test_a_serve_process_killed_and_started_again_resumes_exactly(env: Env, tmp_path: Path):
    port, queue = free_port_block(), a_queue()
    base = f"http://127.0.0.1:{port}"
    process = serve(env, port, tmp_path / "view", tmp_path / "serve.log")
    try:
        with httpx.Client(base_url=base, timeout=60) as http:
            start = now(http)
        made = enqueue(env.http, queue, 4)
        stream = Stream(base, queue, after=start)
        seen = stream.until(lambda frames: len(frames) == 2)
        made += enqueue(env.http, queue, 2)  # read by its view, perhaps, but not sent
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        with pytest.raises((EOFError, httpx.HTTPError)):
            stream.until(lambda _: False)
        stream.close()
        made += enqueue(env.http, queue, 3)  # while it is down
        process = serve(env, port, tmp_path / "view", tmp_path / "serve.log")
        resumed = Stream(base, queue, last_id=seen[-1]["id"])
        rest = resumed.until(covering(set(made) - set(jobs_of(seen))))
        resumed.close()
        assert not any(f.get("event") == "events.missed" for f in rest)
        assert sorted(jobs_of(seen) + jobs_of(rest)) == sorted(made)
        with httpx.Client(base_url=base, timeout=60) as http:
            nothing_after(http, queue, rest[-1]["id"])
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)


def test_a_worker_killed_mid_stream_loses_nothing(env: Env, tmp_path: Path):
    port, queue = free_port_block(), a_queue()
    base = f"http://127.0.0.1:{port}"
    log = tmp_path / "serve.log"
    process = serve(env, port, tmp_path / "views", log, "--workers", "2")
    try:
        with httpx.Client(base_url=base, timeout=60) as http:
            start = now(http)
        made = enqueue(env.http, queue, 4)
        stream = Stream(base, queue, after=start)
        seen = stream.until(lambda frames: len(frames) == 2)
        workers = _children(process.pid)
        killed = holder(workers, port, stream.local_port())
        os.kill(killed, signal.SIGKILL)
        with pytest.raises((EOFError, httpx.HTTPError)):
            stream.until(lambda _: False)
        stream.close()
        made += enqueue(env.http, queue, 3)
        resumed = Stream(base, queue, last_id=seen[-1]["id"])  # the other worker, or it again
        rest = resumed.until(covering(set(made) - set(jobs_of(seen))))
        resumed.close()
        assert not any(f.get("event") == "events.missed" for f in rest)
        assert sorted(jobs_of(seen) + jobs_of(rest)) == sorted(made)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
