"""`gateway serve --workers N`: several serve processes on one port, each a whole binding."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.auth import credentials, keys
from tests.integration.harness import Processor, apply_topics
from tests.integration.running import _group_alive
from tests.support import free_port_block

pytestmark = pytest.mark.kafka

WORKERS = 2


def _children(pid: int) -> set[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return {int(child) for child in f.read().split()}


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def start_serve(
    bootstrap: str,
    namespace: str,
    port: int,
    tmp_path: Path,
    *extra: str,
    env: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """`gateway serve` in its own process group, its output in tmp_path/serve.log."""
    with open(tmp_path / "serve.log", "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "gateway", "serve", "--bootstrap", bootstrap,
             "--namespace", namespace, "--port", str(port),
             "--view-dir", str(tmp_path / "views"), *extra],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env,
        )  # fmt: skip


def _wait_health(base: str, serve: subprocess.Popen[bytes], log: Path) -> list[Any]:
    """Every 503 body health gave before its 200."""
    seen: list[Any] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert serve.poll() is None, log.read_text()[-3000:]
        try:
            answer = httpx.get(f"{base}/ojs/v1/health", timeout=10)
        except httpx.TransportError:
            time.sleep(0.2)
            continue
        if answer.status_code == 200:
            return seen
        seen.append(answer.json())
        time.sleep(0.2)
    raise AssertionError(f"not ready: {seen[-1:]}\n{log.read_text()[-3000:]}")


def _enqueue_each_on_a_new_connection(base: str, count: int) -> None:
    tag = uuid.uuid4().hex
    for n in range(count):
        job = {"type": "workers.job", "args": [tag, n], "unique": {"keys": ["type", "args"]}}
        posted = httpx.post(f"{base}/ojs/v1/jobs", json=job, timeout=60)
        assert posted.status_code == 201, posted.text
        got = httpx.get(f"{base}/ojs/v1/jobs/{posted.json()['job']['id']}", timeout=60)
        assert got.status_code == 200, got.text


def test_workers_share_the_port_restart_when_killed_and_stop_together(
    kafka_bootstrap: str, tmp_path: Path
):
    namespace = f"t{uuid.uuid4().hex[:10]}"
    apply_topics(kafka_bootstrap, namespace)
    proc = Processor(kafka_bootstrap, namespace, tmp_path, "1").start()
    port = free_port_block()
    base = f"http://127.0.0.1:{port}"
    log = tmp_path / "serve.log"
    serve = start_serve(kafka_bootstrap, namespace, port, tmp_path, "--workers", str(WORKERS))
    try:
        _wait_health(base, serve, log)
        workers = _children(serve.pid)
        assert len(workers) == WORKERS, workers
        # Each its own view, and its own audit index beside it.
        assert sorted(p.name for p in (tmp_path / "views").iterdir()) == [
            "worker-1", "worker-1-audit", "worker-2", "worker-2-audit",
        ]  # fmt: skip
        _enqueue_each_on_a_new_connection(base, 20)

        # A worker killed outright: the other answers meanwhile, and it is started again.
        killed = sorted(workers)[0]
        os.kill(killed, signal.SIGKILL)
        _enqueue_each_on_a_new_connection(base, 10)
        deadline = time.monotonic() + 30
        while len(_children(serve.pid) - {killed}) < WORKERS:
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        _wait_health(base, serve, log)
        _enqueue_each_on_a_new_connection(base, 10)

        # SIGTERM: every worker finishes and the supervisor goes last, so none is left
        # once it has exited.
        serve.send_signal(signal.SIGTERM)
        assert serve.wait(timeout=60) == 0, log.read_text()[-3000:]
        assert not _group_alive(serve.pid), "a serve worker outlived its supervisor"
    finally:
        if serve.poll() is None:
            os.killpg(serve.pid, signal.SIGKILL)
        proc.stop()


def test_a_killed_supervisor_takes_its_workers_with_it(kafka_bootstrap: str, tmp_path: Path):
    port = free_port_block()
    namespace = f"t{uuid.uuid4().hex[:10]}"
    serve = start_serve(kafka_bootstrap, namespace, port, tmp_path, "--workers", str(WORKERS))
    try:
        deadline = time.monotonic() + 60
        while len(_children(serve.pid)) < WORKERS:
            assert time.monotonic() < deadline and serve.poll() is None
            time.sleep(0.1)
        workers = _children(serve.pid)
        serve.kill()
        serve.wait()
        # Each worker is told (SIGTERM) and stops gracefully: a bound, not a measure.
        deadline = time.monotonic() + 60
        while any(_alive(pid) for pid in workers):
            assert time.monotonic() < deadline, "a worker outlived its killed supervisor"
            time.sleep(0.1)
    finally:
        if serve.poll() is None:
            os.killpg(serve.pid, signal.SIGKILL)


def test_serve_takes_its_credentials_from_gateway_credentials(kafka_bootstrap: str, tmp_path: Path):
    """No --credentials: $GATEWAY_CREDENTIALS is the default, so every route but health
    needs a key; the old $GATEWAY_HTTP_TOKEN is refused, not ignored."""
    namespace = f"t{uuid.uuid4().hex[:10]}"
    apply_topics(kafka_bootstrap, namespace)
    port = free_port_block()
    base = f"http://127.0.0.1:{port}"
    log = tmp_path / "serve.log"
    path, key = tmp_path / "credentials.toml", keys.new_key()
    admin = credentials.principal("ops", "admin", None, ["*"])
    credentials.save(path, credentials.with_key((), "ops", key, 0, new=admin))
    old = start_serve(kafka_bootstrap, namespace, port, tmp_path,
                      env={**os.environ, "GATEWAY_HTTP_TOKEN": "s3cret"})  # fmt: skip
    assert old.wait(timeout=60) == 2
    assert "GATEWAY_HTTP_TOKEN is no longer read" in log.read_text()
    serve = start_serve(kafka_bootstrap, namespace, port, tmp_path,
                        env={**os.environ, "GATEWAY_CREDENTIALS": str(path)})  # fmt: skip
    unknown = f"{base}/ojs/v1/jobs/{uuid.uuid4()}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert serve.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            try:
                refused = httpx.get(unknown, timeout=10)
                break
            except httpx.TransportError:  # not listening yet
                time.sleep(0.2)
        assert refused.status_code == 401, refused.text
        assert refused.json()["error"]["code"] == "unauthenticated"
        wrong = httpx.get(unknown, headers={"Authorization": "Bearer other"}, timeout=10)
        assert wrong.status_code == 401, wrong.text
        allowed = httpx.get(unknown, headers={"Authorization": f"Bearer {key}"}, timeout=60)
        assert allowed.status_code == 404, allowed.text
        assert httpx.get(f"{base}/ojs/v1/health/live", timeout=10).status_code == 200
    finally:
        os.killpg(serve.pid, signal.SIGTERM)
        serve.wait(timeout=60)
