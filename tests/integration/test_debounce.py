"""Debounce under kill -9: a burst sent through the SDK, the processor killed mid-burst
(inside an open transaction), the rest of the burst sent while it is down, then restarted.
The committed log holds exactly one job for the burst, at the last request's time plus the
delay, with the newest payload; the answers given before the kill (early answers, from a
transaction the kill aborted) are the ones committed by the restarted processor."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import httpx
import pytest

from gateway import Client
from gateway.core import Outcome
from gateway.core.times import format_rfc3339, parse_rfc3339
from tests.integration.harness import Processor, Reader, apply_topics, decided
from tests.integration.test_http_admin import eventually
from tests.support import free_port_block

pytestmark = pytest.mark.kafka
DELAY_MS = 30_000


def burst(n: int, doc: str) -> dict[str, Any]:
    return {
        "type": "search.reindex", "args": [{"doc": doc, "rev": n}], "meta": {"rev": n},
        "unique": {"keys": ["type", "args"], "args_keys": ["doc"],
                   "debounce": {"delay": "PT30S", "max_wait": "PT10M", "replace": True}},
    }  # fmt: skip


def test_a_burst_cut_by_kill_9_is_one_job_at_the_right_time_with_the_newest_payload(
    kafka_bootstrap: str, namespace: str, tmp_path: Any
) -> None:
    cat = apply_topics(kafka_bootstrap, namespace)
    port = free_port_block()
    # A long transaction: the kill lands inside it, so what was decided before is aborted
    # and decided again by the restarted processor from the committed state.
    proc = Processor(kafka_bootstrap, namespace, tmp_path, "1", "--metrics-port", str(port),
                     "--commit-interval", "60").start()  # fmt: skip
    client = Client(kafka_bootstrap, namespace)
    doc = uuid.uuid4().hex
    try:
        # The processor takes its partitions a few seconds after it says it is ready.
        client.enqueue({"type": "warm.up", "args": []}, wait=True, timeout=90)
        early = [client.enqueue(burst(n, doc), wait=True, timeout=90) for n in range(5)]
        assert [r.outcome for r in early] == [Outcome.ACCEPTED] + [Outcome.UPDATED] * 4
        assert len({r.job_id for r in early}) == 1
        eventually(lambda: decided(port), lambda n: n >= 6, seconds=30)
        proc.kill()  # mid-burst, its transaction open
        for n in range(5, 10):  # the rest of the burst, while no processor runs
            client.enqueue(burst(n, doc), wait=False)
        proc.start()
        last = client.enqueue(burst(10, doc), wait=True, timeout=120)
        assert last.outcome is Outcome.UPDATED and last.job_id == early[0].job_id
        # The restarted processor decided the whole burst: the first five again, since the
        # kill aborted the transaction that held them (their records never committed).
        redecided = decided(port)
        print(f"restarted, the processor decided {redecided:g} requests")
    finally:
        client.close()
        proc.stop()

    reader = Reader(kafka_bootstrap, [cat.name("decisions"), cat.name("job_states")])
    try:
        reader.poll_until(cat.name("decisions"), 11, timeout=60)
        reader.settle(quiet=3)
        mine = [r["value"] for r in reader.records.get(cat.name("decisions"), [])
                if isinstance(r["value"], dict) and r["value"].get("kind") == "request"
                and r["value"].get("unique_key") == early[0].unique_key]  # fmt: skip
        states = [
            r["value"]
            for r in reader.records.get(cat.name("job_states"), [])
            if isinstance(r["value"], dict) and r["value"].get("id") == early[0].job_id
        ]
    finally:
        reader.close()
    # Every request of the burst decided once, committed: one accepted, ten updates.
    assert len(mine) == 11, [m["outcome"] for m in mine]
    assert [m["outcome"] for m in mine] == ["accepted"] + ["updated"] * 10
    assert {m["job_id"] for m in mine} == {early[0].job_id}
    # The answers given before the kill are the committed ones (the same decisions again).
    for answer, committed in zip(early, mine[:5], strict=True):
        assert answer.record.get("debounce") == committed.get("debounce")
        assert answer.record["decided_at"] == committed["decided_at"]
    # Exactly one job, at the last request's time plus the delay, with the newest payload.
    final = states[-1]
    run_at = parse_rfc3339(mine[-1]["decided_at"]) + DELAY_MS  # type: ignore[operator]
    assert final["scheduled_at"] == format_rfc3339(run_at) == mine[-1]["debounce"]["run_at"]
    assert final["args"] == [{"doc": doc, "rev": 10}] and final["meta"] == {"rev": 10}
    assert final["state"] == "scheduled" and final["created_at"] == mine[0]["decided_at"]
    assert all(s["id"] == early[0].job_id for s in states)
    assert redecided >= 11, (
        f"the restarted processor decided {redecided}: the kill came after a commit"
    )


def test_over_http_a_burst_answers_the_moved_job_and_get_shows_it(
    kafka_bootstrap: str, tmp_path: Any
) -> None:
    from tests.integration.test_http import running

    doc = uuid.uuid4().hex
    with running(kafka_bootstrap, tmp_path) as (_, _, _, _, http):
        first = http.post("/ojs/v1/jobs", json=burst(0, doc))
        assert first.status_code == 201, first.text
        job = first.json()["job"]
        assert job["state"] == "scheduled"
        for n in (1, 2):
            moved = http.post("/ojs/v1/jobs", json=burst(n, doc))
            assert moved.status_code == 200, moved.text
            body = moved.json()
            assert body["deduplicated"] is True and body["job"]["id"] == job["id"]
            assert body["job"]["args"] == [{"doc": doc, "rev": n}]
        found = http.get(f"/ojs/v1/jobs/{job['id']}").json()["job"]
        assert found["args"] == [{"doc": doc, "rev": 2}] and found["meta"] == {"rev": 2}
        assert found["scheduled_at"] == body["job"]["scheduled_at"] > job["scheduled_at"]
        assert found["state"] == "scheduled"
        # Not due yet: a worker is handed nothing.
        fetched = http.post("/ojs/v1/workers/fetch", json={"queues": ["default"], "count": 5})
        assert job["id"] not in {j["id"] for j in fetched.json().get("jobs", [])}
        bad = {**burst(3, doc), "unique": {"debounce": {"delay": "PT5S", "max_wait": "PT1S"}}}
        refused = http.post("/ojs/v1/jobs", json=bad)
        assert refused.status_code == 400
        assert refused.json()["error"]["message"].startswith("unique.debounce.max_wait (PT1S)")
        bq = {"dialect": "bullmq", "queue": "paint", "name": "house", "data": {"doc": doc},
              "opts": {"deduplication": {"id": doc, "ttl": 60_000, "extend": True,
                                         "replace": True}, "delay": 30_000}}  # fmt: skip
        added = http.post("/ojs/v1/jobs", json=bq)
        assert added.status_code == 201 and added.json()["deduplicated"] is False
        again = http.post("/ojs/v1/jobs", json={**bq, "data": {"doc": doc, "n": 2}})
        assert again.status_code == 200 and again.json()["deduplicated"] is True
        assert again.json()["job"]["id"] == added.json()["job"]["id"]
        assert again.json()["job"]["args"] == {"doc": doc, "n": 2}


def test_over_http_concurrent_updates_of_one_key_are_each_shown_by_a_get_right_after(
    kafka_bootstrap: str, tmp_path: Any
) -> None:
    """Eight callers sending two updates each of one debounced key at once, then batches of
    five and six: after every answer, a GET shows that update or a later one (in the order
    decided, as the decisions topic has it), though a later update may have replaced the
    answer's values before this process's view read them."""
    from tests.integration.test_http import running

    kind = f"debounced.k{uuid.uuid4().hex[:8]}"

    def debounced(n: int) -> dict[str, Any]:
        unique = {"keys": ["type"], "debounce": {"delay": "PT30S", "replace": True}}
        return {"type": kind, "args": [n], "unique": unique}

    seen: list[tuple[int, int]] = []  # (the args an answer gave, those a GET then showed)
    with running(kafka_bootstrap, tmp_path) as (_, cat, _, served, http):

        def caller(first: int) -> None:
            with httpx.Client(base_url=served.url, timeout=90) as own:
                for n in (first, first + 1):
                    answered = own.post("/ojs/v1/jobs", json=debounced(n))
                    assert answered.status_code in (200, 201), answered.text
                    job = answered.json()["job"]
                    shown = own.get(f"/ojs/v1/jobs/{job['id']}").json()["job"]
                    seen.append((job["args"][0], shown["args"][0]))

        callers = [threading.Thread(target=caller, args=(2 * t,)) for t in range(8)]
        for thread in callers:
            thread.start()
        for thread in callers:
            thread.join()
        assert len(seen) == 16
        for first, size in ((16, 5), (21, 6)):
            batch = http.post(
                "/ojs/v1/jobs/batch", json={"jobs": [debounced(first + i) for i in range(size)]}
            )
            assert batch.status_code == 201, batch.text
            items = batch.json()["jobs"]
            assert [i["args"] for i in items] == [[first + i] for i in range(size)]
            shown = http.get(f"/ojs/v1/jobs/{items[0]['id']}").json()["job"]
            seen += [(first + i, shown["args"][0]) for i in range(size)]

    reader = Reader(kafka_bootstrap, [cat.name("decisions")])
    try:
        reader.poll_until(cat.name("decisions"), 28)
        reader.settle(quiet=2)
        mine = [r["value"] for r in reader.records.get(cat.name("decisions"), [])
                if isinstance(r["value"], dict) and r["value"].get("kind") == "request"
                and (r["value"].get("job") or {}).get("type") == kind]  # fmt: skip
    finally:
        reader.close()
    assert [m["outcome"] for m in mine] == ["accepted"] + ["updated"] * 26
    assert len({m["job_id"] for m in mine}) == 1
    order = {m["job"]["args"][0]: place for place, m in enumerate(mine)}
    assert sorted(order) == list(range(27))
    stale = [(answered, shown) for answered, shown in seen if order[shown] < order[answered]]
    assert not stale, f"a GET right after the answer showed an older update: {stale}"


def test_a_debounced_job_whose_time_has_come_is_available_on_every_route(
    kafka_bootstrap: str, tmp_path: Any
) -> None:
    from tests.integration.test_http import running

    queue = f"d{uuid.uuid4().hex[:10]}"
    body = {"type": "search.reindex", "args": [uuid.uuid4().hex], "queue": queue,
            "unique": {"keys": ["type", "args"],
                       "debounce": {"delay": "PT2S", "max_wait": "PT1M"}}}  # fmt: skip
    with running(kafka_bootstrap, tmp_path) as (_, _, _, _, http):
        made = http.post("/ojs/v1/jobs", json=body)
        assert made.status_code == 201, made.text
        job_id = made.json()["job"]["id"]

        def states() -> dict[str, Any]:
            listed = {
                state: [j["id"] for j in http.get(
                    "/ojs/v1/admin/jobs", params={"queue": queue, "state": state}
                ).json()["items"]]
                for state in ("scheduled", "available")
            }  # fmt: skip
            keys = http.get("/ojs/v1/unique-jobs").json()["items"]
            counts = http.get(f"/ojs/v1/admin/queues/{queue}").json()["counts"]
            return {
                "get": http.get(f"/ojs/v1/jobs/{job_id}").json()["job"]["state"],
                "drawer": http.get(f"/ojs/v1/admin/jobs/{job_id}").json()["state"],
                "keys": [k["state"] for k in keys if k["job_id"] == job_id],
                "listed": listed,
                "counts": {s: counts[s] for s in ("scheduled", "available")},
            }  # fmt: skip

        before = eventually(states, lambda s: s["listed"]["scheduled"] == [job_id])
        assert before["get"] == before["drawer"] == "scheduled" and before["keys"] == ["scheduled"]
        assert before["counts"] == {"scheduled": 1, "available": 0}
        after = eventually(states, lambda s: s["get"] == "available", seconds=30)
        after = eventually(states, lambda s: s["listed"]["available"] == [job_id], seconds=5)
        assert after["listed"]["scheduled"] == [] and after["drawer"] == "available"
        assert after["keys"] == ["available"], after
        assert after["counts"] == {"scheduled": 0, "available": 1}
