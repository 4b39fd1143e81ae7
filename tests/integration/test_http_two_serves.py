"""Two `gateway serve` processes behind one processor behave as one job service."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from gateway.http.binding import HttpSettings
from tests.integration.harness import Processor, apply_topics
from tests.integration.test_http import Served
from tests.integration.test_http_admin import eventually

pytestmark = pytest.mark.kafka


@pytest.fixture(scope="module")
def pair(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    namespace = f"t{uuid.uuid4().hex[:10]}"
    apply_topics(kafka_bootstrap, namespace)
    work = tmp_path_factory.mktemp("two-serves")
    proc = Processor(kafka_bootstrap, namespace, work, "1", "--commit-interval", "0.02").start()

    def settings(name: str) -> HttpSettings:
        return HttpSettings(kafka_bootstrap, namespace, decision_timeout=60, view_dir=work / name)

    try:
        with Served(settings("a")) as a, Served(settings("b")) as b:
            yield a, b, settings, work
    finally:
        proc.stop()


def test_workers_on_both_processes_get_every_job_exactly_once(pair: Any) -> None:
    a, b, _, _ = pair
    queue = f"q{uuid.uuid4().hex[:10]}"
    with httpx.Client(base_url=a.url, timeout=60) as http:
        ids = {
            http.post("/ojs/v1/jobs", json={"type": "w.job", "args": [i], "queue": queue}).json()[
                "job"
            ]["id"]
            for i in range(30)
        }

    async def worker(url: str) -> list[str]:
        got: list[str] = []
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            for _ in range(20):
                r = await client.post("/ojs/v1/workers/fetch", json={"queues": [queue], "count": 2})
                jobs = r.json()["jobs"]
                got += [j["id"] for j in jobs]
                if not jobs:
                    await asyncio.sleep(0.05)
        return got

    async def all_workers() -> list[list[str]]:
        return await asyncio.gather(*(worker(url) for url in [a.url, b.url] * 4))

    handed = [job_id for got in asyncio.run(all_workers()) for job_id in got]
    assert len(handed) == len(set(handed)), "a job was handed out twice"
    assert set(handed) == ids, "a job was never handed out"
    # Both processes agree on every job.
    with httpx.Client(base_url=a.url) as ha, httpx.Client(base_url=b.url) as hb:
        for job_id in list(ids)[:10]:
            deadline = time.monotonic() + 10
            while True:
                ja, jb = (
                    ha.get(f"/ojs/v1/jobs/{job_id}").json(),
                    hb.get(f"/ojs/v1/jobs/{job_id}").json(),
                )
                if ja == jb or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            assert ja == jb and ja["job"]["state"] == "active"
    # Done with them: leases left to run out would change job_states under later tests.
    with httpx.Client(base_url=a.url, timeout=60) as http:
        for job_id in handed:
            assert http.post("/ojs/v1/workers/ack", json={"job_id": job_id}).status_code == 200


def test_a_client_id_is_refused_on_either_process_once_taken(pair: Any) -> None:
    a, b, _, _ = pair
    given = "019078a3-b5c7-7def-8a12-" + uuid.uuid4().hex[:12]
    job = {"type": "w.job", "args": [], "id": given}
    with (
        httpx.Client(base_url=a.url, timeout=60) as ha,
        httpx.Client(base_url=b.url, timeout=60) as hb,
    ):
        assert ha.post("/ojs/v1/jobs", json=job).status_code == 201
        for client in (ha, hb):
            again = client.post("/ojs/v1/jobs", json={**job, "args": [2]})
            assert again.status_code == 409, again.text
            error = again.json()["error"]
            assert error["code"] == "duplicate" and error["details"]["existing_job_id"] == given
        with_policy = {**job, "unique": {"keys": ["type", "args"]}, "args": [3]}
        assert hb.post("/ojs/v1/jobs", json=with_policy).status_code == 409


def test_a_process_restarted_mid_load_resumes_its_view_and_reads_nothing_twice(
    pair: Any,
) -> None:
    a, _, settings, _ = pair
    posted: list[str] = []

    def load(count: int, pause_s: float = 0.0) -> None:
        with httpx.Client(base_url=a.url, timeout=60) as http:
            for i in range(count):
                answer = http.post("/ojs/v1/jobs", json={"type": "r.job", "args": [i]})
                posted.append(answer.json()["job"]["id"])
                time.sleep(pause_s)

    def all_visible(served: Served) -> None:
        with httpx.Client(base_url=served.url) as http:
            deadline = time.monotonic() + 30
            while http.get(f"/ojs/v1/jobs/{posted[-1]}").status_code != 200:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            assert all(http.get(f"/ojs/v1/jobs/{i}").status_code == 200 for i in posted)

    load(3)
    # Paced, so jobs still come (for about ten seconds) after the first view has stopped:
    # answers alone (early answers) come faster than a server stops.
    writer = threading.Thread(target=load, args=(200, 0.05))
    with Served(settings("c")) as first:
        writer.start()
        while len(posted) < 15:  # stopped while jobs keep coming
            time.sleep(0.05)
    read_first = first.app_state().view.applied  # all it applied, to its last batch
    assert writer.is_alive()
    with Served(settings("c")) as again, Served(settings("fresh")) as fresh:
        writer.join()
        all_visible(again)
        all_visible(fresh)
        # The restarted view went on from its stored offsets: together its two lives read
        # every record of the topic once, as many as a fresh view reads.
        read_again, everything = eventually(
            lambda: (again.app_state().view.applied, fresh.app_state().view.applied),
            lambda counts: read_first + counts[0] == counts[1],
            seconds=30,
        )
    assert read_again < everything
