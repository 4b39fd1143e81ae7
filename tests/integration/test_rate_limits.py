"""Rate limits against the real broker: many jobs of one rate key limited to 5 starts a
second and 2 at once, workers fetching and acking over HTTP through two serve processes
(two views, neither knowing the other's claims until it reads them), and a worker that
claims every job straight through the SDK at the jobs' routes (sent on to the key's home).
The home's decision records never grant a sixth start within a second of permits used, nor
hold more than two permits; the jobs' own records never show more than two running; every
job completes once."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from gateway import Client
from gateway.core.times import parse_rfc3339
from gateway.http.binding import HttpSettings
from tests.integration.harness import Processor, Reader, apply_topics
from tests.integration.test_concurrency import Workers, state, wait_for
from tests.integration.test_http import Served, running
from tests.integration.workers import Claimer

pytestmark = pytest.mark.kafka
JOBS = 40
RATE, CONCURRENCY = 5, 2


def test_a_rate_key_never_starts_more_than_its_limits_whoever_fetches(
    kafka_bootstrap: str, namespace: str, tmp_path: Any
) -> None:
    cat = apply_topics(kafka_bootstrap, namespace)
    runtime = Processor(kafka_bootstrap, namespace, tmp_path, "a")
    runtime.start()
    queue, key = f"q{uuid.uuid4().hex[:8]}", f"rl-{uuid.uuid4().hex[:8]}"
    limit = {"key": key, "concurrency": CONCURRENCY,
             "rate": {"limit": RATE, "period": "PT1S"}, "on_limit": "wait"}  # fmt: skip
    settings = HttpSettings(kafka_bootstrap, namespace, decision_timeout=20)
    ids: list[str] = []
    try:
        with (
            Served(settings) as served,
            Served(settings) as other,
            httpx.Client(base_url=served.url, timeout=120) as http,
        ):
            for n in range(JOBS):
                body = {"type": "mail.send", "args": [n], "queue": queue, "rate_limit": limit}
                posted = http.post("/ojs/v1/jobs", json=body)
                assert posted.status_code == 201, posted.text
                ids.append(posted.json()["job"]["id"])
            bad = http.post("/ojs/v1/jobs", json={**body, "rate_limit": {"key": key}})
            assert bad.status_code == 400 and "rate_limit" in bad.json()["error"]["message"]
            client = Client(kafka_bootstrap, namespace)
            try:
                with (
                    Claimer(client, ids, "rate_limited", "straight") as straight,
                    Workers([served.url, other.url], queue),
                ):
                    wait_for(lambda: all(state(http, i) == "completed" for i in ids), 120)
            finally:
                client.close()
            shown = http.get(f"/ojs/v1/rate-limits/{key}")
            assert shown.status_code == 200 and shown.json()["key"] == key
            # RL-006: the key's events, from its states as its home published them.
            asked = {"types": "rate_limit.exceeded,rate_limit.released", "limit": "1000"}
            feed = http.get("/ojs/v1/events", params=asked).json()["events"]
            mine = [e for e in feed if e["data"]["key"] == key]
            assert {e["type"] for e in mine} == {"rate_limit.exceeded", "rate_limit.released"}
            released = {e["data"]["job_id"] for e in mine if e["type"] == "rate_limit.released"}
            assert set(ids) <= released
            overrides_hold(http, key, queue, limit)
            print(f"the SDK worker ran {straight.done} jobs, refused {straight.refused} times")
    finally:
        runtime.stop()

    reader = Reader(kafka_bootstrap, [cat.name("decisions"), cat.name("job_states")])
    try:
        reader.settle(quiet=3)
        audit = [r["value"] for r in reader.records.get(cat.name("decisions"), [])]
        states = [r["value"] for r in reader.records.get(cat.name("job_states"), [])]
    finally:
        reader.close()
    home = [r for r in audit if r.get("kind") == "rate"
            and (r.get("what") or {}).get("rate", {}).get("key") == key]  # fmt: skip
    told = [r["what"]["rate"] for r in home]
    unused = {t["released"] for t in told if t.get("unused")}
    starts = sorted(t["permit_at"] for t in told
                    if t.get("outcome") == "granted" and t["permit"] not in unused)  # fmt: skip
    refused = [t for t in told if t.get("outcome") == "refused"]
    print(f"{len(starts)} starts used, {len(unused)} given back unused, {len(refused)} refused")
    assert len(starts) >= JOBS and refused
    for i in range(len(starts) - RATE):
        assert starts[i + RATE] - starts[i] >= 1000, "six starts within a second"
    assert max(t.get("held", 0) for t in told) <= CONCURRENCY  # overrides hold none
    # By the jobs' own records: one attempt each, never more than two running at once.
    final = {s["id"]: s for s in states if isinstance(s, dict) and s.get("id") in set(ids)}
    assert {s["state"] for s in final.values()} == {"completed"} and len(final) == JOBS
    assert all(s["attempt"] == 1 and "rate_permit" not in s for s in final.values())
    spans = sorted(
        (parse_rfc3339(s[stamp]), delta)
        for s in final.values()
        for stamp, delta in (("started_at", 1), ("completed_at", -1))
    )  # an end sorts before a start of the same millisecond
    at_once = 0
    for _, delta in spans:
        at_once += delta
        assert at_once <= CONCURRENCY


def overrides_hold(http: httpx.Client, key: str, queue: str, limit: dict[str, Any]) -> None:
    """An operator pauses the key (concurrency 0): its waiting job is not handed out; the
    Admin UI's rate override replaces it; cleared, the job's own limits apply."""
    base = f"/ojs/v1/rate-limits/{key}"
    bad = http.put(base, json={"concurrency": 0, "until": "x"})
    assert bad.status_code == 400 and "until" in bad.json()["error"]["message"]
    paused = http.put(base, json={"concurrency": 0})
    assert paused.status_code == 200, paused.text
    assert paused.json()["override"]["concurrency"] == 0
    body = {"type": "mail.send", "args": ["late"], "queue": queue, "rate_limit": limit}
    late = http.post("/ojs/v1/jobs", json=body).json()["job"]["id"]
    wait_for(lambda: http.get(base).json()["waiting"] == 1, 30)
    fetch = {"queues": [queue], "count": 1, "worker_id": "op"}
    for _ in range(3):
        assert http.post("/ojs/v1/workers/fetch", json=fetch).json()["jobs"] == []
    ui = http.put(base, json={"limit": 1, "period": "10s"})
    assert ui.status_code == 200 and ui.json()["override"]["limit"] == 1
    assert ui.json()["rate"] == {**ui.json()["rate"], "limit": 1, "period": "PT10S"}
    assert ui.json()["period"] == "10s"  # the Admin UI's short form, as its dialog offers it
    wait_for(lambda: http.get(base).json()["override"] is not None, 30)
    wait_for(lambda: bool(http.post("/ojs/v1/workers/fetch", json=fetch).json()["jobs"]), 30)
    assert state(http, late) == "active"
    cleared = http.delete(f"{base}/override")
    assert cleared.status_code == 200 and cleared.json()["override"] is None
    assert cleared.json()["limit"] == RATE


def test_on_limit_reschedules_or_drops_what_a_full_key_refuses(
    kafka_bootstrap: str, tmp_path: Any
) -> None:
    with running(kafka_bootstrap, tmp_path) as (_, _cat, _settings, _served, http):
        for on_limit, moved in (("reschedule", "scheduled"), ("drop", "discarded")):
            queue, key = f"q{uuid.uuid4().hex[:8]}", f"ol-{uuid.uuid4().hex[:8]}"
            limit = {"key": key, "concurrency": 1, "on_limit": on_limit}
            ids = [
                http.post("/ojs/v1/jobs", json={"type": "ol.job", "args": [n], "queue": queue,
                                                "rate_limit": limit}).json()["job"]["id"]
                for n in range(2)
            ]  # fmt: skip
            fetch = {"queues": [queue], "count": 2, "worker_id": "w"}
            got = http.post("/ojs/v1/workers/fetch", json=fetch).json()["jobs"]
            assert len(got) == 1, got
            other = next(i for i in ids if i != got[0]["id"])

            # The key is full: the next fetch proposes the other once, and its claim,
            # refused, moves it.
            def settled(fetch: Any = fetch, other: str = other, moved: str = moved) -> bool:
                empty = http.post("/ojs/v1/workers/fetch", json=fetch).json()["jobs"] == []
                return empty and state(http, other) == moved

            wait_for(settled, 30)
            job = http.get(f"/ojs/v1/jobs/{other}").json()["job"]
            if moved == "discarded":
                assert job["error"]["type"] == "rate_limited"
            else:
                at, started = (
                    parse_rfc3339(job["scheduled_at"]),
                    parse_rfc3339(got[0]["started_at"]),
                )
                assert at is not None and started is not None and at > started


def test_a_queue_s_rate_limit_holds_every_job_of_it(kafka_bootstrap: str, tmp_path: Any) -> None:
    with running(kafka_bootstrap, tmp_path) as (_, _cat, _settings, _served, http):
        queue = f"q{uuid.uuid4().hex[:8]}"
        bad = http.put(f"/ojs/v1/admin/queues/{queue}/rate-limit", json={"concurency": 1})
        assert bad.status_code == 400 and "concurency" in bad.json()["error"]["message"]
        put = http.put(f"/ojs/v1/admin/queues/{queue}/rate-limit", json={"concurrency": 1})
        assert put.status_code == 200, put.text
        assert put.json()["rate_limit"]["concurrency"] == 1

        def shown() -> bool:  # the queue's key, listed with its limits before any claim
            listed = http.get("/ojs/v1/rate-limits", params={"per_page": "1000"}).json()
            mine = [i for i in listed["items"] if i["key"] == f"queue:{queue}"]
            return bool(mine) and mine[0]["concurrency"]["limit"] == 1

        wait_for(shown, 30)
        own = {"key": f"own-{queue}", "concurrency": 5}
        for n, limit in enumerate([own, None, own]):
            body: dict[str, Any] = {"type": "q.job", "args": [n], "queue": queue}
            if limit is not None:
                body["rate_limit"] = limit
            assert http.post("/ojs/v1/jobs", json=body).status_code == 201

        def configured() -> Any:  # the admin API's shape, as the worker asked has read it
            return http.get(f"/ojs/v1/admin/queues/{queue}").json().get("configuration")

        wait_for(lambda: configured() == {"concurrency": 1}, 30)
        fetch = {"queues": [queue], "count": 3, "worker_id": "w"}
        got = http.post("/ojs/v1/workers/fetch", json=fetch).json()["jobs"]
        assert len(got) == 1, got  # the queue's limit, whatever the jobs' own say
        assert http.post("/ojs/v1/workers/fetch", json=fetch).json()["jobs"] == []
        hourly = {"concurrency": 1, "rate": {"limit": 100, "period": "PT1H"}}
        rated = http.put(f"/ojs/v1/admin/queues/{queue}/rate-limit", json=hourly)
        assert rated.status_code == 200, rated.text
        wait_for(lambda: configured() == {"concurrency": 1, "rate_limit": hourly["rate"]}, 30)
        cleared = http.delete(f"/ojs/v1/admin/queues/{queue}/rate-limit")
        assert cleared.status_code == 200 and cleared.json()["rate_limit"] is None

        def another() -> bool:
            return len(http.post("/ojs/v1/workers/fetch", json=fetch).json()["jobs"]) >= 1

        wait_for(another, 30)
