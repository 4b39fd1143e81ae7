"""The OJS HTTP binding against a real broker, a real `gateway process` and a real uvicorn."""

from __future__ import annotations

import asyncio
import socket
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import uvicorn

from gateway.auth import credentials, keys
from gateway.catalogue import Catalogue
from gateway.core.times import format_rfc3339, parse_rfc3339
from gateway.http.app import HttpSettings, create_app
from tests.integration.harness import Processor, apply_topics, fingerprint_of, producer, send

pytestmark = pytest.mark.kafka

MEDIA_TYPE = "application/openjobspec+json"


class Served:
    """The app under a real uvicorn, in a thread, on a free loopback port."""

    def __init__(self, settings: HttpSettings) -> None:
        if settings.view_dir is None:  # each server its own view, as two processes have
            settings = replace(settings, view_dir=Path(tempfile.mkdtemp(prefix="view-")))
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self.app = create_app(settings)
        config = uvicorn.Config(self.app, host="127.0.0.1", port=port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> Served:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "uvicorn did not start"
            time.sleep(0.05)
        return self

    def app_state(self) -> Any:
        """The running app's binding (its view, its client)."""
        return self.app.state.binding

    def __exit__(self, *_: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


@dataclass
class Stack:
    bootstrap: str
    namespace: str
    cat: Catalogue
    url: str
    http: httpx.Client


@contextmanager
def running(
    kafka_bootstrap: str, workdir: Path
) -> Iterator[tuple[str, Catalogue, HttpSettings, Served, httpx.Client]]:
    """A processor and one served binding on a fresh namespace, warmed up: its namespace,
    catalogue, settings, server and a client of it."""
    namespace = f"t{uuid.uuid4().hex[:10]}"
    cat = apply_topics(kafka_bootstrap, namespace)
    proc = Processor(kafka_bootstrap, namespace, workdir, "1", "--commit-interval", "0.02")
    proc.start()
    settings = HttpSettings(kafka_bootstrap, namespace, decision_timeout=60)
    try:
        with Served(settings) as served, httpx.Client(base_url=served.url, timeout=90) as http:
            # The processor takes its partitions a few seconds after it says it is ready.
            warm = http.post("/ojs/v1/jobs", json={"type": "warm.up", "args": []})
            assert warm.status_code == 201, warm.text
            yield namespace, cat, settings, served, http
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running(kafka_bootstrap, tmp_path_factory.mktemp("http")) as (ns, cat, _, served, http):
        yield Stack(kafka_bootstrap, ns, cat, served.url, http)


def job(on_conflict: str = "reject", **args: Any) -> dict[str, Any]:
    return {
        "type": "email.send",
        "args": args or {"user_id": uuid.uuid4().hex},
        "unique": {"keys": ["type", "args"], "on_conflict": on_conflict},
    }


def assert_ojs_headers(response: httpx.Response) -> None:
    assert response.headers["content-type"] == MEDIA_TYPE
    assert response.headers["ojs-version"] == "1.0"
    assert response.headers["x-request-id"]


def test_post_answers_201_with_location_and_a_get_right_after_finds_it(stack: Stack):
    request_id = uuid.uuid4().hex
    created = stack.http.post("/ojs/v1/jobs", json=job(), headers={"X-Request-Id": request_id})
    assert created.status_code == 201, created.text
    assert_ojs_headers(created)
    assert created.headers["x-request-id"] == request_id
    body = created.json()["job"]
    assert created.headers["location"] == f"/ojs/v1/jobs/{body['id']}"
    assert body["state"] == "available" and body["request_id"] == request_id
    found = stack.http.get(created.headers["location"])
    assert found.status_code == 200
    assert_ojs_headers(found)
    assert found.json()["job"]["id"] == body["id"]
    assert found.json()["job"]["state"] == "available"


def test_reject_answers_409_naming_the_existing_job(stack: Stack):
    first = job()
    accepted = stack.http.post("/ojs/v1/jobs", json=first).json()["job"]
    rejected = stack.http.post("/ojs/v1/jobs", json=first, headers={"X-Request-Id": "r-409"})
    assert rejected.status_code == 409
    assert_ojs_headers(rejected)
    error = rejected.json()["error"]
    assert error["code"] == "duplicate" and error["retryable"] is False
    assert error["message"] and error["request_id"] == "r-409"
    assert error["details"] == {
        "existing_job_id": accepted["id"],
        "existing_job_state": "available",
        "unique_key": fingerprint_of(first),
    }


def test_ignore_answers_200_with_the_existing_job_deduplicated(stack: Stack):
    first = job("ignore")
    accepted = stack.http.post("/ojs/v1/jobs", json=first).json()["job"]
    ignored = stack.http.post("/ojs/v1/jobs", json=first)
    assert ignored.status_code == 200
    assert_ojs_headers(ignored)
    assert ignored.json()["deduplicated"] is True
    assert ignored.json()["job"]["id"] == accepted["id"]
    assert ignored.json()["job"]["state"] == "available"


def test_replace_answers_201_with_the_new_job_and_the_old_one_is_cancelled(stack: Stack):
    first = job("replace")
    old = stack.http.post("/ojs/v1/jobs", json=first).json()["job"]
    replaced = stack.http.post("/ojs/v1/jobs", json=first)
    assert replaced.status_code == 201
    new = replaced.json()["job"]
    assert new["id"] != old["id"] and replaced.headers["location"].endswith(new["id"])
    assert stack.http.get(f"/ojs/v1/jobs/{old['id']}").json()["job"]["state"] == "cancelled"


def test_the_http_form_and_application_json_are_accepted(stack: Stack):
    http_form = {
        "type": "email.send",
        "args": [{"user_id": uuid.uuid4().hex}],
        "options": {"queue": "mail", "unique": {"key": ["type", "queue", "args"]}},
    }
    created = stack.http.post(
        "/ojs/v1/jobs",
        content=orjson.dumps(http_form),
        headers={"Content-Type": "application/json"},
    )
    assert created.status_code == 201, created.text
    assert created.json()["job"]["queue"] == "mail"
    again = stack.http.post("/ojs/v1/jobs", json=http_form, headers={"Content-Type": MEDIA_TYPE})
    assert again.status_code == 409


def test_bad_requests_answer_400_or_415_with_the_envelope(stack: Stack):
    bad_policy = stack.http.post(
        "/ojs/v1/jobs", json={"type": "t", "args": [], "unique": {"keys": ["meta"]}}
    )
    assert bad_policy.status_code == 400
    assert_ojs_headers(bad_policy)
    error = bad_policy.json()["error"]
    assert error["code"] == "invalid_request" and "meta_keys" in error["message"]
    assert error["request_id"] == bad_policy.headers["x-request-id"]

    malformed = stack.http.post(
        "/ojs/v1/jobs", content=b'{"type": ', headers={"Content-Type": "application/json"}
    )
    assert malformed.status_code == 400
    assert malformed.json()["error"]["code"] == "invalid_request"

    text = stack.http.post("/ojs/v1/jobs", content=b"{}", headers={"Content-Type": "text/plain"})
    assert text.status_code == 415 and text.json()["error"]["code"] == "unsupported_media_type"


def test_unknown_jobs_and_routes_answer_404_with_the_envelope(stack: Stack):
    missing = stack.http.get(f"/ojs/v1/jobs/{uuid.uuid4()}")
    assert missing.status_code == 404
    assert_ojs_headers(missing)
    assert missing.json()["error"]["code"] == "not_found"
    nowhere = stack.http.get("/ojs/v1/nowhere")
    assert nowhere.status_code == 404 and nowhere.json()["error"]["code"] == "not_found"


def test_fifty_parallel_posts_of_one_key_under_reject_make_one_job(stack: Stack):
    same = job()

    async def fire() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=stack.url, timeout=90) as http:
            return await asyncio.gather(*(http.post("/ojs/v1/jobs", json=same) for _ in range(50)))

    responses = asyncio.run(fire())
    assert Counter(r.status_code for r in responses) == {201: 1, 409: 49}
    [created] = [r.json()["job"]["id"] for r in responses if r.status_code == 201]
    existing = {
        r.json()["error"]["details"]["existing_job_id"] for r in responses if r.status_code == 409
    }
    assert existing == {created}
    assert len({r.headers["x-request-id"] for r in responses}) == 50


def test_a_batch_is_validated_whole_then_answers_201_with_jobs_and_count(stack: Stack):
    first, ignored = job(), job("ignore")
    stack.http.post("/ojs/v1/jobs", json=ignored)
    bad = {"type": "t", "args": [], "unique": {"keys": ["meta"]}}
    refused = stack.http.post("/ojs/v1/jobs/batch", json={"jobs": [job(), bad]})
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["details"]["errors"][0]["index"] == 1
    assert "nothing was enqueued" in refused.json()["error"]["message"]

    response = stack.http.post(
        "/ojs/v1/jobs/batch", json={"jobs": [first, first, ignored]},
        headers={"X-Request-Id": "batch-1"},
    )  # fmt: skip
    assert response.status_code == 201, response.text
    assert_ojs_headers(response)
    body = response.json()
    assert body["count"] == 3
    new, dup, same = body["jobs"]
    assert new["deduplicated"] is False and new["state"] == "available"
    assert dup["deduplicated"] is True and dup["existing_job_id"] == new["id"]
    assert dup["error"]["code"] == "duplicate" and dup["status"] == 409
    assert not {"id", "type", "state"} & set(dup), dup  # a refused item is no job
    assert same["deduplicated"] is True
    assert stack.http.get(f"/ojs/v1/jobs/{new['id']}").status_code == 200

    not_a_batch = stack.http.post("/ojs/v1/jobs/batch", json=[first])
    assert not_a_batch.status_code == 400


def test_job_events_move_the_state_a_get_shows(stack: Stack):
    created = stack.http.post("/ojs/v1/jobs", json=job()).json()["job"]
    prod = producer(stack.bootstrap)
    event = {"job_id": created["id"], "unique_key": created["unique_key"], "type": "job.started"}
    send(prod, stack.cat.name("job_events"), event, created["unique_key"])
    prod.flush()
    deadline = time.monotonic() + 30
    state = None
    while time.monotonic() < deadline and state != "active":
        state = stack.http.get(f"/ojs/v1/jobs/{created['id']}").json()["job"]["state"]
        time.sleep(0.1)
    assert state == "active"


def test_post_get_batch_fetch_and_the_sdk_show_one_retry_shape(stack: Stack):
    """A job's `retry` is the OJS retry object wherever it is shown; `jobs` keeps the
    stored form (milliseconds, the strategy named)."""
    from gateway import Client

    queue = f"retry-{uuid.uuid4().hex[:8]}"
    retry = {"max_attempts": 4, "initial_interval": "PT2S", "backoff": "linear"}
    one = {"type": "email.send", "args": [uuid.uuid4().hex], "queue": queue, "retry": retry}
    want = {
        "max_attempts": 4, "initial_interval": "PT2S", "backoff_coefficient": 2.0,
        "max_interval": "PT5M", "jitter": True, "non_retryable_errors": [], "backoff": "linear",
    }  # fmt: skip
    posted = stack.http.post("/ojs/v1/jobs", json=one)
    assert posted.status_code == 201, posted.text
    job_id = posted.json()["job"]["id"]
    assert posted.json()["job"]["retry"] == want
    assert stack.http.get(f"/ojs/v1/jobs/{job_id}").json()["job"]["retry"] == want
    other = {**one, "args": [uuid.uuid4().hex]}
    batch = stack.http.post("/ojs/v1/jobs/batch", json={"jobs": [other]})
    assert batch.json()["jobs"][0]["retry"] == want
    with Client(stack.bootstrap, stack.namespace) as client:
        result = client.enqueue({**one, "args": [uuid.uuid4().hex]}, wait=True, timeout=60)
    assert result.job is not None and result.job["retry"] == want
    stored = result.record["job"]["retry"]
    assert stored["initial_interval_ms"] == 2000 and stored["backoff"] == "linear"
    # The SDK's job reaches this serve's view with its committed record.
    jobs: list[dict[str, Any]] = []
    deadline = time.monotonic() + 30
    while len(jobs) < 3 and time.monotonic() < deadline:
        fetched = stack.http.post("/ojs/v1/workers/fetch", json={"queues": [queue], "count": 3})
        jobs += fetched.json()["jobs"]
        time.sleep(0.05)
    assert len(jobs) == 3 and all(j["retry"] == want for j in jobs), jobs


def test_manifest_and_health(stack: Stack):
    manifest = stack.http.get("/ojs/manifest")
    assert manifest.status_code == 200
    assert_ojs_headers(manifest)
    assert manifest.json()["capabilities"]["unique_jobs"] is True
    assert manifest.json()["unique_job_strength"] == "strong"
    healthy = stack.http.get("/ojs/v1/health")
    assert healthy.status_code == 200 and healthy.json() == {"status": "ok"}
    assert_ojs_headers(healthy)


def test_a_key_is_required_with_a_credentials_file_and_the_body_is_capped(
    stack: Stack, tmp_path: Path
):
    path, key = tmp_path / "credentials.toml", keys.new_key()
    admin = credentials.principal("ops", "admin", None, ["*"])
    credentials.save(path, credentials.with_key((), "ops", key, 0, new=admin))
    settings = HttpSettings(stack.bootstrap, stack.namespace, credentials=path, max_body_bytes=200)
    with Served(settings) as served, httpx.Client(base_url=served.url, timeout=60) as http:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": key}):
            refused = http.post("/ojs/v1/jobs", json=job(), headers=headers)
            assert refused.status_code == 401
            assert_ojs_headers(refused)
            assert refused.json()["error"]["code"] == "unauthenticated"
        assert http.get(f"/ojs/v1/jobs/{uuid.uuid4()}").status_code == 401
        auth = {"Authorization": f"Bearer {key}"}
        created = http.post("/ojs/v1/jobs", json=job(), headers=auth)
        assert created.status_code == 201, created.text
        big = job(blob="x" * 300)
        too_large = http.post("/ojs/v1/jobs", json=big, headers=auth)
        assert too_large.status_code == 413
        assert_ojs_headers(too_large)
        assert too_large.json()["error"]["code"] == "payload_too_large"


def test_without_a_processor_health_is_503_and_a_post_times_out_with_504(
    kafka_bootstrap, namespace
):
    apply_topics(kafka_bootstrap, namespace)
    settings = HttpSettings(kafka_bootstrap, namespace, decision_timeout=3)
    with Served(settings) as served, httpx.Client(base_url=served.url, timeout=60) as http:
        # Until its view is live, health names the view; then what it waits for.
        assert served.app_state().follower.live.wait(60)
        unhealthy = http.get("/ojs/v1/health")
        assert unhealthy.status_code == 503
        assert_ojs_headers(unhealthy)
        assert unhealthy.json()["status"] == "starting"
        assert "no processor is consuming" in unhealthy.json()["reason"]
        live = http.get("/ojs/v1/health/live")
        assert live.status_code == 200 and live.json() == {"status": "ok"}
        timed_out = http.post("/ojs/v1/jobs", json=job())
        assert timed_out.status_code == 504
        assert_ojs_headers(timed_out)
        assert timed_out.json()["error"] == {
            **timed_out.json()["error"],
            "code": "timeout",
            "retryable": True,
        }


def test_an_event_before_its_job_is_ignored_and_the_job_is_handed_out_once(stack: Stack):
    from gateway.core.jobs import uuid7
    from gateway.wire import JOB_EVENT, KIND_HEADER

    queue = f"early-{uuid.uuid4().hex[:8]}"
    early = {**job(), "queue": queue}
    key = fingerprint_of(early)
    job_id = uuid7(int(time.time() * 1000), key, b"test")
    # The worker's start reaches the key's log before the job's own request does.
    prod = producer(stack.bootstrap)
    event = {"job_id": job_id, "unique_key": key, "type": "job.started"}
    send(prod, stack.cat.name("requests"), event, key, {KIND_HEADER: JOB_EVENT.decode()})
    prod.flush()
    created = stack.http.post("/ojs/v1/jobs", json={**early, "id": job_id})
    assert created.status_code == 201, created.text
    assert stack.http.get(f"/ojs/v1/jobs/{job_id}").json()["job"]["state"] == "available"
    fetched = stack.http.post("/ojs/v1/workers/fetch", json={"queues": [queue], "count": 5})
    assert [j["id"] for j in fetched.json()["jobs"]] == [job_id]
    again = stack.http.post("/ojs/v1/workers/fetch", json={"queues": [queue], "count": 5})
    assert again.json()["jobs"] == []


def test_one_client_id_under_two_keys_racing_through_http_and_the_sdk_is_one_job(stack: Stack):
    """200 times, the same client id under two unique keys, one over HTTP and one through the
    SDK at the same moment: exactly one becomes a job, the other is a 409 or a rejection."""
    from gateway import Client

    tag = uuid.uuid4().hex
    ids = [str(uuid.UUID(int=(0x019C << 112) | (7 << 76) | (2 << 62) | i)) for i in range(200)]

    def job(side: str, i: int) -> dict[str, Any]:
        return {"type": "race.job", "args": [side, tag, i], "id": ids[i],
                "unique": {"keys": ["type", "args"]}}  # fmt: skip

    async def over_http() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=stack.url, timeout=90) as http:
            return list(
                await asyncio.gather(
                    *(http.post("/ojs/v1/jobs", json=job("h", i)) for i in range(200))
                )
            )

    sdk_results: list[Any] = []
    with Client(stack.bootstrap, stack.namespace) as client:
        thread = threading.Thread(
            target=lambda: sdk_results.extend(
                client.enqueue_many([job("s", i) for i in range(200)], wait=True, timeout=120)
            )
        )
        thread.start()
        responses = asyncio.run(over_http())
        thread.join()
    for i in range(200):
        http_won = responses[i].status_code == 201
        sdk_won = str(sdk_results[i].outcome) == "accepted"
        assert http_won != sdk_won, (ids[i], responses[i].text, sdk_results[i])
        if not http_won:
            assert responses[i].status_code == 409, responses[i].text


def test_a_job_past_its_expires_at_is_never_handed_out_but_discarded(stack: Stack):
    queue = f"ttl-{uuid.uuid4().hex[:8]}"
    soon = format_rfc3339(time.time_ns() // 1_000_000 + 2_000)
    posted = stack.http.post(
        "/ojs/v1/jobs",
        json={"type": "ttl.soon", "args": [], "options": {"queue": queue, "expires_at": soon}},
    )
    assert posted.status_code == 201 and posted.json()["job"]["expires_at"] == soon
    later = stack.http.post(
        "/ojs/v1/jobs",
        json={
            "type": "ttl.later",
            "args": [],
            "queue": queue,
            "expires_at": "2099-12-31T23:59:59Z",
        },
    )
    assert later.status_code == 201
    time.sleep(3)
    fetched = stack.http.post("/ojs/v1/workers/fetch", json={"queues": [queue], "count": 5})
    assert [j["id"] for j in fetched.json()["jobs"]] == [later.json()["job"]["id"]]
    # A tick past expires_at discards it: twice a second, however loaded the machine.
    deadline = time.monotonic() + 30
    while (job := stack.http.get(f"/ojs/v1/jobs/{posted.json()['job']['id']}").json()["job"])[
        "state"
    ] != "discarded":
        assert time.monotonic() < deadline, job
        time.sleep(0.2)
    assert job["error"]["type"] == "expired" and job["expires_at"] == soon
    bad = stack.http.post("/ojs/v1/jobs", json={"type": "t.bad", "args": [], "expires_at": "soon"})
    assert bad.json()["error"]["code"] == "invalid_request"
    # Relative: the decision makes an instant of it, and shows that.
    relative = stack.http.post(
        "/ojs/v1/jobs", json={"type": "ttl.relative", "args": [], "expires_at": "+PT2S"}
    ).json()["job"]
    made = parse_rfc3339(relative["expires_at"])
    assert made == (parse_rfc3339(relative["created_at"]) or 0) + 2_000


def test_queue_stats_count_what_this_client_just_did(stack: Stack):
    queue = f"stats-{uuid.uuid4().hex[:8]}"
    for n in range(3):
        posted = stack.http.post(
            "/ojs/v1/jobs", json={"type": "stats.job", "args": [n], "options": {"queue": queue}}
        )
        assert posted.status_code == 201

    def stats() -> dict[str, Any]:
        answer = stack.http.get(f"/ojs/v1/queues/{queue}/stats")
        assert answer.status_code == 200, answer.text
        return answer.json()

    first = stats()
    assert first["queue"]["name"] == queue
    assert (first["queue"]["available"], first["queue"]["active"]) == (3, 0)
    assert first["status"] == "active" and first["stats"]["available"] == 3
    fetched = stack.http.post("/ojs/v1/workers/fetch", json={"queues": [queue]}).json()["jobs"]
    assert (stats()["queue"]["available"], stats()["queue"]["active"]) == (2, 1)
    acked = stack.http.post("/ojs/v1/workers/ack", json={"job_id": fetched[0]["id"]})
    assert acked.status_code == 200
    after = stats()
    assert (after["queue"]["active"], after["queue"]["completed"]) == (0, 1)
    assert after["stats"]["completed_last_hour"] == 1
    assert (
        after["stats"]["avg_duration_ms"] is not None and after["stats"]["avg_wait_ms"] is not None
    )
    assert stack.http.get("/ojs/v1/queues/never-seen-queue/stats").status_code == 404
    assert stack.http.get("/ojs/v1/queues/Bad%20Name/stats").status_code == 400
