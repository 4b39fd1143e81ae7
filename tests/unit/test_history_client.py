"""`gateway explain` asking a gateway: the pages of its history route, and each way it
can fail to answer, against a small HTTP server standing in for it."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from gateway import config
from gateway.cli import history_client, main
from gateway.cli.progress import progress_bar
from gateway.cli.up import _local_url

Answers = dict[str | None, tuple[int, bytes]]  # by cursor: status, body


@contextmanager
def serving(answers: Answers, seen: list[dict[str, Any]]) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            asked = urlparse(self.path)
            cursor = parse_qs(asked.query).get("cursor", [None])[0]
            seen.append({"path": asked.path, "query": parse_qs(asked.query),
                         "auth": self.headers.get("Authorization")})  # fmt: skip
            status, body = answers[cursor]
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def page(items: list[int], cursor: str | None) -> bytes:
    return json.dumps({"items": items, "next_cursor": cursor, "index": {"behind": 0}}).encode()


def error(status: int, message: str, details: dict[str, Any]) -> tuple[int, bytes]:
    body = {"error": {"code": "x", "message": message, "retryable": False, "details": details}}
    return status, json.dumps(body).encode()


def test_every_page_is_read_with_the_key_from_the_environment(monkeypatch):
    monkeypatch.setenv(history_client.API_KEY_ENV, "gk_secret")
    seen: list[dict[str, Any]] = []
    answers: Answers = {None: (200, page([1, 2], "0:7")), "0:7": (200, page([3], None))}
    with serving(answers, seen) as url:
        got = [item for p in history_client.pages(url + "/", "a/b c") for item in p["items"]]
    assert got == [1, 2, 3]
    assert [s["path"] for s in seen] == ["/ojs/v1/admin/unique-jobs/a%2Fb%20c/history"] * 2
    assert seen[1]["query"] == {"limit": ["1000"], "cursor": ["0:7"]}
    assert {s["auth"] for s in seen} == {"Bearer gk_secret"}


@pytest.mark.parametrize(
    ("answer", "raised", "says"),
    [
        (error(404, "no audit record mentions this key", {"index": {}}), history_client.NotFound,
         "no audit record mentions"),
        (error(404, "Not Found", {}), history_client.Unanswered, "404: Not Found"),
        (error(401, "missing credentials", {}), history_client.Unanswered, "GATEWAY_API_KEY"),
        (error(503, "this process keeps no audit index", {}), history_client.Unanswered, "503"),
        ((200, b"<html>"), history_client.Unanswered, "other than a key's history"),
        ((200, b'{"items": 3}'), history_client.Unanswered, "other than a key's history"),
    ],
)  # fmt: skip
def test_what_is_not_a_history_is_said(answer, raised, says, monkeypatch):
    monkeypatch.delenv(history_client.API_KEY_ENV, raising=False)
    seen: list[dict[str, Any]] = []
    with serving({None: answer}, seen) as url, pytest.raises(raised, match=says):
        next(history_client.pages(url, "k"))
    assert seen[0]["auth"] is None


def test_no_gateway_listening_is_unanswered():
    with serving({}, []) as url:
        pass  # closed: nothing listens there now
    with pytest.raises(history_client.Unanswered, match="no answer from"):
        next(history_client.pages(url, "k"))


def test_the_running_up_is_asked_only_for_its_own_broker_and_topic():
    config.record_up("b:9092", "http://127.0.0.1:8080", "ns.decisions")
    try:
        assert config.up_binding("b:9092", "ns.decisions") == "http://127.0.0.1:8080"
        assert config.up_binding("b:9092", "decisions") is None
        assert config.up_binding("other:9092", "ns.decisions") is None
    finally:
        config.forget_up()
    assert config.up_binding("b:9092", "ns.decisions") is None


@pytest.mark.parametrize(
    ("host", "url"),
    [("0.0.0.0", "http://127.0.0.1:8"), ("::", "http://[::1]:8"), ("10.1.2.3", "http://10.1.2.3:8"),
     ("fe80::1", "http://[fe80::1]:8"), ("localhost", "http://localhost:8")],
)  # fmt: skip
def test_up_records_where_this_machine_reaches_its_binding(host, url):
    assert _local_url("http", host, 8) == url


def test_a_long_read_off_a_terminal_says_how_far_it_has_come(capsys, monkeypatch):
    monkeypatch.setattr("gateway.cli.progress.LINE_EVERY_S", 0.0)
    with progress_bar(9, "short") as advance:
        assert advance is None
    with progress_bar(20_000, "indexing d") as advance:
        assert advance is not None
        advance(5_000)
        advance(15_000)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "indexing d: 20,000 records to read"
    assert lines[1].startswith("indexing d: 5,000 of 20,000 (25%), about ")
    assert lines[2].startswith("indexing d: 20,000 of 20,000 (100%), about 0 s left")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--url", "http://127.0.0.1:1", "--here"], "--url asks a gateway, --index and --here"),
        (["--url", "http://127.0.0.1:1", "--index", "/tmp/x"], "give one"),
        (["--url", "localhost:8080"], "--url 'localhost:8080' is no http:// or https:// URL"),
    ],
)  # fmt: skip
def test_explain_refuses_a_gateway_it_cannot_ask(args, says, capsys):
    assert main(["explain", "k", *args]) == 2
    assert says in capsys.readouterr().err


def test_a_gateway_named_and_silent_is_exit_3_never_a_read_of_the_log(capsys):
    with serving({}, []) as url:
        pass
    assert main(["explain", "k", "--url", url]) == 3
    assert "the gateway's history: no answer from" in capsys.readouterr().err
