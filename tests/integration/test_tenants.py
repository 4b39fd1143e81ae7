"""Tenants against a real broker and processor: two tenants send the same unique job, both
are accepted, and each sees, fetches and is refused by only its own; a tenant's limits,
set through the admin route, refuse what passes them with 429 and give places back as its
jobs start; and replay reproduces every decision of the log."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from gateway import catalogue
from gateway.core.times import parse_rfc3339
from gateway.sdk import Client
from tests.integration.cli import gateway
from tests.integration.harness import Reader
from tests.integration.test_http import running

pytestmark = pytest.mark.kafka

TENANT = "X-OJS-Tenant"


@pytest.fixture(scope="module")
def served(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[httpx.Client, str]]:
    workdir: Path = tmp_path_factory.mktemp("tenants")
    with running(kafka_bootstrap, workdir) as (namespace, _cat, _settings, _served, client):
        yield client, namespace


@pytest.fixture(scope="module")
def http(served: tuple[httpx.Client, str]) -> httpx.Client:
    return served[0]


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


def test_a_tenant_s_limits_refuse_with_429_and_places_come_back(
    served: tuple[httpx.Client, str], kafka_bootstrap: str
):
    http, namespace = served
    tenant, queue = f"lim-{uuid.uuid4().hex[:6]}", f"limits-{uuid.uuid4().hex[:6]}"
    headers = {TENANT: tenant}
    bad = http.put(f"/ojs/v1/admin/tenants/{tenant}/limits", json={"max_depth": 2})
    assert bad.status_code == 400 and "max_depth" in bad.json()["error"]["message"]
    put = http.put(f"/ojs/v1/admin/tenants/{tenant}/limits",
                   json={"max_queue_depth": 2, "reason": "test"})  # fmt: skip
    assert put.status_code == 200, put.text
    assert put.json()["limits"]["max_queue_depth"] == {"limit": 2, "current": 0}

    def enqueue(i: int) -> httpx.Response:
        return http.post("/ojs/v1/jobs", headers=headers,
                         json={"type": "lim.job", "args": [i], "queue": queue})  # fmt: skip

    first, second, third = enqueue(1), enqueue(2), enqueue(3)
    assert first.status_code == second.status_code == 201, (first.text, second.text)
    assert third.status_code == 429, third.text
    assert third.headers["Retry-After"] == "1"
    error = third.json()["error"]
    assert error["code"] == "TENANT_LIMIT_EXCEEDED" and error["retryable"] is True
    assert (error["tenant_id"], error["limit"], error["current"], error["maximum"]) == (
        tenant, "max_queue_depth", 2, 2,
    )  # fmt: skip
    # A batch: each item over the limit is its own 429.
    items = [{"type": "lim.job", "args": [9], "queue": queue}]
    batch = http.post("/ojs/v1/jobs/batch", headers=headers, json={"jobs": items})
    assert batch.json()["jobs"][0]["status"] == 429, batch.text
    # A job's first start gives its place back.
    got = http.post("/ojs/v1/workers/fetch", headers=headers, json={"queues": [queue]}).json()
    assert len(got["jobs"]) == 1
    deadline = time.monotonic() + 30
    while (again := enqueue(4)).status_code == 429 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert again.status_code == 201, again.text
    shown = http.get(f"/ojs/v1/admin/tenants/{tenant}/stats").json()["limits"]
    assert shown["max_queue_depth"]["limit"] == 2 and shown["refused"] >= 2
    # The enqueue rate: a burst of its limit, then the next is refused with when to retry.
    rated = http.put(
        f"/ojs/v1/admin/tenants/{tenant}/limits",
        json={"max_queue_depth": None, "max_enqueue_rate": {"limit": 3, "period": "PT1M"}},
    )
    assert rated.status_code == 200, rated.text
    codes = [enqueue(10 + i).status_code for i in range(4)]
    assert codes == [201, 201, 201, 429], codes
    refused = enqueue(20)
    assert refused.json()["error"]["limit"] == "max_enqueue_rate"
    assert 1 <= int(refused.headers["Retry-After"]) <= 20
    # The SDK, for the tenant: refused alike, with the limit in the record's details.
    with Client(kafka_bootstrap, namespace) as client:
        sent = client.enqueue({"type": "lim.job", "args": [30], "queue": queue}, wait=True,
                              tenant=tenant)  # fmt: skip
    assert sent.error is not None and sent.error.code == "tenant_limit_exceeded"
    assert sent.record["details"]["limit"] == "max_enqueue_rate"
    # Another tenant is not held back, and one without a tenant as before.
    assert http.post("/ojs/v1/jobs", json={"type": "lim.job", "args": [1], "queue": queue},
                     headers={TENANT: f"{tenant}-other"}).status_code == 201  # fmt: skip
    assert http.post("/ojs/v1/jobs", json={"type": "lim.job", "args": [1],
                                           "queue": queue}).status_code == 201  # fmt: skip


def test_a_tenant_s_max_concurrency_holds_its_running_jobs(http: httpx.Client):
    tenant, queue = f"conc-{uuid.uuid4().hex[:6]}", f"conc-{uuid.uuid4().hex[:6]}"
    headers = {TENANT: tenant}
    put = http.put(f"/ojs/v1/admin/tenants/{tenant}/limits", json={"max_concurrency": 1})
    assert put.status_code == 200, put.text
    assert put.json()["limits"]["max_concurrency"]["limit"] == 1
    for i in range(2):
        made = http.post("/ojs/v1/jobs", headers=headers,
                         json={"type": "conc.job", "args": [i], "queue": queue})  # fmt: skip
        assert made.status_code == 201, made.text
    own = http.post("/ojs/v1/jobs", headers=headers, json={
        "type": "conc.job", "args": [9], "queue": queue,
        "rate_limit": {"key": "mine", "concurrency": 3}})  # fmt: skip
    assert own.status_code == 400 and own.json()["error"]["code"] == "unsupported_option"
    body = {"queues": [queue], "count": 2}
    got = http.post("/ojs/v1/workers/fetch", headers=headers, json=body).json()["jobs"]
    assert len(got) == 1, got
    assert http.post("/ojs/v1/workers/fetch", headers=headers, json=body).json()["jobs"] == []
    shown = http.get(f"/ojs/v1/admin/tenants/{tenant}").json()["limits"]
    assert shown["max_concurrent_jobs"] == 1
    acked = http.post("/ojs/v1/workers/ack", headers=headers, json={"job_id": got[0]["id"]})
    assert acked.status_code == 200, acked.text
    deadline, rest = time.monotonic() + 30, list[dict[str, object]]()
    while not rest and time.monotonic() < deadline:
        rest = http.post("/ojs/v1/workers/fetch", headers=headers, json=body).json()["jobs"]
        time.sleep(0.1)
    assert len(rest) == 1 and rest[0]["id"] != got[0]["id"]


def test_a_dialect_s_jobs_are_their_tenant_s_keyed_counted_and_seen_apart(http: httpx.Client):
    """A sidekiq job hash of a tenant: its own key, its tenant's places (a rescheduled
    duplicate holds one), and the other tenant's same job is not seen."""
    tenant, queue = f"dia-{uuid.uuid4().hex[:6]}", f"dia-{uuid.uuid4().hex[:6]}"
    headers = {TENANT: tenant}
    job = {"dialect": "sidekiq", "class": "Report", "queue": queue, "args": [1],
           "lock": "until_executed", "on_conflict": "reschedule"}  # fmt: skip
    theirs = http.post("/ojs/v1/jobs", json=job, headers={TENANT: f"{tenant}-other"})
    assert theirs.status_code == 201, theirs.text
    put = http.put(f"/ojs/v1/admin/tenants/{tenant}/limits", json={"max_queue_depth": 2})
    assert put.status_code == 200, put.text
    first = http.post("/ojs/v1/jobs", json=job, headers=headers)
    assert first.status_code == 201, first.text  # not a duplicate of the other tenant's
    mine = first.json()["job"]
    assert mine["meta"] == {"tenant_id": tenant} and mine["id"] != theirs.json()["job"]["id"]
    again = http.post("/ojs/v1/jobs", json=job, headers=headers)
    assert again.status_code == 200 and again.json()["job"]["id"] == mine["id"], again.text
    over = http.post("/ojs/v1/jobs", json={**job, "args": [2]}, headers=headers)
    assert over.status_code == 429, over.text
    assert over.json()["error"]["limit"] == "max_queue_depth"
    other = theirs.json()["job"]["id"]
    assert http.get(f"/ojs/v1/jobs/{other}", headers=headers).status_code == 404


def test_replay_reproduces_the_tenants_decisions(
    served: tuple[httpx.Client, str], kafka_bootstrap: str
):
    """Last in this module: the log holds tenants' homes, places, refusals and commands."""
    _, namespace = served
    replayed = gateway("replay", "--bootstrap", kafka_bootstrap, "--namespace", namespace)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert "0 different" in replayed.stdout, replayed.stdout


def test_a_tenant_s_enqueue_rate_holds_its_bound_under_a_flood(
    served: tuple[httpx.Client, str], kafka_bootstrap: str
):
    """Four callers enqueue for one tenant as fast as they can for 4 s against a limit of 20
    a second: the requests its home admitted, at the times it admitted them (its audit
    records), never number more than 2 x 20 - 1 in any second, and about 20 a second over
    the run (printed). A job's own created_at is its route's time, one hop later."""
    http, namespace = served
    tenant, queue, limit = f"rate-{uuid.uuid4().hex[:6]}", f"rate-{uuid.uuid4().hex[:6]}", 20
    put = http.put(f"/ojs/v1/admin/tenants/{tenant}/limits",
                   json={"max_enqueue_rate": {"limit": limit, "period": "PT1S"}})  # fmt: skip
    assert put.status_code == 200, put.text
    made = refused = 0

    def flood(n: int) -> tuple[int, int]:
        made, no = 0, 0
        with httpx.Client(base_url=str(http.base_url), timeout=30) as own:
            until = time.monotonic() + 4
            while time.monotonic() < until:
                job = {"type": "flood.job", "args": [n], "queue": queue}
                answer = own.post("/ojs/v1/jobs", headers={TENANT: tenant}, json=job)
                if answer.status_code == 201:
                    made += 1
                else:
                    assert answer.status_code == 429, answer.text
                    no += 1
        return made, no

    with ThreadPoolExecutor(4) as pool:
        for yes, no in pool.map(flood, range(4)):
            made += yes
            refused += no
    decisions = catalogue.load(namespace=namespace).name("decisions")
    reader = Reader(kafka_bootstrap, [decisions])
    try:
        reader.settle()
        values = [r["value"] for r in reader.records.get(decisions, [])]
        told = [(v.get("what") or {}, v.get("at")) for v in values if isinstance(v, dict)]
    finally:
        reader.close()
    admitted = sorted(
        parse_rfc3339(str(at)) or 0 for what, at in told
        if isinstance(what.get("tenant"), dict) and what["tenant"].get("tenant") == tenant
        and "slot" in what["tenant"]
    )  # fmt: skip
    assert len(admitted) == made, (len(admitted), made)  # each job made was admitted once
    most = max(sum(1 for t in admitted[i:] if t < start + 1000)
               for i, start in enumerate(admitted))  # fmt: skip
    span_s = (admitted[-1] - admitted[0]) / 1000
    print(
        f"tenant enqueue rate {limit}/s: {len(admitted)} admitted, {refused} refused, most in "
        f"any 1 s: {most}, {len(admitted) / max(span_s, 0.001):.1f}/s over {span_s:.2f} s"
    )
    assert most <= 2 * limit - 1 and refused > 0
