"""Who may call which route: every route of the table walked for each role, queue
patterns, forged and odd Authorization headers, and refusals that change nothing. The
app runs on a real job view and a real credentials file; the processor is a fake that
applies every event it is sent (as in test_http_admin.py). What a principal of some
queues sees of the routes that read across them: test_http_scope.py."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, cast

import httpx
import orjson
import pytest
from starlette.routing import Route

from gateway.auth import bearer, credentials, keys, roles
from gateway.auth.keyring import Watcher
from gateway.http import access, shared
from gateway.http.app import HttpSettings, create_app
from gateway.http.binding import Binding
from gateway.view.store import JobView
from tests.unit.test_http_admin import JOB_IDS, JOBS, Processor

# One principal per role, reaching every queue; and some reaching only "reports".
PRINCIPALS = {
    **{role: (role, None, ["*"]) for role in roles.ROLES},
    "reports-admin": (None, list(roles.OPERATIONS), ["reports"]),
    "reports-worker": ("worker", None, ["reports", "reports.*"]),
    "mail-producer": ("producer", None, ["mail"]),
}
# What fills a route's path parameters: JOB_IDS[0] is a job of queue "mail".
PARAMS = {"job_id": JOB_IDS[0], "name": "mail", "action": "cancel", "key": "k", "tenant_id": "t"}
DEAD_JOB = JOB_IDS[5]  # discarded, of queue "mail"
# The bodies that name a queue, or a job (JOB_IDS[1]: active, of queue "mail").
MAIL_JOB = {"type": "mail.send", "args": [], "queue": "mail"}
BODIES: dict[str, Any] = {
    "/ojs/v1/jobs": MAIL_JOB,
    "/ojs/v1/jobs/batch": {"jobs": [MAIL_JOB]},
    "/ojs/v1/workers/fetch": {"queues": ["mail"]},
    "/ojs/v1/workers/ack": {"job_id": JOB_IDS[1]},
    "/ojs/v1/workers/nack": {"job_id": JOB_IDS[1], "error": {"message": "no"}},
}


Principals = dict[str, tuple[str | None, list[str] | None, list[str]]]


class Gateway:
    def __init__(
        self, tmp_path: Path, principals: Principals = PRINCIPALS,
        jobs: list[dict[str, Any]] = JOBS,
    ) -> None:  # fmt: skip
        self.path = tmp_path / "credentials.toml"
        self.keys: dict[str, str] = {}
        made: tuple[credentials.Principal, ...] = ()
        for name, (role, operations, queues) in principals.items():
            self.keys[name] = keys.new_key()
            new = credentials.principal(name, role, operations, queues)
            made = credentials.with_key(made, name, self.keys[name], 0, new=new)
        credentials.save(self.path, made)
        self.view = JobView(tmp_path / "view")
        self.view.apply([(0, n, j["id"].encode(), orjson.dumps(j)) for n, j in enumerate(jobs)], 0)
        self.processor = Processor(self.view)
        settings = HttpSettings(bootstrap="127.0.0.1:1", namespace="unit", credentials=self.path)
        self.app = create_app(settings)
        self.watcher = Watcher(self.path)
        self.app.state.binding = Binding(
            settings, cast(Any, self.processor), self.view, cast(Any, None), "requests",
            watcher=self.watcher,
        )  # fmt: skip

    def call(self, method: str, path: str, key: str | None = None, **kwargs: Any) -> httpx.Response:
        given = kwargs.pop("headers", {})
        headers = list(given.items() if isinstance(given, dict) else given)
        if key is not None:
            headers.append(("Authorization", f"Bearer {key}"))

        async def go() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app, raise_app_exceptions=False)
            async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
                return await client.request(method, path, headers=headers, **kwargs)

        return asyncio.run(go())


@pytest.fixture
def gateway(tmp_path: Path) -> Any:
    with pytest.MonkeyPatch.context() as patch:
        # The fake processor's answers never reach the view: no waiting for them to.
        patch.setattr(shared, "QUEUE_SETTLE_S", 0.0)
        made = Gateway(tmp_path)
        yield made
        made.view.close()


def routes(gateway: Gateway) -> list[tuple[str, str, access.Need]]:
    """Every method and path the app serves, its parameters filled, and its need."""
    found = []
    for route in gateway.app.routes:
        assert isinstance(route, Route)
        need = access.need_of(route.endpoint)
        assert need is not None, f"{route.path} has no operation: name one in the route table"
        params = (
            {**PARAMS, "job_id": DEAD_JOB}
            if route.path.endswith(("retry", "dead-letter/{job_id}"))
            else PARAMS
        )
        path = route.path.format(**params)
        found += [
            (method, path, need) for method in sorted(route.methods or ()) if method != "HEAD"
        ]
    return found


def granted(name: str, need: access.Need) -> bool:
    role, operations, _ = PRINCIPALS[name]
    return need is access.OPEN or need.operation in roles.operations_of(role, operations)


def allowed(name: str, need: access.Need) -> bool:
    queues = PRINCIPALS[name][2]
    # A route of one queue here touches queue "mail" (PARAMS, BODIES); one that reads
    # across queues lets in any principal with its operation (and shows it its queues).
    reached = (
        "*" in queues or need.queues == access.REACHED
        or (need.queues == access.ONE and "mail" in queues)
    )  # fmt: skip
    return granted(name, need) and (need is access.OPEN or reached)


def names_a_job(path: str) -> bool:
    """Whether the route names a job of queue "mail", by its id in the path or the body."""
    return JOB_IDS[0] in path or DEAD_JOB in path or path.endswith(("/ack", "/nack"))


def test_every_route_names_what_it_needs_and_only_health_and_descriptions_are_open(
    gateway: Gateway,
):
    walked = routes(gateway)
    assert len(walked) >= 40
    open_paths = {path for _, path, need in walked if need is access.OPEN}
    assert open_paths == {"/openapi.json", "/ojs/manifest", "/ojs/v1/health", "/ojs/v1/health/live"}


@pytest.mark.parametrize("name", list(PRINCIPALS))
def test_each_role_is_let_through_or_refused_on_every_route_as_the_matrix_says(
    gateway: Gateway, name: str
):
    for method, path, need in routes(gateway):
        if path == "/ojs/v1/health":
            continue  # asks Kafka: health is walked in the integration tests
        sent_before = len(gateway.processor.sent)
        answer = gateway.call(method, path, gateway.keys[name], json=BODIES.get(path, {}))
        if allowed(name, need) or (path.endswith("heartbeat") and granted(name, need)):
            # A heartbeat's answer for a job it may not reach is that job's, in a 200 (below).
            assert answer.status_code not in (401, 403), (name, method, path, answer.text)
            continue
        if granted(name, need) and names_a_job(path):
            # A job of a queue the principal does not reach is as one that does not exist.
            assert answer.status_code == 404, (name, method, path, answer.text)
            assert answer.json()["error"]["code"] == "not_found"
            assert len(gateway.processor.sent) == sent_before
            continue
        assert answer.status_code == 403, (name, method, path, answer.text)
        error = answer.json()["error"]
        assert error["code"] == "permission_denied"
        assert error["details"]["principal"] == name
        assert error["details"]["operation"] == need.operation
        assert need.operation in error["message"]
        assert len(gateway.processor.sent) == sent_before, "a refusal asks the processor nothing"


def test_without_a_key_every_route_but_the_open_ones_is_401_naming_the_scheme(gateway: Gateway):
    for method, path, need in routes(gateway):
        if need is access.OPEN:
            continue
        answer = gateway.call(method, path, json={})
        assert answer.status_code == 401, (method, path)
        assert answer.json()["error"]["code"] == "unauthenticated"
        assert answer.headers["www-authenticate"].startswith("Bearer")


@pytest.mark.parametrize(
    "header",
    [
        "", "Bearer", "Bearer ", "Basic dXNlcjpwYXNz", "bearer gk_not-a-key", "Token gk_x",
        "Bearer gk_" + "A" * 43, "Bearer " + "x" * 100_000, "Bearer \x00", "Bearer a b c",
    ],
)  # fmt: skip
def test_a_forged_empty_or_oversized_authorization_is_401(gateway: Gateway, header: str):
    answer = gateway.call("GET", "/ojs/v1/admin/stats", headers={"Authorization": header})
    assert answer.status_code == 401, answer.text
    assert answer.json()["error"]["code"] == "unauthenticated"


def test_two_authorization_headers_are_refused_even_when_both_are_good(gateway: Gateway):
    good = f"Bearer {gateway.keys['admin']}"
    answer = gateway.call(
        "GET", "/ojs/v1/admin/stats", headers=[("Authorization", good), ("Authorization", good)]
    )
    assert answer.status_code == 401
    assert "one Authorization header" in answer.json()["error"]["message"]


def test_a_key_with_a_changed_character_or_another_principals_name_is_refused(
    gateway: Gateway,
):
    key = gateway.keys["admin"]
    flipped = key[:-1] + ("A" if key[-1] != "A" else "B")
    assert gateway.call("GET", "/ojs/v1/admin/stats", flipped).status_code == 401
    # The producer's key is a good key: it gets the producer's rights, not more.
    assert gateway.call("GET", "/ojs/v1/admin/stats", gateway.keys["producer"]).status_code == 403


def test_a_worker_may_not_ack_a_job_of_a_queue_it_does_not_reach(gateway: Gateway):
    before = len(gateway.processor.sent)
    body = {"job_id": JOB_IDS[1], "result": {}}  # an active job of queue "mail"
    answer = gateway.call("POST", "/ojs/v1/workers/ack", gateway.keys["reports-worker"], json=body)
    assert answer.status_code == 404, answer.text
    assert answer.json()["error"]["details"] == {"resource_type": "job", "resource_id": JOB_IDS[1]}
    assert len(gateway.processor.sent) == before
    fetched = gateway.call(
        "POST", "/ojs/v1/workers/fetch", gateway.keys["reports-worker"], json={"queues": ["mail"]}
    )
    assert fetched.status_code == 403
    beat = gateway.call(
        "POST", "/ojs/v1/workers/heartbeat", gateway.keys["reports-worker"],
        json={"worker_id": "w", "active_jobs": [JOB_IDS[1]]},
    )  # fmt: skip
    assert beat.status_code == 200
    assert beat.json()["jobs"][0]["error"]["code"] == "not_found"
    assert len(gateway.processor.sent) == before


def test_a_producer_enqueues_only_to_its_queues_and_a_batch_all_or_nothing(gateway: Gateway):
    key = gateway.keys["mail-producer"]
    job = {"type": "mail.send", "args": [], "queue": "reports"}
    answer = gateway.call("POST", "/ojs/v1/jobs", key, json=job)
    assert answer.status_code == 403
    assert answer.json()["error"]["details"]["queue"] == "reports"
    default = gateway.call("POST", "/ojs/v1/jobs", key, json={"type": "mail.send", "args": []})
    assert default.json()["error"]["details"]["queue"] == "default"
    batch = {"jobs": [{**job, "queue": "mail"}, job]}
    assert gateway.call("POST", "/ojs/v1/jobs/batch", key, json=batch).status_code == 403
    assert gateway.call("POST", "/ojs/v1/admin/jobs/bulk/cancel", key, json={}).status_code == 403


def test_a_principal_of_some_queues_may_not_change_across_them_all(gateway: Gateway):
    body = {"filter": {}, "confirm": True}
    key = gateway.keys["reports-admin"]
    answer = gateway.call("POST", "/ojs/v1/admin/jobs/bulk/cancel", key, json=body)
    assert answer.status_code == 403
    assert "every queue" in answer.json()["error"]["message"]
    assert gateway.processor.sent == []
    listed = gateway.call("GET", "/ojs/v1/admin/jobs", key)
    assert [job["queue"] for job in listed.json()["items"]] == ["reports"]
    stats = gateway.call("GET", "/ojs/v1/queues/reports/stats", gateway.keys["reports-admin"])
    assert stats.status_code not in (401, 403)
    other = gateway.call("GET", "/ojs/v1/queues/mail/stats", gateway.keys["reports-admin"])
    assert other.status_code == 403


def test_a_wrong_key_costs_no_slow_hash_and_a_right_one_one_per_process(
    gateway: Gateway, monkeypatch: pytest.MonkeyPatch
):
    """A wrong key is looked up by its SHA-256 and missed: no scrypt, so no amplifier. A
    right one is hashed once, then found by its digest."""
    hashed: list[str] = []
    slow = keys._scrypt

    def counted(key: str, *args: Any) -> bytes:
        hashed.append(key)
        return slow(key, *args)

    monkeypatch.setattr(keys, "_scrypt", counted)
    ring = gateway.watcher.current()
    for _ in range(100):
        with pytest.raises(bearer.Unauthenticated):
            bearer.authenticate(ring, [f"Bearer {keys.new_key()}"], None)
    assert hashed == []
    good = gateway.keys["admin"]
    for _ in range(100):
        assert bearer.authenticate(ring, [f"Bearer {good}"], None).name == "admin"
    assert hashed == [good]


def test_a_keyless_principal_is_who_calls_from_its_networks_with_no_header(tmp_path: Path):
    path = tmp_path / "c.toml"
    viewer = credentials.principal("ui", "read-only", None, ["*"], ["127.0.0.1/32"])
    credentials.save(path, (viewer,))
    ring = Watcher(path).current()
    assert ring.keyless("127.0.0.1") == viewer
    assert ring.keyless("10.0.0.1") is None and ring.keyless("not an address") is None
