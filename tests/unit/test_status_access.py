"""The processor's status port with a credentials file: /metrics for a key holding
`inspect` only, refused in the HTTP binding's envelope; /ready and /live open; the
supervisor's port passes its caller's key on to the runtimes'; SIGHUP reads the file
again."""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry, Counter

from gateway.auth import credentials, keys
from gateway.processor import status
from gateway.processor.readiness import serve_status
from gateway.processor.status_access import guard_of
from tests.support import free_port_block
from tests.unit.test_auth import gateway

ROLES = ("read-only", "operator", "admin", "producer", "worker")


@pytest.fixture
def keyed(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A credentials file with one principal per role, named as its role, and their keys."""
    path, given = tmp_path / "credentials.toml", {}
    made: tuple[credentials.Principal, ...] = ()
    for role in ROLES:
        given[role] = keys.new_key()
        new = credentials.principal(role, role, None, ["*"])
        made = credentials.with_key(made, role, given[role], 0, new=new)
    credentials.save(path, made)
    return path, given


def _registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    Counter("gateway_test_decisions", "decisions", registry=registry).inc(3)
    return registry


def _ready() -> tuple[bool, dict[str, object]]:
    return True, {"status": "ready", "partitions": 4}


@pytest.fixture
def port(keyed: tuple[Path, dict[str, str]]) -> Iterator[int]:
    """A runtime's status port, guarded by `keyed`'s file."""
    registry = _registry()
    chosen = free_port_block()
    server = serve_status(chosen, lambda _: _metrics(registry), _ready, guard_of(keyed[0]))
    yield chosen
    server.shutdown()


def _metrics(registry: CollectorRegistry) -> bytes:
    from prometheus_client import generate_latest

    return generate_latest(registry)


def _get(port: int, path: str, key: str | None = None, **headers: str) -> httpx.Response:
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    return httpx.get(f"http://127.0.0.1:{port}{path}", headers=headers, timeout=10)


def test_metrics_without_a_key_or_with_a_wrong_one_is_401_in_the_ojs_envelope(port: int):
    for answer in (_get(port, "/metrics"), _get(port, "/metrics", keys.new_key())):
        assert answer.status_code == 401
        assert answer.headers["WWW-Authenticate"] == 'Bearer realm="gateway"'
        error = answer.json()["error"]
        assert error["code"] == "unauthenticated" and not error["retryable"]
        assert error["request_id"] == answer.headers["X-Request-Id"]
        assert set(error) == {"code", "message", "retryable", "details", "request_id"}
        assert b"gateway_test_decisions" not in answer.content
    basic = _get(port, "/metrics", Authorization="Basic dXNlcjpwYXNz")
    assert basic.status_code == 401
    given = _get(port, "/metrics", **{"X-Request-Id": "r-1"})
    assert given.json()["error"]["request_id"] == "r-1"


def test_metrics_is_403_to_a_principal_without_inspect(
    port: int, keyed: tuple[Path, dict[str, str]]
):
    for role in ("producer", "worker"):
        answer = _get(port, "/metrics", keyed[1][role])
        assert answer.status_code == 403, role
        error = answer.json()["error"]
        assert error["code"] == "permission_denied"
        assert error["details"] == {"principal": role, "operation": "inspect"}
        assert "WWW-Authenticate" not in answer.headers


def test_metrics_answers_a_principal_holding_inspect(port: int, keyed: tuple[Path, dict[str, str]]):
    for role in ("read-only", "operator", "admin"):
        answer = _get(port, "/metrics", keyed[1][role])
        assert answer.status_code == 200, role
        assert "gateway_test_decisions_total 3.0" in answer.text


def test_ready_and_live_stay_open_and_say_nothing_more(port: int):
    ready = _get(port, "/ready")
    assert ready.status_code == 200 and ready.json() == {"status": "ready", "partitions": 4}
    live = _get(port, "/live")
    assert live.status_code == 200 and live.json() == {"status": "ok"}


def test_each_refusal_leaves_a_line_in_the_security_log(
    port: int, keyed: tuple[Path, dict[str, str]], caplog: pytest.LogCaptureFixture
):
    with caplog.at_level(logging.WARNING, logger="gateway.security"):
        _get(port, "/metrics")
        _get(port, "/metrics", keyed[1]["producer"], **{"X-Request-Id": "r-2"})
        _get(port, "/metrics", keyed[1]["read-only"])
    lines = [r for r in caplog.records if r.name == "gateway.security"]
    assert [(r.__dict__["status"], r.__dict__["principal"]) for r in lines] == [
        (401, None), (403, "producer"),
    ]  # fmt: skip
    refused = lines[1].__dict__
    assert refused["role"] == "producer" and refused["source"] == "127.0.0.1"
    assert refused["request_id"] == "r-2" and refused["route"] == "GET /metrics"


def test_without_a_credentials_file_the_port_is_open():
    registry = _registry()
    chosen = free_port_block()
    server = serve_status(chosen, lambda _: _metrics(registry), _ready, guard_of(None))
    try:
        assert _get(chosen, "/metrics").status_code == 200
        assert _get(chosen, "/metrics", keys.new_key()).status_code == 200
    finally:
        server.shutdown()


def test_the_supervisors_port_checks_its_caller_and_passes_the_key_on(
    keyed: tuple[Path, dict[str, str]],
):
    path, given = keyed
    first = free_port_block()
    runtimes = [
        serve_status(first + n, lambda _: _metrics(_registry()), _ready, guard_of(path))
        for n in (1, 2)
    ]
    merged = status.serve(first, [("7-1", first + 1), ("7-2", first + 2)], guard_of(path))
    try:
        assert _get(first, "/metrics").status_code == 401
        assert _get(first, "/metrics", given["worker"]).status_code == 403
        answer = _get(first, "/metrics", given["read-only"])
        # Both runtimes let the key in: their counts add up.
        assert answer.status_code == 200 and "gateway_test_decisions_total 6.0" in answer.text
        ready = _get(first, "/ready")
        assert ready.json() == {"status": "ready", "partitions": 8, "processes": 2}
        assert _get(first + 1, "/metrics").status_code == 401  # no way around it
    finally:
        for server in (merged, *runtimes):
            server.shutdown()


def test_a_revoked_key_is_refused_after_sighup(keyed: tuple[Path, dict[str, str]]):
    path, given = keyed
    guard = guard_of(path)
    assert guard is not None
    admin = [f"Bearer {given['admin']}"]
    before = signal.signal(signal.SIGHUP, guard.on_sighup)
    try:
        assert guard.refusal("GET /metrics", admin, None, "r") is None
        credentials.save(path, credentials.without_keys(guard.watcher.keyring.principals, "admin"))
        # Read again at the next request, not at the next look a second on (keyring.POLL_S).
        os.kill(os.getpid(), signal.SIGHUP)
        refused = guard.refusal("GET /metrics", admin, None, "r")
        assert refused is not None and refused.status == 401
    finally:
        signal.signal(signal.SIGHUP, before)


@pytest.mark.parametrize("given", ["option", "environment"])
def test_process_refuses_a_bad_credentials_file_before_anything_with_2(tmp_path: Path, given: str):
    bad = tmp_path / "credentials.toml"
    bad.write_text('[[principal]]\nname = "x"\n')
    argv = ["process", "--bootstrap", "127.0.0.1:1"]
    env = {**os.environ, "GATEWAY_CREDENTIALS": str(bad)}
    if given == "option":
        argv += ["--credentials", str(bad)]
        env.pop("GATEWAY_CREDENTIALS")
    result = gateway(*argv, env=env)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and str(bad) in result.stderr
