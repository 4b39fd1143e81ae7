"""The per-client limit (OJS security §10.4, SEC-016): requests in flight per client
address, the one past the limit answered 429 too_many_connections with Retry-After."""

from __future__ import annotations

import asyncio
import subprocess
from typing import Any

import httpx
import pytest

from gateway.cli import build_parser, main
from gateway.cli.common import EXIT_INVALID
from gateway.cli.serve import limits_of
from gateway.cli.up import _start_http
from gateway.http.app import Direct, HttpSettings, create_app
from gateway.http.errors import ApiError

ROUTES = [
    ("POST", "/ojs/v1/workers/fetch"),  # a direct route
    ("GET", "/ojs/v1/queues"),  # one through Starlette
]


class Held:
    """A binding whose view every route waits on until `release`: a request in flight."""

    def __init__(self, limit: int) -> None:
        self.settings = HttpSettings(max_client_connections=limit)
        self.watcher = None
        self.gate = asyncio.Event()

    async def view_live(self) -> None:
        await self.gate.wait()
        raise ApiError(503, "unavailable", "held", retryable=True)


def app_of(limit: int) -> tuple[Direct, Held]:
    app = create_app(HttpSettings(max_client_connections=limit))
    held = Held(limit)
    app.state.binding = held
    return app, held


def client(app: Direct, host: str = "10.0.0.1") -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, client=(host, 40000))
    return httpx.AsyncClient(transport=transport, base_url="http://gateway")


async def in_flight(app: Direct, host: str, count: int) -> list[asyncio.Task[httpx.Response]]:
    """`count` requests from `host`, each held in flight, alternating the routes."""
    tasks = []
    for n in range(count):
        method, path = ROUTES[n % 2]
        tasks.append(asyncio.create_task(client(app, host).request(method, path)))
    while app.limit.open.get(host, 0) < count:
        await asyncio.sleep(0)
    return tasks


@pytest.mark.parametrize(("method", "path"), [*ROUTES, ("GET", "/ojs/v1/health/live")])
def test_a_client_at_its_limit_gets_429_with_the_envelope_and_retry_after(method, path):
    async def go() -> None:
        app, held = app_of(2)
        tasks = await in_flight(app, "10.0.0.1", 2)
        answer = await client(app).request(method, path, headers={"X-Request-Id": "r-1"})
        assert answer.status_code == 429
        assert answer.headers["retry-after"] == "1"
        assert answer.headers["content-type"] == "application/openjobspec+json"
        assert answer.json() == {"error": {
            "code": "too_many_connections", "retryable": True, "details": {"limit": 2},
            "request_id": "r-1", "message": answer.json()["error"]["message"],
        }}  # fmt: skip
        # Another address has its own count, and is served.
        assert (await client(app, "10.0.0.2").get("/ojs/v1/health/live")).status_code == 200
        held.gate.set()
        assert [t.status_code for t in await asyncio.gather(*tasks)] == [503, 503]
        # Each answered request, an error among them, gave its place back.
        assert app.limit.open == {}
        assert (await client(app).request(method, path)).status_code != 429

    asyncio.run(go())


def test_a_refused_address_is_logged_once_a_second_with_the_count_since(
    caplog: pytest.LogCaptureFixture,
):
    async def go() -> None:
        app, held = app_of(1)
        tasks = await in_flight(app, "10.0.0.1", 1)
        with caplog.at_level("WARNING", logger="gateway.security"):
            for _ in range(5):
                assert (await client(app).get("/ojs/v1/queues")).status_code == 429
            last, since = app.limit.refused["10.0.0.1"]
            app.limit.refused["10.0.0.1"] = (last - 1.0, since)  # a second later
            assert (await client(app).get("/ojs/v1/queues")).status_code == 429
        held.gate.set()
        await asyncio.gather(*tasks)

    asyncio.run(go())
    lines = [r for r in caplog.records if r.name == "gateway.security"]
    assert [(r.status, r.source, r.refused_since_last_line) for r in lines] == [  # type: ignore[attr-defined]
        (429, "10.0.0.1", 0),
        (429, "10.0.0.1", 4),
    ]


def test_under_the_limit_every_request_is_served_and_leaves_nothing_counted():
    async def go() -> None:
        app, _ = app_of(3)
        async with client(app) as c:
            answers = await asyncio.gather(*(c.get("/ojs/v1/health/live") for _ in range(3)))
        assert [a.status_code for a in answers] == [200, 200, 200]
        assert app.limit.open == {}

    asyncio.run(go())


def test_a_request_that_fails_or_whose_client_goes_away_gives_its_place_back():
    async def go() -> None:
        app, _ = app_of(1)
        app.state.binding = None  # every endpoint fails reaching for it: a 500
        assert (await client(app).post("/ojs/v1/jobs", json={})).status_code == 500
        assert app.limit.open == {}
        app, _ = app_of(1)
        (task,) = await in_flight(app, "10.0.0.1", 1)
        task.cancel()  # the client went away: the request's task is cancelled
        with pytest.raises(asyncio.CancelledError):
            await task
        assert app.limit.open == {}
        assert (await client(app).get("/ojs/v1/health/live")).status_code == 200

    asyncio.run(go())


def test_a_limit_of_0_is_no_limit():
    async def go() -> None:
        app, held = app_of(0)
        tasks = await in_flight(app, "10.0.0.1", 150)
        assert (await client(app).get("/ojs/v1/health/live")).status_code == 200
        held.gate.set()
        await asyncio.gather(*tasks)
        assert app.limit.open == {}

    asyncio.run(go())


def _parsed(command: str, *argv: str) -> Any:
    return build_parser().parse_args([command, *argv])


LIMITS = [("--max-client-connections", "GATEWAY_MAX_CLIENT_CONNECTIONS", 100),
          ("--max-enqueue-rate", "GATEWAY_MAX_ENQUEUE_RATE", 1000)]  # fmt: skip


def _limit(args: Any, flag: str) -> int:
    limits_of(args)
    return int(getattr(args, flag[2:].replace("-", "_")))


@pytest.mark.parametrize(("flag", "env", "default"), LIMITS)
@pytest.mark.parametrize("command", ["serve", "up"])
def test_a_limit_is_the_option_else_the_environment_else_its_default(
    command, flag, env, default, monkeypatch
):
    monkeypatch.delenv(env, raising=False)
    assert _limit(_parsed(command), flag) == default
    assert _limit(_parsed(command, flag, "0"), flag) == 0
    monkeypatch.setenv(env, "7")
    assert _limit(_parsed(command), flag) == 7
    assert _limit(_parsed(command, flag, "9"), flag) == 9


@pytest.mark.parametrize(("flag", "env", "default"), LIMITS)
@pytest.mark.parametrize("command", ["serve", "up"])
@pytest.mark.parametrize("value", ["-1", "ten", "1.5", ""])
def test_a_bad_limit_is_refused_at_start_with_exit_2(
    command, value, flag, env, default, capsys, monkeypatch
):
    monkeypatch.delenv(env, raising=False)
    argv = [command, "--bootstrap", "127.0.0.1:1", flag, value]
    assert main(argv) == EXIT_INVALID
    assert flag in capsys.readouterr().err
    monkeypatch.setenv(env, value or "x")
    assert main([command, "--bootstrap", "127.0.0.1:1"]) == EXIT_INVALID
    assert f"${env}" in capsys.readouterr().err


def test_up_passes_the_limits_on_to_serve(monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[list[str]] = []
    monkeypatch.setattr(subprocess, "Popen", lambda argv, **_: started.append(argv))
    args = _parsed("up", "--bootstrap", "127.0.0.1:1", "--max-client-connections", "5",
                   "--max-enqueue-rate", "50")  # fmt: skip
    args.metrics_port = 1
    limits_of(args)
    _start_http(args)
    (argv,) = started
    assert argv[argv.index("--max-client-connections") + 1] == "5"
    assert argv[argv.index("--max-enqueue-rate") + 1] == "50"
