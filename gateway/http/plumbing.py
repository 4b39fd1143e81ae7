"""Per-request plumbing shared by the routes: request id, access, the JSON body,
and the one place an ApiError a route raises becomes its answer (`endpoint`)."""

from __future__ import annotations

import asyncio
import logging
import re
from collections import Counter
from collections.abc import Awaitable, Callable, Collection, Iterable
from typing import Any

import orjson
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from gateway.core import INVALID_REQUEST, PAYLOAD_TOO_LARGE
from gateway.core.limits import rounded_integer_problem
from gateway.http import access, errors, security
from gateway.http.access import Need
from gateway.http.binding import Binding, Handler
from gateway.http.errors import ApiError
from gateway.http.responses import (
    ACCEPTED_MEDIA_TYPES,
    JSON_TYPE,
    error_response,
    negotiate,
    ojs_response,
)
from gateway.randomness import random_uuid4

log = logging.getLogger("gateway.http")
# A body not whole this long after its first read is 408 (OJS security §10.3 allows 60 s
# at most): a caller sending a byte a minute holds a request, and its client's place.
BODY_READ_S = 30.0


def request_id_of(request: Request) -> str:
    return request.headers.get("x-request-id") or random_uuid4()


def media_type_of(request: Request) -> str:
    """The type the caller reads (Accept, and its User-Agent: see `negotiate`): the OJS
    type, or plain application/json; always the latter when the deployment says so
    (`serve --json-responses`)."""
    binding = getattr(request.app.state, "binding", None)
    if binding is not None and binding.settings.json_responses:
        return JSON_TYPE
    headers = request.headers
    return negotiate(headers.get("accept"), headers.get("user-agent"), headers.get("ojs-version"))


def endpoint(
    handler: Handler, need: Need, *, query: Collection[str] | None = None, body: bool = True
) -> Callable[[Request], Awaitable[Response]]:
    """Request id, who calls and whether they may (`need`: access.py), what the route
    takes, a live view, then the handler; its value becomes the response (a handler may
    also return a ready-made Response, as the event stream does), and an ApiError raised
    on the way the OJS error envelope: the one place routes' errors are answered. `query`
    names the query parameters the route understands (None: not checked here);
    `body=False` says it takes no body. A parameter or body field a route does not
    understand is refused, never ignored: ignored, it would widen what the caller asked
    for. A privileged or refused request leaves its line in the security log
    (security.py)."""

    async def handle(request: Request) -> Response:
        request_id = request_id_of(request)
        binding: Binding = request.app.state.binding
        media_type = media_type_of(request)
        try:
            caller = await access.check(request, binding.watcher, need)
        except ApiError as error:
            security.note(request, handler, request_id, error.status)
            return error_response(error, request_id, media_type)
        try:
            if query is not None:
                unknown_params(request, query)
            if not body:
                await no_body(request, binding.settings.max_body_bytes)
            await binding.view_live()
            answer = await handler(request, binding, request_id)
        except ApiError as error:
            security.note(request, handler, request_id, error.status)
            return error_response(error, request_id, media_type)
        finally:
            access.done(caller)
        if isinstance(answer, Response):
            security.note(request, handler, request_id, answer.status_code)
            return answer
        security.note(request, handler, request_id, answer.status)
        return ojs_response(answer.status, answer.body, request_id, answer.headers, media_type)

    access.mark(handle, need)
    return handle


# A name longer than this is cut where it is shown: it is the caller's input.
_SHOWN_CHARS = 64


def unknown_params(request: Request, known: Collection[str]) -> None:
    """400 naming each query parameter the route does not take, or one given twice."""
    names = [name for name, _ in request.query_params.multi_items()]
    unknown = sorted({_shown(name) for name in names if name not in known})
    if unknown:
        takes = ", ".join(sorted(known)) or "none"
        raise ApiError(
            400, INVALID_REQUEST,
            f"unknown query parameter {', '.join(map(repr, unknown))}: this route takes {takes}",
            details={"unknown_parameters": unknown},
        )  # fmt: skip
    repeated = sorted(_shown(name) for name, count in Counter(names).items() if count > 1)
    if repeated:
        raise ApiError(400, INVALID_REQUEST,
                       f"query parameter {', '.join(map(repr, repeated))} is given more than "
                       "once: give each once")  # fmt: skip


def unknown_fields(given: Iterable[str], known: Collection[str], where: str = "the body") -> None:
    """400 naming each field of `where` the route does not take."""
    unknown = sorted({_shown(name) for name in given if name not in known})
    if not unknown:
        return
    raise ApiError(
        400, INVALID_REQUEST,
        f"unknown field {', '.join(map(repr, unknown))} in {where}: this route takes "
        f"{', '.join(sorted(known)) or 'no body'}",
        details={"unknown_fields": unknown},
    )  # fmt: skip


async def no_body(request: Request, cap: int) -> None:
    """Nothing for a request with no body (or `{}`); a route that takes none refuses any
    other."""
    raw = await read_body(request, cap)
    if not raw.strip():
        return
    _check_media_type(request)
    value = parse_json(raw)
    if not isinstance(value, dict):
        raise ApiError(400, INVALID_REQUEST, "this route takes no body")
    unknown_fields(value, ())  # none for {}


def _shown(name: str) -> str:
    return name if len(name) <= _SHOWN_CHARS else name[:_SHOWN_CHARS] + "…"


def _check_media_type(request: Request) -> None:
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type and media_type not in ACCEPTED_MEDIA_TYPES:
        raise ApiError(
            415, errors.UNSUPPORTED_MEDIA_TYPE,
            f"send application/openjobspec+json or application/json, not {media_type}",
        )  # fmt: skip


async def read_json(request: Request, cap: int) -> Any:
    """The body as JSON; else 415, 413 or 400 invalid_request.

    Malformed JSON is OJS's `invalid_request` ("Malformed request"); OJS's
    `invalid_payload` means args that fail a schema, which is another thing.
    """
    _check_media_type(request)
    return parse_json(await read_body(request, cap))


async def read_body(request: Request, cap: int) -> bytes:
    """The body's bytes, at most `cap` of them (else 413)."""
    too_large = ApiError(413, PAYLOAD_TOO_LARGE, f"the body is over the limit of {cap} bytes")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > cap:
        raise too_large
    body = bytearray()
    try:
        async with asyncio.timeout(BODY_READ_S):
            # Counted as it comes: a chunked body has no length.
            async for chunk in request.stream():
                body += chunk
                if len(body) > cap:
                    raise too_large
    except TimeoutError:
        raise ApiError(
            408,
            errors.TIMEOUT,
            f"the body was not whole within {BODY_READ_S:g} s of reading it",
        ) from None
    except ClientDisconnect:
        # A caller that goes away mid-body is an ordinary end, not our failure;
        # the answer goes nowhere, nothing was enqueued.
        log.info("the client disconnected before sending its whole body")
        raise ApiError(400, INVALID_REQUEST, "the client disconnected mid-body") from None
    return bytes(body)


def parse_json(body: bytes) -> Any:
    """The body as JSON, or 400 invalid_request."""
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ApiError(400, INVALID_REQUEST, f"the body is not valid JSON: {exc}") from None
    # orjson reads an integer beyond 64 bits as a float, and the body is all that tells
    # it from a double: once re-serialised it would be taken, and could share a key.
    problem = rounded_integer_problem(value, body)
    if problem is not None:
        raise ApiError(400, INVALID_REQUEST, problem)
    return value


_INTEGER = re.compile(r"-?[0-9]+")


def int_param(raw: str | None, name: str, default: int, low: int, high: int) -> int:
    """A query parameter as an integer in [low, high]; absent or empty: `default`. Only
    ASCII digits: Python's int() also takes "1_000", " 5" and other scripts' digits."""
    if raw is None or raw == "":
        return default
    try:
        value = int(raw) if _INTEGER.fullmatch(raw) else low - 1
    except ValueError:  # more digits than int() reads
        value = low - 1
    if not low <= value <= high:
        raise ApiError(400, INVALID_REQUEST, f"{name} must be an integer from {low} to {high}")
    return value
