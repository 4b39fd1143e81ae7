"""What a principal of some queues sees: every read that spans queues holds only theirs
(jobs, queues, stats, workers, events, dead letters, crons, unique keys, a key's history),
pages over a mix of queues give each of its items once, and a job of another queue is
answered as one that does not exist. The app runs as in test_http_access.py."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway import wire
from gateway.audit import key_history
from gateway.audit.index import AuditIndex
from gateway.core.crons import definition, shown
from gateway.core.lifecycle import shown_state
from gateway.http import shared
from tests.unit.test_http_access import Gateway, Principals

QUEUES = ["billing", "orders.eu", "mail", "orders.us", "ordersx"]
STATES = ["available", "active", "discarded", "completed", "scheduled", "retryable"]
SEEN = ("orders.eu", "orders.us")  # what `orders.*` reaches: not "ordersx"
PRINCIPALS: Principals = {
    "admin": ("admin", None, ["*"]),
    "orders-viewer": ("read-only", None, ["orders.*"]),
    "orders-operator": ("operator", None, ["orders.*"]),
    "orders-admin": ("admin", None, ["orders.*"]),
}


def job_id(n: int) -> str:
    return f"01900000-0000-7000-8000-{n:012d}"


def a_job(n: int) -> dict[str, Any]:
    state = STATES[n % len(STATES)]
    job: dict[str, Any] = {
        "id": job_id(n), "type": "t.run", "queue": QUEUES[n % len(QUEUES)], "state": state,
        "args": [n], "attempt": 1, "created_at": "2026-01-01T12:00:00.000Z",
        "enqueued_at": "2026-01-01T12:00:00.000Z",
    }  # fmt: skip
    if state == "active":
        job |= {"worker_id": f"w{n % 3}", "started_at": "2026-01-01T12:00:01.000Z"}
    if state == "discarded":
        job |= {"discarded_at": "2026-01-01T12:00:02.000Z", "error": {"type": "boom"}}
    if n % 2:
        job["unique_key"] = f"{n:064x}"
    return job


JOBS = [a_job(n) for n in range(60)]
VISIBLE = [j for j in JOBS if j["queue"] in SEEN]
HIDDEN = next(j for j in JOBS if j["queue"] == "ordersx" and j["state"] == "active")


def cron(name: str, queue: str) -> dict[str, Any]:
    made = definition({"name": name, "expression": "0 * * * *",
                       "job_template": {"type": "t.run", "options": {"queue": queue}}})  # fmt: skip
    assert isinstance(made, dict)
    return shown(made)


@pytest.fixture
def gateway(tmp_path: Path) -> Any:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(shared, "QUEUE_SETTLE_S", 0.0)
        patch.setattr(key_history, "SETTLE_S", 0.0)
        made = Gateway(tmp_path, PRINCIPALS, JOBS)
        crons = [cron(f"c-{q}", q) for q in QUEUES]
        made.view.apply(
            [(1, n, wire.cron_key(c["name"]), orjson.dumps(c)) for n, c in enumerate(crons)], 0
        )
        binding = made.app.state.binding
        binding.feed.stage([(0, n, None, j) for n, j in enumerate(JOBS)], {0: len(JOBS)})
        yield made
        made.view.close()


def get(gateway: Gateway, name: str, path: str, **params: Any) -> Any:
    answer = gateway.call("GET", path, gateway.keys[name], params=params)
    assert answer.status_code == 200, (name, path, answer.text)
    return answer.json()


def ids(jobs: list[dict[str, Any]]) -> list[str]:
    return sorted(j["id"] for j in jobs)


def test_a_principal_of_some_queues_lists_only_theirs(gateway: Gateway):
    who = "orders-viewer"
    jobs = get(gateway, who, "/ojs/v1/admin/jobs", per_page=1000)
    assert ids(jobs["items"]) == ids(VISIBLE) and jobs["pagination"]["total"] == len(VISIBLE)
    queues = get(gateway, who, "/ojs/v1/queues")
    assert [q["name"] for q in queues["queues"]] == list(SEEN)
    assert queues["pagination"]["total"] == 2
    admin_queues = get(gateway, who, "/ojs/v1/admin/queues")
    assert [q["name"] for q in admin_queues["items"]] == list(SEEN)
    dead = [j for j in VISIBLE if j["state"] == "discarded"]
    assert ids(get(gateway, who, "/ojs/v1/dead-letter")["jobs"]) == ids(dead)
    assert ids(get(gateway, who, "/ojs/v1/admin/dead-letter")["items"]) == ids(dead)
    dead_stats = get(gateway, who, "/ojs/v1/admin/dead-letter/stats")
    assert dead_stats["total"] == len(dead) and set(dead_stats["by_queue"]) <= set(SEEN)
    crons = get(gateway, who, "/ojs/v1/cron")
    assert [c["name"] for c in crons["crons"]] == ["c-orders.eu", "c-orders.us"]
    assert [c["id"] for c in get(gateway, who, "/ojs/v1/crons")["items"]] == [
        "c-orders.eu", "c-orders.us"
    ]  # fmt: skip
    unique = get(gateway, who, "/ojs/v1/unique-jobs", per_page=1000)["items"]
    finished = ("completed", "discarded")
    live = [j for j in VISIBLE if j.get("unique_key") and j["state"] not in finished]
    assert sorted(u["job_id"] for u in unique) == ids(live)
    events = get(gateway, who, "/ojs/v1/events", limit=1000)["events"]
    assert events and {e["data"]["queue"] for e in events} == set(SEEN)
    everything = get(gateway, "admin", "/ojs/v1/events", limit=1000)["events"]
    assert events == [e for e in everything if e["data"]["queue"] in SEEN]
    paged = get(gateway, who, "/ojs/v1/events", per_page=1000)["items"]
    assert {e["data"]["queue"] for e in paged} == set(SEEN)
    # Another queue's name in a filter finds nothing, as a queue with no job would.
    assert get(gateway, who, "/ojs/v1/admin/jobs", queue="billing")["items"] == []
    assert get(gateway, who, "/ojs/v1/dead-letter", queue="billing")["jobs"] == []


def test_stats_and_workers_count_only_the_queues_seen(gateway: Gateway):
    who = "orders-viewer"
    stats = get(gateway, who, "/ojs/v1/admin/stats")
    everything = get(gateway, "admin", "/ojs/v1/admin/stats")
    assert stats["queues"] == 2 and everything["queues"] == len(QUEUES)
    now = time.time_ns() // 1_000_000
    for state in STATES:  # as GET shows each: a retry with no backoff is available
        assert stats["jobs"][state] == sum(1 for j in VISIBLE if shown_state(j, now) == state), (
            state
        )
    workers = get(gateway, who, "/ojs/v1/admin/workers")["items"]
    active = [j for j in VISIBLE if j["state"] == "active"]
    assert stats["workers"] == len(workers) and {q for w in workers for q in w["queues"]} <= set(
        SEEN
    )
    assert sum(w["active_jobs"] for w in workers) == len(active)
    history = get(gateway, who, "/ojs/v1/admin/stats/history", queue="billing")
    assert history == get(gateway, who, "/ojs/v1/admin/stats/history", queue="nothing")


@pytest.mark.parametrize("per_page", [1, 3, 7])
def test_pages_over_a_mix_of_queues_give_every_visible_job_once(gateway: Gateway, per_page: int):
    for path, field in [("/ojs/v1/admin/jobs", "items"), ("/ojs/v1/admin/dead-letter", "items")]:
        found: list[str] = []
        page = 1
        while True:
            body = get(gateway, "orders-viewer", path, page=page, per_page=per_page)
            found += [j["id"] for j in body[field]]
            total = body["pagination"]["total"]
            if len(body[field]) < per_page:
                break
            assert len(body[field]) == per_page  # no short page before the end
            page += 1
        assert len(found) == len(set(found)) == total, path
        assert {j["queue"] for j in JOBS if j["id"] in found} <= set(SEEN)
    listed: list[str] = []
    for offset in range(0, 100, per_page):
        body = get(gateway, "orders-viewer", "/ojs/v1/dead-letter", limit=per_page, offset=offset)
        listed += [j["id"] for j in body["jobs"]]
        if not body["pagination"]["has_more"]:
            break
    dead = [j for j in VISIBLE if j["state"] == "discarded"]
    assert sorted(listed) == ids(dead) and len(listed) == len(set(listed))


@pytest.mark.parametrize("limit", [1, 4])
def test_an_event_cursor_walks_every_visible_event_once(gateway: Gateway, limit: int):
    seen: list[str] = []
    after = "0:0"
    for _ in range(200):
        body = get(gateway, "orders-viewer", "/ojs/v1/events", after=after, limit=limit)
        seen += [e["id"] for e in body["events"]]
        if not body["events"]:
            break
        after = body["last_id"]
    everything = get(gateway, "admin", "/ojs/v1/events", after="0:0", limit=1000)["events"]
    wanted = [e["id"] for e in everything if e["data"]["queue"] in SEEN]
    assert seen == wanted and len(wanted) > limit


def test_a_job_of_another_queue_is_404_as_a_missing_one(gateway: Gateway):
    missing = job_id(999)
    for name in ("orders-viewer", "orders-operator", "orders-admin"):
        key = gateway.keys[name]
        for method, path in [
            ("GET", "/ojs/v1/jobs/{}"), ("GET", "/ojs/v1/admin/jobs/{}"),
            ("DELETE", "/ojs/v1/jobs/{}"), ("POST", "/ojs/v1/admin/jobs/{}/cancel"),
        ]:  # fmt: skip
            hidden = gateway.call(method, path.format(HIDDEN["id"]), key)
            absent = gateway.call(method, path.format(missing), key)
            if absent.status_code == 403:  # the operation the principal lacks: said first
                assert hidden.status_code == 403, (name, path)
                continue
            assert hidden.status_code == absent.status_code == 404, (name, path, hidden.text)
            assert same_but_the_id(hidden.json(), absent.json(), HIDDEN["id"], missing)
    assert gateway.processor.sent == []
    # Dead letters the same, for an admin of its queues.
    dead = next(j for j in JOBS if j["queue"] == "billing" and j["state"] == "discarded")
    key = gateway.keys["orders-admin"]
    for method, path in [("POST", "/ojs/v1/dead-letter/{}/retry"),
                         ("DELETE", "/ojs/v1/admin/dead-letter/{}")]:  # fmt: skip
        hidden = gateway.call(method, path.format(dead["id"]), key)
        absent = gateway.call(method, path.format(missing), key)
        assert hidden.status_code == absent.status_code == 404
        assert same_but_the_id(hidden.json(), absent.json(), dead["id"], missing)
    assert gateway.processor.sent == []
    # The admin of every queue reaches it.
    assert gateway.call("GET", f"/ojs/v1/jobs/{HIDDEN['id']}", gateway.keys["admin"]).is_success


def same_but_the_id(hidden: Any, absent: Any, hidden_id: str, missing: str) -> bool:
    for body in (hidden, absent):
        body["error"].pop("request_id", None)
    return (
        orjson.dumps(hidden).decode().replace(hidden_id, missing) == orjson.dumps(absent).decode()
    )


def test_a_cron_of_another_queue_is_404_and_changes_across_queues_need_every_queue(
    gateway: Gateway,
):
    key = gateway.keys["orders-admin"]
    for base in ("/ojs/v1/cron/", "/ojs/v1/crons/"):
        assert gateway.call("GET", base + "c-orders.eu", key).status_code == 200
        hidden = gateway.call("GET", base + "c-billing", key)
        absent = gateway.call("GET", base + "c-none", key)
        assert hidden.status_code == absent.status_code == 404
        assert hidden.json()["error"]["message"] == absent.json()["error"]["message"].replace(
            "c-none", "c-billing"
        )
        assert gateway.call("DELETE", base + "c-orders.eu", key).status_code == 403
    for path in ("/ojs/v1/admin/jobs/bulk/cancel", "/ojs/v1/admin/dead-letter/retry"):
        answer = gateway.call("POST", path, key, json={"filter": {}, "confirm": True})
        assert answer.status_code == 403 and "every queue" in answer.json()["error"]["message"]
    assert gateway.processor.sent == []


def test_a_worker_s_ack_and_heartbeat_of_another_queue_s_job_are_not_found(tmp_path: Path):
    principals: Principals = {"orders-worker": ("worker", None, ["orders.*"])}
    gateway = Gateway(tmp_path, principals, JOBS)
    key = gateway.keys["orders-worker"]
    try:
        for path in ("/ojs/v1/workers/ack", "/ojs/v1/workers/nack"):
            body: dict[str, Any] = {"job_id": HIDDEN["id"]}
            if path.endswith("nack"):
                body["error"] = {"message": "no"}
            hidden = gateway.call("POST", path, key, json=body)
            absent = gateway.call("POST", path, key, json={**body, "job_id": job_id(999)})
            assert hidden.status_code == absent.status_code == 404
            assert same_but_the_id(hidden.json(), absent.json(), HIDDEN["id"], job_id(999))
        beat = gateway.call("POST", "/ojs/v1/workers/heartbeat", key,
                            json={"worker_id": "w", "active_jobs": [HIDDEN["id"]]})  # fmt: skip
        assert beat.json()["jobs"][0]["error"]["code"] == "not_found"
        assert gateway.processor.sent == []
    finally:
        gateway.view.close()


def test_a_key_s_history_is_shown_only_when_its_jobs_are_of_queues_seen(
    gateway: Gateway, tmp_path: Path
):
    def record(n: int, queue: str) -> bytes:
        job = {"id": job_id(900 + n), "queue": queue, "state": "available"}
        return orjson.dumps({
            "kind": "request", "outcome": "accepted", "request_id": f"r{n}",
            "unique_key": f"{n:064x}", "job_id": job["id"], "policy": None, "job": job,
            "decided_at": "2026-01-01T00:00:00Z",
        })  # fmt: skip

    records = {(0, 0): record(1, "orders.eu"), (0, 1): record(2, "billing")}
    index = AuditIndex(tmp_path / "audit")
    index.add([(p, o, v) for (p, o), v in records.items()], {0: 2})
    binding = gateway.app.state.binding
    binding.audit = key_history.KeyHistory(
        index, "ns.decisions",
        lambda positions: ({p: records.get(p) for p in positions}, {0: 0}), lambda: {0: 2},
    )  # fmt: skip
    path = "/ojs/v1/admin/unique-jobs/{}/history"
    key = gateway.keys["orders-viewer"]
    try:
        assert gateway.call("GET", path.format(f"{1:064x}"), key).status_code == 200
        hidden = gateway.call("GET", path.format(f"{2:064x}"), key)
        absent = gateway.call("GET", path.format(f"{3:064x}"), key)
        assert hidden.status_code == absent.status_code == 404
        assert same_but_the_id(hidden.json(), absent.json(), "", "")
        assert gateway.call("GET", path.format(job_id(902)), key).status_code == 404
        assert gateway.call("GET", path.format(f"{2:064x}"), gateway.keys["admin"]).is_success
    finally:
        index.close()


def test_the_view_s_index_leaves_out_other_queues_before_a_page_is_cut(tmp_path: Path):
    from gateway.view.store import JobView

    view = JobView(tmp_path / "view")
    try:
        view.apply([(0, n, j["id"].encode(), orjson.dumps(j)) for n, j in enumerate(JOBS)], 0)
        # Answered, not read yet: a job of a queue seen and one of another.
        for n, queue in ((800, "orders.eu"), (801, "billing")):
            view.provisional(job_id(n), {**a_job(2), "id": job_id(n), "queue": queue})
        sees = SEEN.__contains__
        dead = sorted((j["queue"], j["id"]) for j in VISIBLE if j["state"] == "discarded")
        indexed = [job for _, job in dead]  # by queue, then id
        assert list(view.in_state("discarded", sees=sees)) == [*indexed, job_id(800)]
        assert list(view.in_state("discarded", "billing", sees)) == []
        assert job_id(801) in view.in_state("discarded")
    finally:
        view.close()
