"""Tenants: a job's tenant at the edge (X-OJS-Tenant, meta.tenant_id), unique keys scoped
by it only for a request marked so, and what a caller of a tenant sees and may do.

The HTTP app runs on a real job view; behind it a fake processor (`Broker`) decides each
job by the SDK's own prepare and the processor's own parse (so the key both compute is the
one tested), keeps each live key's job, and writes every job to the view as its record
would. The ext-multi-tenancy sequences of the OJS conformance suite run on it as the suite
sends them.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, cast

import httpx
import orjson
import pytest

from gateway import wire
from gateway.auth import credentials, keys
from gateway.catalogue import Catalogue, TopicSpec
from gateway.core import GatewayError, Request, stored_job
from gateway.core.tenants import for_tenant, scoped_key, tenant_problem
from gateway.http import shared
from gateway.http.app import HttpSettings, create_app
from gateway.http.binding import Binding
from gateway.partitioner import partition_for
from gateway.processor.metrics import Metrics
from gateway.processor.stages import INPUTS, Stages, Stores
from gateway.sdk import EnqueueResult, EventAck, InvalidJob
from gateway.sdk.prepare import prepare
from gateway.stage.parsing import Limits, parse_limited
from gateway.stage.records import Output, Source
from gateway.view.store import JobView
from tests.support import Consumed

UNIQUE = {"keys": ["type", "args"]}
JOB = {"type": "report.build", "args": [7], "queue": "reports", "unique": UNIQUE}
T0 = "2026-01-01T12:00:00.000Z"
CATALOGUE = Catalogue(tuple(TopicSpec(role, f"t.{role}", 8, 1) for role in INPUTS))


class Broker:
    """The processor behind the SDK client, faked: one live job per key (a duplicate is
    rejected naming the job that holds it), claims applied; each job written to the view."""

    def __init__(self, view: JobView) -> None:
        self.view = view
        self.held: dict[str, str] = {}
        self.view_ids: list[str] = []
        self.offset = 0

    async def enqueue(self, job: Any, **_: Any) -> EnqueueResult:
        return self._decide(job)

    async def enqueue_many(self, jobs: Any, **_: Any) -> list[EnqueueResult]:
        return [self._decide(job) for job in jobs]

    def _decide(self, job: Any) -> EnqueueResult:
        out = prepare(job)
        if isinstance(out, GatewayError):
            raise InvalidJob(out)
        request = parse_limited(out.value, Limits(), dict(out.headers))
        assert isinstance(request, Request) and request.unique_key == out.unique_key
        key, env = request.unique_key, request.envelope
        record = {"request_id": out.request_id, "unique_key": key}
        if key is not None and key in self.held:
            return EnqueueResult.from_record({
                **record, "outcome": "rejected", "existing_job_id": self.held[key],
                "existing_job_state": "available",
                "error": {"code": "duplicate", "message": "a duplicate of a live job"},
            })  # fmt: skip
        # A keyed job's id is the processor's to give (here, from a count).
        job_id = str(env.id or f"01900000-0000-7000-8000-{len(self.view_ids):012d}")
        self.view_ids.append(job_id)
        made = {
            "id": job_id, "type": env.type, "queue": env.queue, "args": env.args,
            "meta": env.raw.get("meta"), "state": "available", "attempt": 0, "created_at": T0,
            "enqueued_at": T0, "unique_key": key,
        }  # fmt: skip
        if key is not None:
            self.held[key] = job_id
        self._write(stored_job(made, key, 0))
        return EnqueueResult.from_record({
            **record, "outcome": "accepted", "job_id": job_id, "job": made,
            "source": {"partition": 0},
        })  # fmt: skip

    async def publish_event(self, event: dict[str, Any], **_: Any) -> EventAck:
        job = self.view.get(event["job_id"])
        assert job is not None
        state = {"job.started": "active", "job.cancelled": "cancelled"}[event["type"]]
        moved = {**job, "state": state, "worker_id": event.get("worker_id")}
        self._write(moved)
        return EventAck.from_record({"outcome": "applied", "job_id": job["id"],
                                     "previous_state": job["state"], "state": state,
                                     "job": moved})  # fmt: skip

    def _write(self, job: dict[str, Any]) -> None:
        self.offset += 1
        self.view.apply([(0, self.offset, str(job["id"]).encode(), orjson.dumps(job))], 0)


class App:
    """The app on a view and a Broker; with `bound`, a credentials file of principals
    (name: tenants, each an admin of every queue)."""

    def __init__(self, tmp_path: Path, bound: dict[str, list[str]] | None = None) -> None:
        self.keys: dict[str, str] = {}
        path = None
        if bound is not None:
            path = tmp_path / "credentials.toml"
            made: tuple[credentials.Principal, ...] = ()
            for name, tenants in bound.items():
                self.keys[name] = keys.new_key()
                new = credentials.principal(name, "admin", None, ["*"], tenants=tenants)
                made = credentials.with_key(made, name, self.keys[name], 0, new=new)
            credentials.save(path, made)
        self.view = JobView(tmp_path / "view")
        self.broker = Broker(self.view)
        settings = HttpSettings(bootstrap="127.0.0.1:1", namespace="unit", credentials=path)
        self.app = create_app(settings)
        watcher = None if path is None else self._watcher(path)
        self.app.state.binding = Binding(
            settings, cast(Any, self.broker), self.view, cast(Any, None), "requests",
            watcher=watcher,
        )  # fmt: skip

    @staticmethod
    def _watcher(path: Path) -> Any:
        from gateway.auth.keyring import Watcher

        return Watcher(path)

    def call(
        self, method: str, path: str, tenant: str | None = None, who: str | None = None,
        **kwargs: Any,
    ) -> httpx.Response:  # fmt: skip
        headers = {} if tenant is None else {wire.HTTP_TENANT: tenant}
        if who is not None:
            headers["Authorization"] = f"Bearer {self.keys[who]}"

        async def go() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app, raise_app_exceptions=False)
            async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
                return await client.request(method, path, headers=headers, **kwargs)

        return asyncio.run(go())

    def enqueue(self, job: dict[str, Any], tenant: str | None = None, **kw: Any) -> Any:
        return self.call("POST", "/ojs/v1/jobs", tenant, json=job, **kw)


@pytest.fixture
def app(tmp_path: Path) -> Any:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(shared, "QUEUE_SETTLE_S", 0.0)
        made = App(tmp_path)
        yield made
        made.view.close()


@pytest.fixture
def bound(tmp_path: Path) -> Any:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(shared, "QUEUE_SETTLE_S", 0.0)
        made = App(tmp_path, {"acme-ops": ["acme"], "both": ["acme", "globex"], "root": []})
        yield made
        made.view.close()


def error(answer: httpx.Response, status: int) -> dict[str, Any]:
    assert answer.status_code == status, answer.text
    return dict(answer.json()["error"])


# -- the core and the wire: keys scoped only under the mark ----------------------------------


def test_a_tenant_is_checked_as_ojs_says():
    assert tenant_problem({"tenant_id": "acme.eu:prod-1_x"}) is None
    assert tenant_problem({}) is None and tenant_problem(None) is None
    for bad in ("", "-acme", "a b", "a" * 129, 7, None, "é"):
        assert tenant_problem({"tenant_id": bad}) is not None, bad
    assert tenant_problem({"tenant_id": "a" * 128}) is None


def test_two_tenants_same_key_differ_and_the_sdk_and_processor_agree():
    made = [prepare({**JOB, "meta": {"tenant_id": t}}) for t in ("acme", "globex", "acme")]
    plain = prepare(JOB)
    assert not isinstance(plain, GatewayError) and plain.headers == ()
    keys_ = []
    for out in made:
        assert not isinstance(out, GatewayError)
        assert out.headers == (
            (wire.TENANT_SCOPED_HEADER, wire.TENANT_SCOPED),
            (wire.TENANT_COUNTED_HEADER, wire.TENANT_COUNTED),
        )
        # Sent to its tenant's home first, which sends it on to its tenant's key.
        assert out.key == wire.tenant_home(orjson.loads(out.value)["meta"]["tenant_id"])
        parsed = parse_limited(out.value, Limits(), dict(out.headers))
        assert isinstance(parsed, Request) and parsed.unique_key == out.unique_key
        keys_.append(out.unique_key)
    assert keys_[0] == keys_[2] != keys_[1]
    assert plain.unique_key not in keys_
    assert keys_[0] == scoped_key(str(plain.unique_key), "acme")


def test_a_record_without_the_mark_is_decided_as_before_even_naming_a_tenant():
    """A log written before tenants: meta.tenant_id is only meta, its key and route the old."""
    old = orjson.dumps({**JOB, "meta": {"tenant_id": "acme"}})
    before = parse_limited(orjson.dumps(JOB), Limits())
    parsed = parse_limited(old, Limits(), {wire.REQUEST_ID_HEADER: b"r"})
    assert isinstance(parsed, Request) and isinstance(before, Request)
    assert parsed.unique_key == before.unique_key and wire.route(parsed) == wire.route(before)
    marked = parse_limited(old, Limits(), {wire.TENANT_SCOPED_HEADER: wire.TENANT_SCOPED})
    assert isinstance(marked, Request) and marked.unique_key != before.unique_key
    # A mark without a tenant to scope by is refused, not decided unscoped.
    refused = parse_limited(orjson.dumps(JOB), Limits(), {wire.TENANT_SCOPED_HEADER: b"1"})
    assert isinstance(refused, GatewayError) and refused.code == "invalid_request"


def decide_records(tmp: Path, jobs: list[tuple[dict[str, Any], bool]]) -> list[str]:
    """The outcomes the processor's own stages decide for `jobs` sent on `requests` as the
    SDK keys them, each marked as scoped by its tenant or not."""
    outcomes: list[str] = []

    def emit(output: Output, _source: Source) -> None:
        if output.role == "decisions":
            outcomes.append(orjson.loads(output.value or b"")["outcome"])

    stages = Stages(CATALOGUE, emit, Metrics(), Limits(), Stores(tmp))
    for offset, (job, marked) in enumerate(jobs):
        out = prepare(job)
        assert not isinstance(out, GatewayError)
        request = parse_limited(out.value, Limits())
        assert isinstance(request, Request) and request.unique_key is not None
        key = (out.unique_key if marked else request.unique_key).encode()  # type: ignore[union-attr]
        # The scoping mark alone: the counting one sends it to its tenant's home first
        # (tests/unit/test_tenant_limits.py).
        headers = [h for h in out.headers if h[0] == wire.TENANT_SCOPED_HEADER] if marked else None
        stages.handle([Consumed(
            "t.requests", partition_for(key, 8), offset, 1_760_000_000_000 + offset, key,
            out.value, headers,
        )])  # fmt: skip
    stages.stores.close(list(stages.stores.open))
    return outcomes


def test_the_stages_decide_a_log_without_marks_as_before_and_scope_marked_ones(tmp_path: Path):
    acme, globex = ({**JOB, "meta": {"tenant_id": t}} for t in ("acme", "globex"))
    # As a log from before tenants: one key for both tenants, the second a duplicate.
    assert decide_records(tmp_path / "old", [(acme, False), (globex, False)]) == [
        "accepted", "rejected"
    ]  # fmt: skip
    # Marked, as the SDK sends them now: a key each; the same tenant again, a duplicate.
    marked = [(acme, True), (globex, True), (acme, True), (JOB, False)]
    assert decide_records(tmp_path / "new", marked) == [
        "accepted", "accepted", "rejected", "accepted"
    ]  # fmt: skip


def test_a_job_naming_a_bad_tenant_is_refused_by_the_sdk():
    refused = prepare({**JOB, "meta": {"tenant_id": "no spaces"}})
    assert isinstance(refused, GatewayError) and "meta.tenant_id" in refused.message


# -- the edge ---------------------------------------------------------------------------------


def test_the_header_is_written_into_meta_and_agreeing_meta_is_kept(app: App):
    made = app.enqueue(JOB, "acme")
    assert made.status_code == 201, made.text
    assert made.json()["job"]["meta"]["tenant_id"] == "acme"
    both = app.enqueue({**JOB, "args": [8], "meta": {"tenant_id": "acme"}}, "acme")
    assert both.status_code == 201 and both.json()["job"]["meta"] == {"tenant_id": "acme"}


def test_a_header_and_meta_that_differ_or_a_bad_tenant_are_400_and_nothing_is_sent(app: App):
    differ = error(app.enqueue({**JOB, "meta": {"tenant_id": "globex"}}, "acme"), 400)
    assert differ["code"] == "invalid_request"
    assert "'globex'" in differ["message"] and "'acme'" in differ["message"]
    assert differ["details"] == {"meta.tenant_id": "globex", wire.HTTP_TENANT: "acme"}
    assert error(app.enqueue(JOB, "bad tenant"), 400)["code"] == "invalid_request"
    bad_meta = error(app.enqueue({**JOB, "meta": {"tenant_id": ""}}), 400)
    assert "meta.tenant_id" in bad_meta["message"]
    batch = {"jobs": [JOB, {**JOB, "args": [9], "meta": {"tenant_id": "globex"}}]}
    assert error(app.call("POST", "/ojs/v1/jobs/batch", "acme", json=batch), 400)
    assert error(app.call("GET", "/ojs/v1/admin/tenants", "a b"), 400)
    assert app.broker.held == {}


def test_two_tenants_same_unique_key_both_accepted_the_same_tenant_duplicate(app: App):
    first = app.enqueue(JOB, "acme")
    other = app.enqueue(JOB, "globex")
    assert first.status_code == other.status_code == 201
    again = error(app.enqueue(JOB, "acme"), 409)
    assert again["details"]["existing_job_id"] == first.json()["job"]["id"]
    # Without a tenant, as before: its own key, free of both.
    assert app.enqueue(JOB).status_code == 201
    # A 409 never names another tenant's job: globex's duplicate names globex's.
    dup = error(app.enqueue(JOB, "globex"), 409)
    assert dup["details"]["existing_job_id"] == other.json()["job"]["id"]


def test_a_tenant_sees_only_its_jobs_and_a_request_without_one_sees_all(app: App):
    a = app.enqueue(JOB, "acme").json()["job"]["id"]
    g = app.enqueue(JOB, "globex").json()["job"]["id"]
    n = app.enqueue({**JOB, "queue": "other"}).json()["job"]["id"]
    assert app.call("GET", f"/ojs/v1/jobs/{g}", "acme").status_code == 404
    assert app.call("GET", f"/ojs/v1/jobs/{n}", "acme").status_code == 404
    assert app.call("GET", f"/ojs/v1/jobs/{a}", "acme").status_code == 200
    listed = app.call("GET", "/ojs/v1/admin/jobs", "acme").json()
    assert [j["id"] for j in listed["items"]] == [a] and listed["pagination"]["total"] == 1
    every = app.call("GET", "/ojs/v1/admin/jobs").json()
    assert sorted(j["id"] for j in every["items"]) == sorted([a, g, n])
    queues = app.call("GET", "/ojs/v1/queues", "acme").json()["queues"]
    assert [(q["name"], q["counts"]) for q in queues] == [("reports", {"available": 1})]
    stats = app.call("GET", "/ojs/v1/queues/reports", "globex").json()
    assert stats["queue"]["name"] == "reports" and stats["queue"]["available"] == 1
    assert app.call("GET", "/ojs/v1/queues/other", "globex").status_code == 404
    tenants = app.call("GET", "/ojs/v1/admin/tenants").json()
    assert [t["id"] for t in tenants["items"]] == ["acme", "globex"]
    assert tenants["pagination"] == {"total": 2, "page": 1, "per_page": 50}
    seen = app.call("GET", "/ojs/v1/admin/tenants", "acme").json()
    assert [t["id"] for t in seen["items"]] == ["acme"]
    assert app.call("GET", "/ojs/v1/admin/tenants/globex", "acme").status_code == 404


def test_fetch_with_a_tenant_proposes_only_its_jobs(app: App):
    g = app.enqueue({**JOB, "priority": 9}, "globex").json()["job"]["id"]
    a = app.enqueue(JOB, "acme").json()["job"]["id"]
    got = app.call("POST", "/ojs/v1/workers/fetch", "acme", json={"queues": ["reports"]})
    assert [j["id"] for j in got.json()["jobs"]] == [a]
    none = app.call("POST", "/ojs/v1/workers/fetch", "acme", json={"queues": ["reports"]})
    assert none.json()["jobs"] == []
    assert app.view.get(g)["state"] == "available"  # type: ignore[index]


# -- principals bound to tenants ----------------------------------------------------------------


def test_a_bound_principal_acts_for_its_tenant_only(bound: App):
    made = bound.enqueue(JOB, who="acme-ops")  # its one tenant, written in
    assert made.status_code == 201 and made.json()["job"]["meta"]["tenant_id"] == "acme"
    refused = error(bound.enqueue({**JOB, "meta": {"tenant_id": "globex"}}, who="acme-ops"), 403)
    assert refused["code"] == "permission_denied" and refused["details"]["tenant"] == "globex"
    assert error(bound.enqueue(JOB, "globex", who="acme-ops"), 403)["details"]["tenant"]
    # Bound to two, it names one; naming none is acting for none of them.
    assert error(bound.enqueue(JOB, who="both"), 403)["details"]["tenant"] is None
    assert bound.enqueue(JOB, "globex", who="both").status_code == 201
    assert error(bound.call("GET", "/ojs/v1/admin/jobs", "globex", who="acme-ops"), 403)
    assert bound.broker.held and len(bound.broker.held) == 2


SIDEKIQ = {"dialect": "sidekiq", "class": "Report", "queue": "reports", "args": [7],
           "lock": "until_executed"}  # fmt: skip
RIVER = {"dialect": "river", "kind": "report", "queue": "reports", "args": {"n": 7}}


def test_a_dialect_s_job_is_of_its_tenant_keyed_and_seen_apart(app: App):
    first = app.enqueue(SIDEKIQ, "acme")
    other = app.enqueue(SIDEKIQ, "globex")  # the same job hash: another tenant's key
    assert first.status_code == other.status_code == 201, other.text
    duplicate = error(app.enqueue(SIDEKIQ, "acme"), 409)
    assert duplicate["details"]["existing_job_id"] == first.json()["job"]["id"]
    job_id = other.json()["job"]["id"]
    assert app.call("GET", f"/ojs/v1/jobs/{job_id}", "acme").status_code == 404
    assert app.call("GET", f"/ojs/v1/jobs/{job_id}", "globex").status_code == 200


def test_a_bound_principal_acts_for_its_tenant_in_every_dialect(bound: App):
    """River's record takes its meta from `metadata`: the tenant is checked and written there."""
    made = bound.enqueue(RIVER, who="acme-ops")
    assert made.status_code == 201, made.text
    assert made.json()["job"]["meta"] == {"tenant_id": "acme"}
    elsewhere = {**RIVER, "metadata": {"tenant_id": "globex"}, "meta": {"tenant_id": "acme"}}
    refused = error(bound.enqueue(elsewhere, who="acme-ops"), 403)
    assert refused["details"]["tenant"] == "globex"
    bad = error(bound.enqueue({**RIVER, "metadata": {"tenant_id": ""}}, who="acme-ops"), 400)
    assert "metadata.tenant_id" in bad["message"]
    hash_job = bound.enqueue(SIDEKIQ, who="acme-ops")
    assert hash_job.status_code == 201 and hash_job.json()["job"]["meta"]["tenant_id"] == "acme"


def test_a_bound_principal_sees_its_tenants_jobs_in_exact_pages(bound: App):
    ids: dict[str, list[str]] = {"acme": [], "globex": [], "": []}
    for n in range(9):
        tenant = ("acme", "globex", "")[n % 3]
        job = {**JOB, "args": [n], "queue": f"q{n % 2}"}
        made = bound.enqueue(job, tenant or None, who="both" if tenant else "root")
        ids[tenant].append(made.json()["job"]["id"])
    hidden = ids["globex"][0]
    assert bound.call("GET", f"/ojs/v1/jobs/{hidden}", who="acme-ops").status_code == 404
    assert bound.call("GET", f"/ojs/v1/admin/jobs/{hidden}", who="acme-ops").status_code == 404
    assert bound.call("GET", f"/ojs/v1/jobs/{hidden}", who="root").status_code == 200
    pages = [
        bound.call("GET", "/ojs/v1/admin/jobs", who="acme-ops", params={"page": p, "per_page": 2})
        for p in (1, 2, 3)
    ]
    listed = [j["id"] for page in pages for j in page.json()["items"]]
    assert sorted(listed) == sorted(ids["acme"]) and len(listed) == len(set(listed))
    assert {page.json()["pagination"]["total"] for page in pages} == {3}
    stats = bound.call("GET", "/ojs/v1/admin/stats", who="acme-ops").json()
    assert stats["jobs"]["available"] == 3
    both = bound.call("GET", "/ojs/v1/admin/stats", who="both").json()
    assert both["jobs"]["available"] == 6
    assert bound.call("GET", "/ojs/v1/admin/stats", who="root").json()["jobs"]["available"] == 9
    events = bound.call("GET", "/ojs/v1/events", who="acme-ops", params={"limit": 100})
    assert events.status_code == 200


# -- the conformance suite's ext-multi-tenancy, as it sends it -----------------------------------


def test_ext_multi_tenancy_sequences(app: App):
    # EXT-MT-001: the header into meta; GET with it.
    made = app.call("POST", "/ojs/v1/jobs", "tenant-acme-corp", json={
        "type": "test.tenant", "args": [{"action": "x"}],
        "options": {"queue": "conformance-tenant-header"}})  # fmt: skip
    assert made.status_code == 201 and made.json()["job"]["state"] == "available"
    job = made.json()["job"]
    assert job["meta"]["tenant_id"] == "tenant-acme-corp"
    got = app.call("GET", f"/ojs/v1/jobs/{job['id']}", "tenant-acme-corp").json()["job"]
    assert got["id"] == job["id"] and got["meta"]["tenant_id"] == "tenant-acme-corp"
    # EXT-MT-002 and 005: fetch sees the caller's tenant's jobs only.
    for tenant, action in (("tenant-alpha", "isolation-test-alpha"),
                           ("tenant-beta", "isolation-test-beta")):  # fmt: skip
        answer = app.call("POST", "/ojs/v1/jobs", tenant, json={
            "type": "test.isolation", "args": [{"action": action}],
            "options": {"queue": "conformance-tenant-isolation"}})  # fmt: skip
        assert answer.json()["job"]["meta"]["tenant_id"] == tenant
    fetched = app.call("POST", "/ojs/v1/workers/fetch", "tenant-alpha", json={
        "queues": ["conformance-tenant-isolation"], "worker_id": "test-worker-mt-1", "count": 1,
    }).json()["jobs"]  # fmt: skip
    assert len(fetched) >= 1 and fetched[0]["meta"]["tenant_id"] == "tenant-alpha"
    assert fetched[0]["args"][0]["action"] == "isolation-test-alpha"
    # EXT-MT-003: a tenant's stats, no header.
    app.call(
        "POST",
        "/ojs/v1/jobs",
        "tenant-stats-test",
        json={"type": "test.stats", "args": [], "options": {"queue": "conformance-tenant-stats"}},
    )
    stats = app.call("GET", "/ojs/v1/admin/tenants/tenant-stats-test/stats").json()
    assert stats["tenant_id"] == "tenant-stats-test" and isinstance(stats["total_jobs"], int)
    assert stats["total_jobs"] == 1
    # EXT-MT-004: GET /ojs/v1/queues/{name} with a tenant.
    queue = app.call("GET", "/ojs/v1/queues/conformance-tenant-stats", "tenant-stats-test")
    assert queue.status_code == 200 and queue.json()["queue"]["name"] == "conformance-tenant-stats"
    # EXT-MT-007: a batch, every job of the header's tenant.
    batch = app.call(
        "POST",
        "/ojs/v1/jobs/batch",
        "tenant-batch-corp",
        json={
            "jobs": [
                {"type": "test.batch", "args": [n], "options": {"queue": "q"}} for n in range(3)
            ]
        },
    )
    assert batch.status_code == 201, batch.text
    assert [j["meta"]["tenant_id"] for j in batch.json()["jobs"]] == ["tenant-batch-corp"] * 3
    # EXT-MT-008: another tenant's cancel finds no job; the job is still available.
    mine = app.call(
        "POST",
        "/ojs/v1/jobs",
        "tenant-cancel-a",
        json={"type": "test.cancel", "args": [], "options": {"queue": "q"}},
    ).json()["job"]["id"]
    cancel = app.call("POST", f"/ojs/v1/admin/jobs/{mine}/cancel", "tenant-cancel-b")
    assert cancel.status_code == 404
    assert app.call("DELETE", f"/ojs/v1/jobs/{mine}", "tenant-cancel-b").status_code == 404
    after = app.call("GET", f"/ojs/v1/jobs/{mine}", "tenant-cancel-a").json()["job"]
    assert after["state"] == "available"
    # The tenant's own pages.
    jobs = app.call("GET", "/ojs/v1/admin/tenants/tenant-batch-corp/jobs").json()
    assert jobs["pagination"]["total"] == 3 and len(jobs["items"]) == 3
    one = app.call("GET", "/ojs/v1/admin/tenants/tenant-batch-corp").json()
    assert one["stats"]["jobs"]["available"] == 3 and one["stats"]["queues"] == 1


def test_a_tenant_given_to_the_sdk_is_written_into_the_job_s_meta() -> None:
    job = {"type": "t.job", "args": [], "meta": {"trace": "x"}}
    assert for_tenant(job, "acme") == {**job, "meta": {"trace": "x", "tenant_id": "acme"}}
    assert for_tenant(job, None) is job
    assert for_tenant({**job, "meta": {"tenant_id": "acme"}}, "acme")["meta"] == {  # type: ignore[index]
        "tenant_id": "acme"
    }
    other = for_tenant({**job, "meta": {"tenant_id": "globex"}}, "acme")
    assert isinstance(other, GatewayError) and "'globex'" in other.message
    bad = for_tenant(job, "no tenant")
    assert isinstance(bad, GatewayError) and "tenant" in bad.message
    assert for_tenant([1], "acme") == [1]  # not a job: the parser says why
