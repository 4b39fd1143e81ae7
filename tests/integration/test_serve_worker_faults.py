"""`gateway serve --workers 2` under faults: a worker killed (-9) mid-stream or mid-request
ends only its own connections, the other keeps serving and nothing is lost; pauses and
resumes of one queue sent through both workers at once end, on every partition and in
every worker's view, in the newest command's state."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from gateway.partitioner import partition_for
from gateway.sdk import Client, EventAck
from tests.integration.harness import Processor, apply_topics
from tests.integration.test_serve_workers import _children, _wait_health
from tests.support import free_port_block

pytestmark = pytest.mark.kafka

WORKERS = 2
PARTITIONS = 8  # of `requests`, as topics/topics.toml has it


class Serve:
    def __init__(self, bootstrap: str, namespace: str, tmp: Path) -> None:
        self.bootstrap, self.namespace = bootstrap, namespace
        self.port = free_port_block()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = tmp / "serve.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "gateway", "serve", "--bootstrap", bootstrap,
                 "--namespace", namespace, "--port", str(self.port), "--workers", str(WORKERS),
                 "--view-dir", str(tmp / "views")],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip

    def ready(self) -> None:
        """Every worker started and its view live."""
        deadline = time.monotonic() + 120
        while len(_children(self.proc.pid)) < WORKERS:
            assert time.monotonic() < deadline, self.log.read_text()[-3000:]
            time.sleep(0.1)
        _wait_health(self.base, self.proc, self.log)

    def holder(self, client_port: int) -> int:
        """The worker whose socket is the server end of the connection from `client_port`,
        once it has accepted it."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            inode = _server_inode(self.port, client_port)
            for pid in _children(self.proc.pid):
                if inode is not None and _holds(pid, inode):
                    return pid
            time.sleep(0.02)
        raise AssertionError(f"no worker accepted the connection from port {client_port}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def _server_inode(port: int, client_port: int) -> int | None:
    local, remote = f"0100007F:{port:04X}", f"0100007F:{client_port:04X}"
    with open("/proc/net/tcp") as table:
        for line in table.read().splitlines()[1:]:
            fields = line.split()
            if fields[1] == local and fields[2] == remote:
                return int(fields[9])
    return None


def _holds(pid: int, inode: int) -> bool:
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except FileNotFoundError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == f"socket:[{inode}]":
                return True
        except FileNotFoundError:
            continue
    return False


@pytest.fixture(scope="module")
def serve(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    namespace = f"t{uuid.uuid4().hex[:10]}"
    apply_topics(kafka_bootstrap, namespace)
    tmp = tmp_path_factory.mktemp("serve-faults")
    proc = Processor(kafka_bootstrap, namespace, tmp, "1", "--commit-interval", "0.05").start()
    served = Serve(kafka_bootstrap, namespace, tmp)
    try:
        served.ready()
        yield served
    finally:
        served.stop()
        proc.stop()


def _connect(serve: Serve, head: bytes) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", serve.port), timeout=60)
    sock.sendall(head)
    return sock


def _ended(sock: socket.socket) -> bool:
    """Whether the server end closed: EOF or a reset (bounded by the socket's timeout)."""
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        pass
    return True


def _enqueue_through_new_connections(serve: Serve, tag: str, count: int) -> list[str]:
    ids = []
    for n in range(count):
        job = {"type": "faults.job", "args": [tag, n], "unique": {"keys": ["type", "args"]}}
        posted = httpx.post(f"{serve.base}/ojs/v1/jobs", json=job, timeout=60)
        assert posted.status_code == 201, posted.text
        ids.append(posted.json()["job"]["id"])
    return ids


def _restarted(serve: Serve, killed: int, before: set[int]) -> None:
    """Until the killed worker's successor is serving; meanwhile every connection is
    accepted by a live worker, never by the successor before its view is live.
    `before` is the children counted before the kill: the supervisor may start the
    successor before this is called."""
    survivors = before - {killed}
    deadline = time.monotonic() + 60
    while not (fresh := _children(serve.proc.pid) - survivors - {killed}):
        assert time.monotonic() < deadline, serve.log.read_text()[-3000:]
        time.sleep(0.05)
    [successor] = fresh
    while True:
        with httpx.Client(base_url=serve.base, timeout=60) as client:
            answer = client.get("/ojs/v1/health")
            port = answer.extensions["network_stream"].get_extra_info("client_addr")[1]
            if answer.status_code == 200:
                return
            assert serve.holder(port) != successor, answer.text
        assert time.monotonic() < deadline, serve.log.read_text()[-3000:]
        time.sleep(0.05)


def test_a_worker_killed_mid_stream_ends_only_its_stream(serve: Serve):
    stream = _connect(serve, b"GET /ojs/v1/events HTTP/1.1\r\nHost: t\r\n"
                             b"Accept: text/event-stream\r\n\r\n")  # fmt: skip
    first = b""
    while b"retry:" not in first:  # the stream has begun: its worker is writing it
        chunk = stream.recv(4096)
        assert chunk, first
        first += chunk
    killed = serve.holder(stream.getsockname()[1])
    before = _children(serve.proc.pid)
    os.kill(killed, signal.SIGKILL)
    assert _ended(stream)
    stream.close()
    tag = uuid.uuid4().hex
    ids = _enqueue_through_new_connections(serve, tag, 10)  # the other worker answers
    _restarted(serve, killed, before)
    for job_id in ids:  # every job answered is there, read through either worker
        assert httpx.get(f"{serve.base}/ojs/v1/jobs/{job_id}", timeout=60).status_code == 200


def test_a_worker_killed_mid_request_loses_nothing_and_its_retry_is_decided_once(serve: Serve):
    tag = uuid.uuid4().hex
    job = orjson.dumps({"type": "faults.once", "args": [tag], "unique": {"keys": ["type", "args"],
                        "on_conflict": "reject"}})  # fmt: skip
    head = (
        f"POST /ojs/v1/jobs HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(job)}\r\n\r\n"
    ).encode()
    request = _connect(serve, head + job[: len(job) // 2])  # the body stops halfway
    killed = serve.holder(request.getsockname()[1])
    before = _children(serve.proc.pid)
    os.kill(killed, signal.SIGKILL)
    assert _ended(request)
    request.close()
    retried = httpx.post(f"{serve.base}/ojs/v1/jobs", content=job, timeout=60,
                         headers={"Content-Type": "application/json"})  # fmt: skip
    assert retried.status_code == 201, retried.text  # the half request enqueued nothing
    again = httpx.post(f"{serve.base}/ojs/v1/jobs", content=job, timeout=60,
                       headers={"Content-Type": "application/json"})  # fmt: skip
    assert again.status_code == 409 and again.json()["error"]["code"] == "duplicate"
    _restarted(serve, killed, before)


def test_a_worker_killed_with_a_whole_request_in_hand_decides_it_at_most_once(serve: Serve):
    tag = uuid.uuid4().hex
    job = orjson.dumps({"type": "faults.whole", "args": [tag], "unique": {"keys": ["type", "args"],
                        "on_conflict": "reject"}})  # fmt: skip
    head = (
        f"POST /ojs/v1/jobs HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(job)}\r\n\r\n"
    ).encode()
    request = _connect(serve, head + job)  # answered or not when the kill lands: either way
    killed = serve.holder(request.getsockname()[1])
    before = _children(serve.proc.pid)
    os.kill(killed, signal.SIGKILL)
    assert _ended(request)
    request.close()
    headers = {"Content-Type": "application/json"}
    retried = httpx.post(f"{serve.base}/ojs/v1/jobs", content=job, timeout=60, headers=headers)
    # 201 if the killed worker never sent it on, 409 naming the job if it did: never two.
    assert retried.status_code in (201, 409), retried.text
    again = httpx.post(f"{serve.base}/ojs/v1/jobs", content=job, timeout=60, headers=headers)
    assert again.status_code == 409, again.text
    if retried.status_code == 201:
        assert again.json()["error"]["details"]["existing_job_id"] == retried.json()["job"]["id"]
    _restarted(serve, killed, before)


def _jobs_on_every_partition(serve: Serve, queue: str) -> dict[int, dict[str, Any]]:
    """A waiting job of `queue` on each partition of `requests` (its route: its key)."""
    jobs: dict[int, dict[str, Any]] = {}
    tag = uuid.uuid4().hex
    for n in range(400):
        body = {"type": "faults.held", "args": [tag, n], "queue": queue,
                "unique": {"keys": ["type", "args"]}}  # fmt: skip
        job = httpx.post(f"{serve.base}/ojs/v1/jobs", json=body, timeout=60).json()["job"]
        jobs.setdefault(partition_for(job["unique_key"].encode(), PARTITIONS), job)
        if len(jobs) == PARTITIONS:
            return jobs
    raise AssertionError(f"400 keys fell on {sorted(jobs)} only")


def test_pauses_and_resumes_through_every_worker_at_once_end_in_the_newest_everywhere(
    serve: Serve,
):
    queue = f"contended-{uuid.uuid4().hex[:8]}"
    waiting = _jobs_on_every_partition(serve, queue)
    clients: dict[int, list[httpx.Client]] = {}
    while len(clients) < WORKERS or sum(map(len, clients.values())) < 4:
        client = httpx.Client(base_url=serve.base, timeout=60)
        answer = client.get("/ojs/v1/health")
        assert answer.status_code == 200, answer.text
        port = answer.extensions["network_stream"].get_extra_info("client_addr")[1]
        clients.setdefault(serve.holder(port), []).append(client)
    everyone = [c for group in clients.values() for c in group]

    def toggle(client: httpx.Client) -> list[int]:
        statuses = []
        for _ in range(6):
            verb = random.choice(["pause", "resume"])
            statuses.append(client.post(f"/ojs/v1/queues/{queue}/{verb}").status_code)
        return statuses

    with ThreadPoolExecutor(len(everyone)) as pool:
        statuses = [s for answers in pool.map(toggle, everyone) for s in answers]
    assert statuses == [200] * len(statuses)

    # Every command was applied on every partition before its answer, so a claim sent now
    # is judged by each partition's last word: all must hold the same one, the newest.
    with Client(serve.bootstrap, serve.namespace) as kafka:
        acks = [kafka.publish_event({"job_id": job["id"], "type": "job.started",
                                     "unique_key": job["unique_key"]}, timeout=60)
                for job in waiting.values()]  # fmt: skip
    answered = [a for a in acks if isinstance(a, EventAck)]
    assert len(answered) == len(acks), acks
    refused = {a.error is not None and a.error.code == "queue_paused" for a in answered}
    assert all(str(a.outcome) == ("refused" if a.error else "applied") for a in answered), acks
    assert len(refused) == 1, acks
    [paused] = refused
    for worker, group in clients.items():  # and each worker's view comes to show it
        deadline = time.monotonic() + 30
        while (shown := group[0].get(f"/ojs/v1/queues/{queue}/stats").json())["queue"][
            "paused"
        ] != paused:
            assert time.monotonic() < deadline, (worker, shown, paused)
            time.sleep(0.05)
    for client in everyone:
        client.close()


def test_cron_changes_through_every_worker_at_once_end_alike_in_every_view(serve: Serve):
    name = f"contended-{uuid.uuid4().hex[:8]}"
    cron = {"name": name, "expression": "0 0 1 1 *", "job_template": {"type": "faults.cron"}}
    assert httpx.post(f"{serve.base}/ojs/v1/cron", json=cron, timeout=60).status_code == 201
    clients = [httpx.Client(base_url=serve.base, timeout=60) for _ in range(4)]

    def toggle(client: httpx.Client) -> list[int]:
        return [client.patch(f"/ojs/v1/cron/{name}",
                             json={"enabled": random.choice([True, False])}).status_code
                for _ in range(6)]  # fmt: skip

    with ThreadPoolExecutor(len(clients)) as pool:
        statuses = [s for answers in pool.map(toggle, clients) for s in answers]
    assert statuses == [200] * len(statuses)
    last = clients[0].patch(f"/ojs/v1/cron/{name}", json={"enabled": False}).json()["cron"]
    # Every connection's view (on either worker) comes to the last change, none held back
    # by an answer of its own that the records have since passed.
    for client in clients:
        deadline = time.monotonic() + 30
        while (shown := client.get(f"/ojs/v1/cron/{name}").json()["cron"]) != last:
            assert time.monotonic() < deadline, (shown, last)
            time.sleep(0.05)
        client.close()
