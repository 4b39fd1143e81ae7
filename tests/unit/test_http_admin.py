"""The admin and ops routes at the edge: what they refuse (unknown filters, parameters and
body fields, wrong types, bad pagination, bodies where none is taken) and that a refusal
asks the processor nothing. The app runs on a real job view; the processor is a fake that
applies every event it is sent."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, cast

import httpx
import orjson
import pytest

from gateway.http.app import OPENAPI, HttpSettings, create_app
from gateway.http.binding import Binding
from gateway.sdk import EventAck
from gateway.view.store import JobView

JOB_IDS = [f"01900000-0000-7000-8000-00000000000{n}" for n in range(6)]
# The Admin UI's filter that cancelled every live job when `since`/`until` were ignored.
FUTURE = {"since": "2099-01-01T00:00:00Z", "until": "2099-01-02T00:00:00Z"}
MOVES = {"job.cancelled": "cancelled", "job.enqueued": "available"}


def a_job(n: int, state: str, queue: str = "mail", day: int = 1) -> dict[str, Any]:
    return {"id": JOB_IDS[n], "type": "mail.send", "queue": queue, "state": state,
            "args": [n], "created_at": f"2026-01-0{day}T12:00:00.000Z"}  # fmt: skip


JOBS = [
    a_job(0, "available", day=1), a_job(1, "active", day=2), a_job(2, "scheduled", day=3),
    a_job(3, "completed", day=1), a_job(4, "discarded", "reports", day=2),
    a_job(5, "discarded", "mail", day=3),
]  # fmt: skip


class Processor:
    """Applies every event it is sent, as the processor would a permitted move."""

    def __init__(self, view: JobView) -> None:
        self.view = view
        self.sent: list[dict[str, Any]] = []

    async def publish_event(self, event: dict[str, Any], **_: Any) -> EventAck:
        self.sent.append(event)
        job = self.view.get(event["job_id"])
        assert job is not None
        moved = {**job, "state": MOVES[event["type"]]}
        return EventAck.from_record({"outcome": "applied", "job_id": job["id"],
                                     "previous_state": job["state"], "state": moved["state"],
                                     "job": moved})  # fmt: skip


class Admin:
    def __init__(self, tmp_path: Path, jobs: list[dict[str, Any]]) -> None:
        self.view = JobView(tmp_path / "view")
        self.view.apply([(0, n, j["id"].encode(), orjson.dumps(j)) for n, j in enumerate(jobs)], 0)
        self.processor = Processor(self.view)
        settings = HttpSettings(bootstrap="127.0.0.1:1", namespace="unit", max_body_bytes=4096)
        self.app = create_app(settings)  # its lifespan is not run: the binding is this one
        self.app.state.binding = Binding(
            settings, cast(Any, self.processor), self.view, cast(Any, None), "requests"
        )

    def call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        async def go() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
                return await client.request(method, path, **kwargs)

        return asyncio.run(go())

    def bulk(self, action: str, body: object = None, **kwargs: Any) -> httpx.Response:
        if body is not None:
            kwargs["json"] = body
        return self.call("POST", f"/ojs/v1/admin/jobs/bulk/{action}", **kwargs)


@pytest.fixture
def admin(tmp_path: Path) -> Any:
    made = Admin(tmp_path, JOBS)
    yield made
    made.view.close()


def refusal(answer: httpx.Response, status: int = 400) -> str:
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert error["code"] in ("invalid_request", "unsupported_media_type", "payload_too_large")
    assert error["retryable"] is False and error["request_id"]
    return str(error["message"])


def test_a_time_filter_no_job_falls_in_cancels_nothing(admin: Admin):
    answer = admin.bulk("cancel", {"filter": FUTURE, "confirm": True})
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"action": "cancel", "matched": 0, "succeeded": 0, "failed": 0,
                             "errors": [], "remaining": 0}  # fmt: skip
    assert admin.processor.sent == []


def test_since_and_until_name_jobs_by_creation_time_in_lists_and_bulk_alike(admin: Admin):
    window = {"since": "2026-01-02T00:00:00Z", "until": "2026-01-02T23:59:59Z"}
    listed = admin.call("GET", "/ojs/v1/admin/jobs", params=window).json()
    assert sorted(j["id"] for j in listed["items"]) == [JOB_IDS[1], JOB_IDS[4]]
    assert listed["pagination"]["total"] == 2
    cancelled = admin.bulk("cancel", {"filter": window, "confirm": True}).json()
    assert (cancelled["matched"], cancelled["succeeded"]) == (1, 1)  # the discarded one is done
    assert [e["job_id"] for e in admin.processor.sent] == [JOB_IDS[1]]
    retried = admin.bulk("retry", {"filter": {"since": "2026-01-03T00:00:00Z"}, "confirm": True})
    assert retried.json()["matched"] == 1
    assert admin.processor.sent[-1] == {"job_id": JOB_IDS[5], "type": "job.enqueued"}


@pytest.mark.parametrize("action", ["cancel", "retry"])
@pytest.mark.parametrize(
    ("wanted", "named"),
    [({"queues": "mail"}, "filter.queues"), ({"queue": "mail", "statuses": "x"},
     "filter.statuses"), ({"created_after": "2026-01-01T00:00:00Z"}, "filter.created_after")],
)  # fmt: skip
def test_a_misspelt_filter_field_is_refused_by_name(
    admin: Admin, action: str, wanted: dict[str, Any], named: str
):
    assert named in refusal(admin.bulk(action, {"filter": wanted, "confirm": True}))
    assert admin.processor.sent == []


@pytest.mark.parametrize("action", ["cancel", "retry"])
@pytest.mark.parametrize("wanted", [[], False, None, "mail", 0, [{"queue": "mail"}]])
def test_a_filter_that_is_not_an_object_is_refused(admin: Admin, action: str, wanted: object):
    assert "filter must be an object" in refusal(
        admin.bulk(action, {"filter": wanted, "confirm": True})
    )
    assert admin.processor.sent == []


@pytest.mark.parametrize("queue", [5, ["a"], {"a": 1}, True, 1e300, "", "Mail", "a\u0000b"])
def test_a_queue_of_the_wrong_type_or_no_queue_name_is_400_not_500(admin: Admin, queue: object):
    message = refusal(admin.bulk("cancel", {"filter": {"queue": queue}, "confirm": True}))
    assert "filter.queue" in message
    assert admin.processor.sent == []


@pytest.mark.parametrize(
    ("wanted", "named"),
    [({"state": "dead"}, "filter.state"), ({"state": 3}, "filter.state"),
     ({"type": ["mail.send"]}, "filter.type"), ({"since": "yesterday"}, "filter.since"),
     ({"until": 1767225600}, "filter.until"), ({"since": "2026-01-02T00:00:00Z",
                                                "until": "2026-01-01T00:00:00Z"}, "filter.since")],
)  # fmt: skip
def test_every_filter_field_is_checked(admin: Admin, wanted: dict[str, Any], named: str):
    assert named in refusal(admin.bulk("cancel", {"filter": wanted, "confirm": True}))
    assert admin.processor.sent == []


@pytest.mark.parametrize(
    "body",
    [{"filter": {}, "confirm": True, "dry_run": True}, {"confirm": True, "queue": "mail"},
     {"filter": {}, "confirm": True, "": 1}],
)  # fmt: skip
def test_an_unknown_body_field_is_refused_by_name(admin: Admin, body: dict[str, Any]):
    message = refusal(admin.bulk("cancel", body))
    assert "unknown field" in message and admin.processor.sent == []
    assert set(body) - {"filter", "confirm"} <= set(
        admin.bulk("cancel", body).json()["error"]["details"]["unknown_fields"]
    )


@pytest.mark.parametrize("confirm", [None, False, "true", 1, [True]])
def test_without_confirm_true_nothing_is_done(admin: Admin, confirm: object):
    body: dict[str, Any] = {"filter": {}}
    if confirm is not None:
        body["confirm"] = confirm
    assert '"confirm": true' in refusal(admin.bulk("cancel", body))
    assert admin.processor.sent == []


def test_an_empty_filter_with_confirm_means_every_job_the_action_applies_to(admin: Admin):
    cancelled = admin.bulk("cancel", {"filter": {}, "confirm": True}).json()
    assert (cancelled["matched"], cancelled["succeeded"], cancelled["remaining"]) == (3, 3, 0)
    assert {e["job_id"] for e in admin.processor.sent} == set(JOB_IDS[:3])  # the live ones
    retried = admin.bulk("retry", {"confirm": True}).json()  # no filter: {}
    assert retried["matched"] == 2 and retried["succeeded"] == 2


@pytest.mark.parametrize(
    ("content", "headers", "status"),
    [(b"", {}, 400), (b"not json", {}, 400), (b"[]", {}, 400), (b'"x"', {}, 400),
     (b"{", {}, 400), (b'{"confirm": true}', {"content-type": "text/plain"}, 415),
     (b'{"filter": {}, "confirm": true, "x": "' + b"a" * 5000 + b'"}', {}, 413),
     (b'{"filter": {"queue": "\\ud800"}, "confirm": true}', {}, 400),
     (b'{"filter": {"since": 1e999}, "confirm": true}', {}, 400),
     (b'{"filter": {"queue": 123456789012345678901234567890}, "confirm": true}', {}, 400),
     (b'{"filter": ' + b"[" * 1500 + b"]" * 1500 + b', "confirm": true}', {}, 400)],
)  # fmt: skip
def test_a_body_that_is_no_bulk_request_is_refused(
    admin: Admin, content: bytes, headers: dict[str, str], status: int
):
    refusal(admin.bulk("cancel", content=content, headers=headers), status)
    assert admin.processor.sent == []


ROUTES = [
    "/ojs/v1/admin/stats", "/ojs/v1/admin/stats/history", "/ojs/v1/admin/queues",
    "/ojs/v1/admin/queues/mail", "/ojs/v1/admin/jobs", f"/ojs/v1/admin/jobs/{JOB_IDS[0]}",
    "/ojs/v1/admin/dead-letter", "/ojs/v1/admin/dead-letter/stats", "/ojs/v1/admin/workers",
    "/ojs/v1/unique-jobs", "/ojs/v1/dead-letter", "/ojs/v1/queues", "/ojs/v1/queues/mail/stats",
]  # fmt: skip


@pytest.mark.parametrize("path", ROUTES)
def test_an_unknown_query_parameter_is_refused_by_name(admin: Admin, path: str):
    assert admin.call("GET", path).status_code == 200
    answer = admin.call("GET", path, params={"queues": "mail", "ünï": "x"})
    assert "'queues'" in refusal(answer)
    assert answer.json()["error"]["details"]["unknown_parameters"] == ["queues", "ünï"]


@pytest.mark.parametrize("path", ["/ojs/v1/admin/jobs", "/ojs/v1/admin/dead-letter"])
def test_a_parameter_given_twice_is_refused(admin: Admin, path: str):
    assert "more than once" in refusal(admin.call("GET", f"{path}?queue=mail&queue=reports"))


def test_the_list_filters_are_checked_as_the_bulk_ones_are(admin: Admin):
    jobs = "/ojs/v1/admin/jobs"
    assert "state" in refusal(admin.call("GET", jobs, params={"state": "dead"}))
    assert "queue" in refusal(admin.call("GET", jobs, params={"queue": "Not A Queue"}))
    assert "since" in refusal(admin.call("GET", jobs, params={"since": "2026-01-01"}))
    backwards = {"since": FUTURE["until"], "until": FUTURE["since"]}
    assert "since is after" in refusal(admin.call("GET", jobs, params=backwards))
    assert "state" in refusal(admin.call("GET", "/ojs/v1/admin/dead-letter?state=discarded"))
    assert "queue" in refusal(admin.call("GET", "/ojs/v1/dead-letter", params={"queue": "a\x00"}))
    # An empty value is no filter, as a form sends it.
    assert admin.call("GET", f"{jobs}?queue=&state=&type=").json()["pagination"]["total"] == 6


@pytest.mark.parametrize(
    "value", ["0", "-1", "1.5", "1e3", "abc", " 1", "1_0", "\u0665", "9" * 5000, "2147483648"]
)
@pytest.mark.parametrize("name", ["page", "per_page"])
def test_pagination_is_a_plain_integer_in_range(admin: Admin, name: str, value: str):
    assert name in refusal(admin.call("GET", "/ojs/v1/admin/jobs", params={name: value}))


def test_huge_pages_and_limits_are_refused_or_answered_empty(admin: Admin):
    assert "per_page" in refusal(admin.call("GET", "/ojs/v1/admin/jobs?per_page=1001"))
    assert "limit" in refusal(admin.call("GET", "/ojs/v1/dead-letter?limit=1001"))
    last = admin.call("GET", "/ojs/v1/admin/jobs?page=2147483647&per_page=1000&type=mail.send")
    assert last.status_code == 200 and last.json()["items"] == []
    assert last.json()["pagination"]["total"] == 6
    sorted_page = admin.call("GET", "/ojs/v1/admin/jobs?page=2147483647&sort=scheduled_at")
    assert sorted_page.json()["items"] == []


def test_huge_filter_values_are_refused_or_match_nothing(admin: Admin):
    assert "queue" in refusal(admin.call("GET", "/ojs/v1/admin/jobs", params={"queue": "q" * 9999}))
    huge_type = admin.call("GET", "/ojs/v1/admin/jobs", params={"type": "t" * 60_000})
    assert huge_type.status_code == 200 and huge_type.json()["pagination"]["total"] == 0
    assert "since" in refusal(admin.call("GET", "/ojs/v1/admin/jobs", params={"since": "9" * 9999}))
    assert admin.call("GET", f"/ojs/v1/admin/jobs/{'x' * 60_000}").status_code == 404


def test_unicode_filters_and_ids_are_answered_not_failed(admin: Admin):
    typed = admin.call("GET", "/ojs/v1/admin/jobs", params={"type": "メール.送信"})
    assert typed.status_code == 200 and typed.json()["pagination"]["total"] == 0
    assert admin.call("GET", "/ojs/v1/admin/jobs/ジョブ").status_code == 404
    assert admin.call("GET", "/ojs/v1/admin/queues/ünï").status_code == 404


@pytest.mark.parametrize(
    ("method", "path"),
    [("POST", f"/ojs/v1/admin/jobs/{JOB_IDS[5]}/retry"),
     ("POST", f"/ojs/v1/admin/jobs/{JOB_IDS[0]}/cancel"),
     ("POST", f"/ojs/v1/admin/dead-letter/{JOB_IDS[5]}/retry"),
     ("POST", f"/ojs/v1/dead-letter/{JOB_IDS[5]}/retry")],
)  # fmt: skip
def test_a_route_that_takes_no_body_refuses_one_with_fields(admin: Admin, method: str, path: str):
    assert "'force'" in refusal(admin.call(method, path, json={"force": True}))
    assert "no body" in refusal(admin.call(method, path, json=[1]))
    refusal(admin.call(method, path, content=b"{"))
    assert "x" in refusal(admin.call(method, path, params={"x": "1"}))
    assert admin.processor.sent == []
    # As the Admin UI sends it: a JSON content type and no body (or `{}`).
    answer = admin.call(method, path, headers={"content-type": "application/json"})
    assert answer.status_code == 200, answer.text
    assert len(admin.processor.sent) == 1


def test_the_admin_ui_and_the_python_sdk_requests_are_understood(admin: Admin):
    sent = [
        "/ojs/v1/admin/stats", "/ojs/v1/admin/stats/history?period=5m",
        "/ojs/v1/admin/stats/history?period=1h&since=2026-01-01T00:00:00Z&queue=mail",
        "/ojs/v1/admin/queues?page=1&per_page=50",
        "/ojs/v1/admin/jobs?queue=mail&state=available&type=mail.send&page=1&per_page=25",
        "/ojs/v1/admin/jobs?since=2026-01-01T00:00:00Z&until=2026-01-02T00:00:00Z&sort="
        "scheduled_at&order=desc", "/ojs/v1/admin/dead-letter?page=1&per_page=25",
        "/ojs/v1/admin/workers?page=1&per_page=50", "/ojs/v1/unique-jobs?page=1&per_page=50",
        "/ojs/v1/dead-letter?limit=50&offset=0&queue=mail",
    ]  # fmt: skip
    for path in sent:
        answer = admin.call("GET", path)
        assert answer.status_code == 200, (path, answer.text)


def test_the_query_parameters_served_are_those_the_document_describes(admin: Admin):
    """Every parameter openapi.json lists for a route is understood, and the route refuses
    one it does not list: the document and the code agree."""
    doc = orjson.loads(OPENAPI.read_bytes())
    for path in ROUTES:
        template = path.replace("/mail", "/{name}").replace(JOB_IDS[0], "{job_id}")
        listed = [p["name"] for p in doc["paths"][template]["get"].get("parameters", [])
                  if p.get("in") == "query"]  # fmt: skip
        for name in listed:
            answer = admin.call("GET", path, params={name: ""})
            assert answer.status_code == 200, (path, name, answer.text)
        assert admin.call("GET", path, params={"not_listed": "1"}).status_code == 400


def test_the_dead_letter_pages_bulk_retry_retries_the_dead_jobs_a_filter_names(admin: Admin):
    path = "/ojs/v1/admin/dead-letter/retry"
    assert '"filter.state"' in refusal(
        admin.call("POST", path, json={"filter": {"state": "completed"}, "confirm": True})
    )
    assert '"confirm": true' in refusal(admin.call("POST", path, json={"filter": {}}))
    assert admin.processor.sent == []
    only = admin.call("POST", path, json={"filter": {"queue": "reports"}, "confirm": True})
    assert only.json()["matched"] == 1 and admin.processor.sent[0]["job_id"] == JOB_IDS[4]
    # As the UI's Bulk Retry All sends it.
    every = admin.call("POST", path, json={"filter": {}, "confirm": True}).json()
    assert (every["action"], every["matched"], every["succeeded"]) == ("retry", 1, 1)
    assert admin.processor.sent[-1] == {"job_id": JOB_IDS[5], "type": "job.enqueued"}


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", f"/ojs/v1/jobs/{JOB_IDS[0]}"), ("DELETE", f"/ojs/v1/jobs/{JOB_IDS[0]}"),
     ("POST", "/ojs/v1/jobs"), ("POST", "/ojs/v1/jobs/batch"),
     *(("POST", f"/ojs/v1/workers/{w}") for w in ("fetch", "ack", "nack", "heartbeat"))],
)  # fmt: skip
def test_the_job_and_worker_routes_take_no_query_parameter(admin: Admin, method: str, path: str):
    answer = admin.call(method, path, params={"queue": "mail"}, json={"type": "x", "args": []})
    assert "'queue'" in refusal(answer) and "takes none" in answer.json()["error"]["message"]
    assert admin.processor.sent == []


def test_thousands_of_repeated_parameters_are_refused_at_once(admin: Admin):
    answer = admin.call("GET", "/ojs/v1/admin/jobs?" + "&".join(["page=1"] * 8_000))
    assert "more than once" in refusal(answer)
