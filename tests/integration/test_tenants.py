"""Tenants against a real broker and processor: two tenants send the same unique job, both
are accepted, and each sees, fetches and is refused by only its own."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.integration.test_http import running

pytestmark = pytest.mark.kafka

TENANT = "X-OJS-Tenant"


@pytest.fixture(scope="module")
def http(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    workdir: Path = tmp_path_factory.mktemp("tenants")
    with running(kafka_bootstrap, workdir) as (_, _cat, _settings, _served, client):
        yield client


def test_two_tenants_same_key_both_accepted_each_sees_only_its_own(http: httpx.Client):
    queue = f"tenants-{uuid.uuid4().hex[:8]}"
    job = {"type": "report.build", "args": [{"month": "2026-01"}], "queue": queue,
           "unique": {"keys": ["type", "args"], "on_conflict": "reject"}}  # fmt: skip
    a = http.post("/ojs/v1/jobs", json=job, headers={TENANT: "acme"})
    b = http.post("/ojs/v1/jobs", json=job, headers={TENANT: "globex"})
    assert a.status_code == b.status_code == 201, (a.text, b.text)
    mine, theirs = a.json()["job"], b.json()["job"]
    assert mine["id"] != theirs["id"] and mine["unique_key"] != theirs["unique_key"]
    assert (mine["meta"]["tenant_id"], theirs["meta"]["tenant_id"]) == ("acme", "globex")
    # The same tenant again: a duplicate, naming its own job and never the other's.
    again = http.post("/ojs/v1/jobs", json=job, headers={TENANT: "acme"})
    assert again.status_code == 409, again.text
    assert again.json()["error"]["details"]["existing_job_id"] == mine["id"]
    # Reads: the other tenant's job is as missing; lists hold only one's own.
    assert http.get(f"/ojs/v1/jobs/{theirs['id']}", headers={TENANT: "acme"}).status_code == 404
    assert http.get(f"/ojs/v1/jobs/{mine['id']}", headers={TENANT: "acme"}).status_code == 200
    listed = http.get("/ojs/v1/admin/jobs", params={"queue": queue}, headers={TENANT: "acme"})
    assert [j["id"] for j in listed.json()["items"]] == [mine["id"]]
    both = http.get("/ojs/v1/admin/jobs", params={"queue": queue}).json()["items"]
    assert sorted(j["id"] for j in both) == sorted([mine["id"], theirs["id"]])
    # Events: acme's feed names acme's job, never globex's.
    deadline, seen = time.monotonic() + 30, set()
    while mine["id"] not in seen and time.monotonic() < deadline:
        events = http.get("/ojs/v1/events", params={"limit": 1000}, headers={TENANT: "acme"})
        seen = {e["data"]["job_id"] for e in events.json()["events"]}
        time.sleep(0.2)
    assert mine["id"] in seen and theirs["id"] not in seen
    # Fetch: globex's worker gets globex's job; acme's then gets acme's, and no more.
    body = {"queues": [queue], "count": 5}
    got = http.post("/ojs/v1/workers/fetch", json=body, headers={TENANT: "globex"}).json()
    assert [j["id"] for j in got["jobs"]] == [theirs["id"]]
    got = http.post("/ojs/v1/workers/fetch", json=body, headers={TENANT: "acme"}).json()
    assert [j["id"] for j in got["jobs"]] == [mine["id"]]
    stats = http.get("/ojs/v1/admin/tenants/acme/stats").json()
    assert stats["tenant_id"] == "acme" and stats["total_jobs"] >= 1
