"""One authority for job ids, whatever the timing: an id the gateway minted and answered
early, before its decision was committed, is never given to a second job, whichever serve
process, processor runtime or route the second request reaches (core/ids.py)."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from gateway.bench.services import free_port
from gateway.core import Outcome
from gateway.http.binding import HttpSettings
from gateway.sdk import Client
from tests.integration.harness import Processor, Reader, apply_topics
from tests.integration.test_http import Served
from tests.integration.test_serve_workers import _wait_health

pytestmark = pytest.mark.kafka


@pytest.fixture(scope="module")
def gateway(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Two processor runtimes committing every 2 s, so answers come long before commits;
    two serve processes, each with its own view, and a third with two workers."""
    namespace = f"t{uuid.uuid4().hex[:10]}"
    apply_topics(kafka_bootstrap, namespace)
    work = tmp_path_factory.mktemp("ids")
    proc = Processor(
        kafka_bootstrap, namespace, work, "1", "--processes", "2", "--commit-interval", "2"
    ).start()

    def settings(name: str) -> HttpSettings:
        return HttpSettings(kafka_bootstrap, namespace, decision_timeout=60, view_dir=work / name)

    port = free_port()
    log = work / "serve.log"
    with open(log, "ab") as out:
        workers = subprocess.Popen(
            [sys.executable, "-m", "gateway", "serve", "--bootstrap", kafka_bootstrap,
             "--namespace", namespace, "--port", str(port), "--view-dir", str(work / "w"),
             "--workers", "2"],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        _wait_health(f"http://127.0.0.1:{port}", workers, log)
        with Served(settings("a")) as a, Served(settings("b")) as b:
            yield kafka_bootstrap, namespace, a.url, b.url, f"http://127.0.0.1:{port}"
    finally:
        os.killpg(workers.pid, signal.SIGTERM)
        workers.wait(timeout=30)
        proc.stop()


def keyed(tag: str, n: int, **more: Any) -> dict[str, Any]:
    return {"type": "ids.race", "args": [tag, n], "unique": {"keys": ["type", "args"]}, **more}


async def race(first_url: str, second_url: str, tag: str, n: int) -> tuple[Any, ...]:
    """A keyed job without an id on one serve; the moment its answer names the minted id,
    that id with another key on the other serve, and with no key at all."""
    async with (
        httpx.AsyncClient(base_url=first_url, timeout=60) as one,
        httpx.AsyncClient(base_url=second_url, timeout=60) as other,
    ):
        first = await one.post("/ojs/v1/jobs", json=keyed(tag, n))
        assert first.status_code == 201, first.text
        job_id = first.json()["job"]["id"]
        again = await asyncio.gather(
            other.post("/ojs/v1/jobs", json=keyed(tag, n + 1_000, id=job_id)),
            one.post("/ojs/v1/jobs", json={"type": "ids.plain", "args": [n], "id": job_id}),
        )
        return job_id, first.json()["job"], *again


def test_a_minted_id_reused_at_once_is_refused_on_any_serve(gateway: Any) -> None:
    _, _, *urls = gateway
    pairs = list(itertools.permutations(urls, 2))
    tag = uuid.uuid4().hex[:8]

    async def all_races() -> list[tuple[Any, ...]]:
        return await asyncio.gather(*(race(*pairs[n % len(pairs)], tag, n) for n in range(30)))

    results = asyncio.run(all_races())
    for job_id, _, *reuses in results:
        for reuse in reuses:
            assert reuse.status_code == 409, reuse.text
            body = reuse.json()
            assert body["error"]["code"] == "duplicate"
            assert body["error"]["details"]["existing_job_id"] == job_id
    # Every first job is still the one its id shows, on every serve, once committed (a serve
    # that did not answer it learns of it from job_states: the commit interval here is 2 s).
    for url in urls:
        with httpx.Client(base_url=url, timeout=60) as http:
            for job_id, first, *_ in results:
                deadline = time.monotonic() + 30
                while (got := http.get(f"/ojs/v1/jobs/{job_id}")).status_code == 404:
                    assert time.monotonic() < deadline, (url, job_id, got.text)
                    time.sleep(0.2)
                assert got.status_code == 200, (url, job_id, got.status_code, got.text)
                shown = got.json()["job"]
                assert (shown["type"], shown["args"]) == (first["type"], first["args"])


def test_a_minted_id_reused_through_the_sdk_is_refused(gateway: Any) -> None:
    bootstrap, namespace, a, *_ = gateway
    tag = uuid.uuid4().hex[:8]
    with Client(bootstrap, namespace) as client:
        for n in range(10):
            first = client.enqueue(keyed(tag, n), wait=True)
            assert first.outcome is Outcome.ACCEPTED and first.job_id
            again = client.enqueue(keyed(tag, n + 1_000, id=first.job_id), wait=True)
            assert again.outcome is Outcome.REJECTED, again
            assert again.existing_job_id == first.job_id
    with httpx.Client(base_url=a, timeout=60) as http:
        shown = http.get(f"/ojs/v1/jobs/{first.job_id}").json()["job"]
        assert shown["args"] == [tag, 9]


def test_a_client_id_is_one_job_across_routes_and_serves(gateway: Any) -> None:
    _, _, a, _, b = gateway
    tag = uuid.uuid4().hex[:8]

    async def pair(n: int) -> list[httpx.Response]:
        job_id = str(uuid.UUID(int=(uuid.uuid4().int & ~(0xF << 76)) | (0x7 << 76)))
        async with (
            httpx.AsyncClient(base_url=a, timeout=60) as ca,
            httpx.AsyncClient(base_url=b, timeout=60) as cb,
        ):
            return list(
                await asyncio.gather(
                    ca.post("/ojs/v1/jobs", json=keyed(tag, n, id=job_id)),
                    cb.post("/ojs/v1/jobs", json=keyed(tag, n + 1_000, id=job_id)),
                    cb.post("/ojs/v1/jobs", json={"type": "ids.plain", "args": [n], "id": job_id}),
                )
            )

    async def all_pairs() -> list[list[httpx.Response]]:
        return await asyncio.gather(*(pair(n) for n in range(12)))

    for answers in asyncio.run(all_pairs()):
        codes = sorted(r.status_code for r in answers)
        assert codes == [201, 409, 409], [r.text for r in answers]


def test_a_minted_id_reused_before_a_sigkill_is_refused_after_it(
    kafka_bootstrap: str, namespace: str, tmp_path: Any
) -> None:
    """The id answered early, the reuse sent at once, the processor killed before either is
    committed: its successor decides both again, the same id first, the reuse refused."""
    cat = apply_topics(kafka_bootstrap, namespace)
    proc = Processor(kafka_bootstrap, namespace, tmp_path, "1", "--commit-interval", "60")
    proc.start()
    tag = uuid.uuid4().hex[:8]
    try:
        with Client(kafka_bootstrap, namespace) as client:
            first = client.enqueue(keyed(tag, 1), wait=True)  # answered long before a commit
            assert first.outcome is Outcome.ACCEPTED and first.job_id
            reuse = client.enqueue(keyed(tag, 2, id=first.job_id))  # acknowledged by Kafka
        proc.kill()
        # Its successor, on the same state, commits at once.
        proc = Processor(kafka_bootstrap, namespace, tmp_path, "1", "--commit-interval", "0.1")
        proc.start()
        reader = Reader(kafka_bootstrap, [cat.name("decisions")])
        decisions = {
            d["value"]["request_id"]: d["value"]
            for d in reader.poll_until(cat.name("decisions"), 2, timeout=120)
            if "request_id" in d["value"]
        }
        assert decisions[first.request_id]["job_id"] == first.job_id
        refused = decisions[reuse.request_id]
        assert refused["outcome"] == "rejected", refused
        assert refused["existing_job_id"] == first.job_id
    finally:
        proc.stop()
