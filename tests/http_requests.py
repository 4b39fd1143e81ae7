"""Starlette requests and a binding for calling route handlers directly in unit tests, or a
route as the app serves it, with the checks its declaration adds (query, body)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine
from types import SimpleNamespace
from typing import Any

import orjson
from starlette.requests import Request
from starlette.routing import Route

from gateway.http.answers import Answer
from gateway.http.app import create_app
from gateway.http.binding import HttpSettings
from gateway.http.enqueue_rate import EnqueueRate
from gateway.http.errors import ApiError

Handler = Callable[[Request, Any, str], Coroutine[Any, Any, Answer]]
# A handler's answer, or the ApiError it raised (as endpoint answers it).
Answered = Answer | ApiError


def request(
    body: object = None,
    *,
    raw: bytes | None = None,
    query: str = "",
    method: str = "POST",
    headers: dict[str, str] | None = None,
    **path_params: str,
) -> Request:
    """A request with `body` as JSON (or `raw` bytes; neither: no body at all), and
    `headers` besides its content type and length."""
    data = raw if raw is not None else (b"" if body is None else json.dumps(body).encode())
    sent_headers = [(b"content-type", b"application/json")]
    sent_headers += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    if body is not None or raw is not None:
        sent_headers.append((b"content-length", str(len(data)).encode()))
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": data, "more_body": False}

    scope = {
        "type": "http", "method": method, "path": "/", "query_string": query.encode(),
        "headers": sent_headers, "path_params": path_params,
    }  # fmt: skip
    return Request(scope, receive)


class Untouchable:
    """Any use fails the test: a refusal must come before the binding asks anything."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the route reached for {name} before refusing")


async def _live() -> None:
    return None


def refusing_binding() -> Any:
    return SimpleNamespace(
        settings=HttpSettings(), view=Untouchable(), client=Untouchable(), view_live=_live,
        watcher=None, enqueue_rate=EnqueueRate(0),
    )  # fmt: skip


def bound(**parts: Any) -> Any:
    """A binding of `parts` (view, client...) whose view is live."""
    return SimpleNamespace(
        settings=HttpSettings(), view_live=_live, watcher=None, enqueue_rate=EnqueueRate(0),
        **parts,
    )  # fmt: skip


_APP = create_app(HttpSettings())  # for its routes: its lifespan never runs


def route(method: str, path: str) -> Handler:
    """The route the app serves at `path` (a template) for `method`, its declared checks
    included, called as a handler is: (request, binding, request id) -> answer."""
    found = [
        r.endpoint for r in _APP.routes
        if isinstance(r, Route) and r.path == path and method in (r.methods or ())
    ]  # fmt: skip
    if not found:
        raise LookupError(f"no route {method} {path}")
    serve = found[0]

    async def handle(req: Request, binding: Any, _: str) -> Answer:
        req.scope["app"] = SimpleNamespace(state=SimpleNamespace(binding=binding))
        response = await serve(req)
        body = orjson.loads(response.body)
        if response.status_code < 400:
            return Answer(response.status_code, body)
        error = body["error"]
        raise ApiError(response.status_code, error["code"], error["message"],
                       error.get("retryable", False), error.get("details") or {})  # fmt: skip

    return handle


def call(handler: Handler, req: Request, binding: Any = None) -> Answered:
    """The handler's answer, or the ApiError it raised."""
    try:
        return asyncio.run(handler(req, binding or refusing_binding(), "r"))
    except ApiError as error:
        return error


def refused(check: Callable[..., Any], *args: Any) -> Any:
    """What `check(*args)` returns, or the ApiError it raises."""
    try:
        return check(*args)
    except ApiError as error:
        return error


def refusal(handler: Handler, req: Request) -> ApiError:
    """The handler's 400, asserted to come before the binding is touched."""
    answer = call(handler, req)
    assert isinstance(answer, ApiError), answer
    assert answer.status == 400 and answer.code == "invalid_request", answer
    return answer
