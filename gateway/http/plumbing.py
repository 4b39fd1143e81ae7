"""Per-request plumbing shared by the routes: request id, authorisation, the JSON body."""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from gateway.core import INVALID_REQUEST, PAYLOAD_TOO_LARGE
from gateway.core.limits import rounded_integer_problem
from gateway.http import errors
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
_MAX_DIGITS = 20  # past any bound a parameter has


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


def endpoint(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    """Request id, authorisation, a live view, then the handler; its value becomes the
    response (a handler may also return a ready-made Response, as the event stream does)."""

    async def handle(request: Request) -> Response:
        request_id = request_id_of(request)
        binding: Binding = request.app.state.binding
        media_type = media_type_of(request)
        refused = authorize(request, binding.settings.token) or await binding.view_live()
        answer = refused or await handler(request, binding, request_id)
        if isinstance(answer, Response):
            return answer
        if isinstance(answer, ApiError):
            return error_response(answer, request_id, media_type)
        return ojs_response(answer.status, answer.body, request_id, answer.headers, media_type)

    return handle


def authorize(request: Request, token: str | None) -> ApiError | None:
    if token is None:
        return None
    scheme, _, credential = request.headers.get("authorization", "").partition(" ")
    # compare_digest: the time taken must not tell how much of the token matched.
    if scheme.lower() == "bearer" and hmac.compare_digest(
        credential.strip().encode(), token.encode()
    ):
        return None
    return ApiError(401, errors.UNAUTHORIZED, "send `Authorization: Bearer <token>`")


async def read_json(request: Request, cap: int) -> Any:
    """The body as JSON, or an ApiError (415, 413, 400 invalid_request).

    Malformed JSON is OJS's `invalid_request` ("Malformed request"); OJS's
    `invalid_payload` means args that fail a schema, which is another thing.
    """
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type and media_type not in ACCEPTED_MEDIA_TYPES:
        return ApiError(
            415, errors.UNSUPPORTED_MEDIA_TYPE,
            f"send application/openjobspec+json or application/json, not {media_type}",
        )  # fmt: skip
    too_large = ApiError(413, PAYLOAD_TOO_LARGE, f"the body is over the limit of {cap} bytes")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > cap:
        return too_large
    body = bytearray()
    try:
        async for chunk in request.stream():  # counted as it comes: a chunked body has no length
            body += chunk
            if len(body) > cap:
                return too_large
    except ClientDisconnect:
        # A caller that goes away mid-body is an ordinary end, not our failure;
        # the answer goes nowhere, nothing was enqueued.
        log.info("the client disconnected before sending its whole body")
        return ApiError(400, INVALID_REQUEST, "the client disconnected mid-body")
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        return ApiError(400, INVALID_REQUEST, f"the body is not valid JSON: {exc}")
    # orjson reads an integer beyond 64 bits as a float, and the body is all that tells
    # it from a double: once re-serialised it would be taken, and could share a key.
    problem = rounded_integer_problem(value, body)
    if problem is not None:
        return ApiError(400, INVALID_REQUEST, problem)
    return value


def int_param(raw: str | None, name: str, default: int, low: int, high: int) -> int | ApiError:
    """A query parameter as an integer in [low, high]; absent or empty: `default`."""
    if raw is None or raw == "":
        return default
    # ASCII digits only: int() also reads "１０", "1_0", " 7 " and "+3".
    value = int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= _MAX_DIGITS else low - 1
    if not low <= value <= high:
        return ApiError(400, INVALID_REQUEST, f"{name} must be an integer from {low} to {high}")
    return value
