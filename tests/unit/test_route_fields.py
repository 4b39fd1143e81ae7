"""The queue and cron routes refuse a body field or query parameter they do not take, by
name, before anything is sent; what the official SDK and Admin UI send is taken."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.http.answers import Answer
from gateway.http.plumbing import unknown_fields
from tests.http_requests import Handler, bound, call, refusal, refused, request, route

PAUSE = route("POST", "/ojs/v1/queues/{name}/pause")
RESUME = route("POST", "/ojs/v1/queues/{name}/resume")
PAUSE_ROUTES = [PAUSE, RESUME]
QUEUE_STATS = route("GET", "/ojs/v1/queues/{name}/stats")
QUEUES = route("GET", "/ojs/v1/queues")
CRONS = route("GET", "/ojs/v1/cron")
REGISTER = route("POST", "/ojs/v1/cron")
CRON = route("GET", "/ojs/v1/cron/{name}")
TOGGLE = route("PATCH", "/ojs/v1/cron/{name}")
DELETE = route("DELETE", "/ojs/v1/cron/{name}")


class Commands:
    """A processor of one partition that applies every queue and cron command."""

    def __init__(self) -> None:
        self.sent: list[Any] = []

    async def partitions(self, timeout: float) -> int:
        return 1

    async def send_commands(self, commands: list[Any], **_: Any) -> list[dict[str, Any]]:
        self.sent.extend(commands)
        queue = {"queue": "q", "paused": True, "status": "paused", "version": [1, "a"]}
        cron_state = {"name": "c", "enabled": False}
        return [{"outcome": "applied", "queue": queue, "cron": cron_state} for _ in commands]


class View:
    def __init__(self, queue: dict[str, Any] | None = None) -> None:
        self.queue = queue

    def controls(self, prefix: bytes) -> dict[str, dict[str, Any]]:
        return {} if self.queue is None else {"": self.queue}

    def queue_answered(self, state: dict[str, Any]) -> None:
        pass

    def control_answered(self, key: bytes, state: object) -> None:
        pass


def answering_binding(queue: dict[str, Any] | None = None) -> Any:
    return bound(view=View(queue), client=Commands())


@pytest.mark.parametrize("handler", PAUSE_ROUTES)
@pytest.mark.parametrize(
    "body",
    [{}, {"body": {}}, {"raw": b""}],
    ids=["no body (the SDK, the Admin UI)", "an empty object", "an empty body"],
)
def test_pause_and_resume_take_no_body_or_an_empty_object(handler: Handler, body: dict[str, Any]):
    binding = answering_binding()
    answer = call(handler, request(**body, name="q"), binding)
    assert isinstance(answer, Answer) and answer.status == 200 and len(binding.client.sent) == 1


@pytest.mark.parametrize("handler", PAUSE_ROUTES)
def test_pause_and_resume_refuse_a_body_field_by_name(handler: Handler):
    refused = refusal(handler, request({"queue": "other", "reason": "x"}, name="q"))
    assert "'queue'" in refused.message and "'reason'" in refused.message


@pytest.mark.parametrize("handler", PAUSE_ROUTES)
@pytest.mark.parametrize("raw", [b"[]", b"null", b"true", b"not json", b"{"])
def test_pause_and_resume_refuse_a_body_that_is_no_object(handler: Handler, raw: bytes):
    refusal(handler, request(raw=raw, name="q"))


@pytest.mark.parametrize(
    ("handler", "known"),
    [(PAUSE, ()), (RESUME, ()), (QUEUE_STATS, ()), (QUEUES, ("limit", "offset")),
     (CRONS, ("limit", "offset")), (CRON, ()), (TOGGLE, ()), (DELETE, ()), (REGISTER, ())],
)  # fmt: skip
def test_a_query_parameter_a_route_does_not_take_is_refused_by_name(
    handler: Handler, known: tuple[str, ...]
):
    for param in ("queue", "state", "name", "limit", "offset"):
        if param in known:
            continue
        refused = refusal(handler, request({}, query=f"{param}=x", name="q"))
        assert repr(param) in refused.message


@given(st.text(min_size=1, max_size=20))
def test_any_unknown_name_is_refused_and_named(name: str):
    problem = refused(unknown_fields, {name: 1}, ("limit", "offset"), "the query")
    assert (problem is None) == (name in ("limit", "offset"))
    if problem is not None:
        assert problem.details["unknown_fields"] == [name]


def test_the_sdk_lists_crons_with_limit_and_offset():
    view = SimpleNamespace(controls=lambda prefix: {})
    binding = bound(view=view)
    answer = call(CRONS, request(query="limit=50&offset=0", method="GET"), binding)
    assert isinstance(answer, Answer) and answer.body["crons"] == []


@pytest.mark.parametrize(
    ("body", "named"),
    [({"enabled": False, "name": "c"}, "'name'"), ({"enable": True}, "'enable'"),
     ({}, "enabled"), ({"enabled": "false"}, "enabled"), ({"enabled": None}, "enabled"),
     ([], "enabled")],
)  # fmt: skip
def test_patch_takes_exactly_enabled_and_names_what_else_it_was_sent(body: object, named: str):
    assert named in refusal(TOGGLE, request(body, method="PATCH", name="c")).message


@pytest.mark.parametrize("enabled", [True, False])
def test_patch_as_the_admin_ui_sends_it(enabled: bool):
    binding = answering_binding()
    answer = call(TOGGLE, request({"enabled": enabled}, method="PATCH", name="c"), binding)
    assert isinstance(answer, Answer) and answer.status == 200


def test_delete_takes_no_body_field():
    refused = refusal(DELETE, request({"force": True}, method="DELETE", name="c"))
    assert "'force'" in refused.message
    answer = call(DELETE, request(method="DELETE", name="c"), answering_binding())
    assert isinstance(answer, Answer) and answer.body["deleted"] is True


@pytest.mark.parametrize("name", ["C", "a b", "-a", "a/b", "é", "a" * 256, ""])
@pytest.mark.parametrize("handler", [CRON, TOGGLE, DELETE])
def test_a_path_that_names_no_cron_is_refused(handler: Handler, name: str):
    body = {"enabled": True} if handler is TOGGLE else None  # what each route takes
    assert "name" in refusal(handler, request(body, name=name)).message


@pytest.mark.parametrize("name", ["Q", "a b", "-q", "é", "q" * 256, ""])
@pytest.mark.parametrize("handler", [*PAUSE_ROUTES, QUEUE_STATS])
def test_a_path_that_names_no_queue_is_refused(handler: Handler, name: str):
    assert "queue name" in refusal(handler, request(name=name)).message


@pytest.mark.parametrize(
    "value", ["\uff11\uff10", "1_0", " 7", "7 ", "+3", "-1", "0x10", "9" * 5000]
)
@pytest.mark.parametrize("param", ["limit", "offset"])
@pytest.mark.parametrize("handler", [CRONS, QUEUES])
def test_a_page_parameter_is_ascii_digits(handler: Handler, param: str, value: str):
    from urllib.parse import quote

    refused = refusal(handler, request(query=f"{param}={quote(value)}", method="GET"))
    assert param in refused.message


@pytest.mark.parametrize("handler", PAUSE_ROUTES)
def test_a_command_is_versioned_past_the_state_this_view_holds(handler: Handler):
    from gateway.core.queues import QueueCommand, parse_queue_command

    ahead = 2**45  # a state another serve process sent with its clock far ahead of ours
    binding = answering_binding({"queue": "q", "paused": True, "version": [ahead, "z"]})
    call(handler, request(name="q"), binding)
    commands = [parse_queue_command(o.value) for o in binding.client.sent]
    assert all(isinstance(c, QueueCommand) and c.version[0] == ahead + 1 for c in commands)
