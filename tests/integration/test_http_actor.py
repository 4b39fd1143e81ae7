"""Who did it, end to end: a bulk cancel through a served binding, by a principal of its
credentials file, names that principal on every cancelled job's audit record, as the
history route and `gateway explain` tell it, and `gateway replay` reproduces every record."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.auth import credentials, keys
from gateway.http.app import HttpSettings
from tests.integration.cli import gateway
from tests.integration.harness import Processor, apply_topics
from tests.integration.test_http import Served

pytestmark = pytest.mark.kafka

JOBS = 5
TOLD = "admin:alice from 127.0.0.1"


def history(http: httpx.Client, job_id: str, records: int) -> list[dict[str, Any]]:
    """The job's history once it holds `records` items: an answer may come before its
    record is committed (early answers), and the history reads committed records."""
    deadline = time.monotonic() + 30
    while True:
        items: list[dict[str, Any]] = http.get(
            f"/ojs/v1/admin/unique-jobs/{job_id}/history"
        ).json()["items"]
        if len(items) >= records or time.monotonic() > deadline:
            return items
        time.sleep(0.1)


def test_a_bulk_cancel_names_its_principal_on_every_cancelled_job(
    kafka_bootstrap: str, tmp_path: Path
):
    namespace = f"t{uuid.uuid4().hex[:10]}"
    apply_topics(kafka_bootstrap, namespace)
    proc = Processor(kafka_bootstrap, namespace, tmp_path, "1", "--commit-interval", "0.02")
    proc.start()
    queue, bulk_id = f"q{uuid.uuid4().hex[:10]}", f"bulk-{uuid.uuid4().hex}"
    try:
        path, key = tmp_path / "credentials.toml", keys.new_key()
        alice = credentials.principal("alice", "admin", None, ["*"])
        credentials.save(path, credentials.with_key((), "alice", key, 0, new=alice))
        settings = HttpSettings(kafka_bootstrap, namespace, decision_timeout=60, credentials=path)
        with (
            Served(settings) as served,
            httpx.Client(
                base_url=served.url, timeout=90, headers={"Authorization": f"Bearer {key}"}
            ) as http,
        ):
            ids = []
            for n in range(JOBS):
                job = {"type": "actor.job", "queue": queue, "args": [n],
                       "unique": {"keys": ["type", "args"]}}  # fmt: skip
                made = http.post("/ojs/v1/jobs", json=job)
                assert made.status_code == 201, made.text
                ids.append(made.json()["job"]["id"])
            answer = http.post(
                "/ojs/v1/admin/jobs/bulk/cancel",
                json={"filter": {"queue": queue}, "confirm": True},
                headers={"X-Request-Id": bulk_id},
            )
            assert answer.status_code == 200, answer.text
            assert (answer.json()["matched"], answer.json()["succeeded"]) == (JOBS, JOBS)
            for job_id in ids:
                enqueued, cancelled = history(http, job_id, 2)
                assert enqueued["kind"] == "request" and enqueued["by"] == TOLD
                assert cancelled["kind"] == "event" and cancelled["by"] == TOLD
                assert cancelled["record"]["by"] == {
                    "principal": "alice", "role": "admin", "source": "127.0.0.1",
                    "request_id": bulk_id,
                }  # fmt: skip
                assert cancelled["reason"] == f"job {job_id}: available → cancelled by {TOLD}"
    finally:
        proc.stop()

    where = ["--bootstrap", kafka_bootstrap, "--namespace", namespace]
    for job_id in ids:
        explained = gateway("explain", job_id, *where, "--index", str(tmp_path / "index"))
        assert explained.returncode == 0, explained.stdout + explained.stderr
        assert f"job {job_id}: available → cancelled by {TOLD}" in explained.stdout
    replayed = gateway("replay", *where)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert "0 different" in replayed.stdout, replayed.stdout
