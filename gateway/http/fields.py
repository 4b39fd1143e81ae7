"""A field or query parameter a route does not understand is refused, never ignored.

An ignored field is a silent change of meaning: a filter a route skipped once
widened a bulk cancel to every job. So each route names the fields and
parameters it reads, and anything else is a 400 `invalid_request` naming it.
The job envelope is the exception (OJS keeps its unknown fields), and so is a
cron's job template, which is one.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from starlette.requests import Request

from gateway.core import INVALID_REQUEST
from gateway.http.errors import ApiError
from gateway.http.plumbing import read_json

_SHOWN_CHARS = 64  # a name longer than this is cut in the message: it is the caller's input


def unknown_fields(given: Iterable[str], known: Collection[str], where: str) -> ApiError | None:
    """None if every name in `given` is in `known`; else the 400 naming the others."""
    extra = sorted(set(given) - set(known))
    if not extra:
        return None
    names = ", ".join(_shown(name) for name in extra)
    return ApiError(
        400, INVALID_REQUEST,
        f"{where} has a field this route does not take: {names}; it takes "
        f"{', '.join(sorted(known)) or 'none'}",
        details={"unknown_fields": [_shown(name) for name in extra]},
    )  # fmt: skip


def unknown_params(request: Request, known: Collection[str]) -> ApiError | None:
    """The query's parameters, by the same rule."""
    return unknown_fields(request.query_params.keys(), known, "the query")


async def no_body(request: Request, cap: int) -> ApiError | None:
    """For a route that takes no body: none, or an empty JSON object, is fine."""
    length, chunked = request.headers.get("content-length"), "transfer-encoding" in request.headers
    if (length is None and not chunked) or length == "0":
        return None
    body = await read_json(request, cap)
    if isinstance(body, ApiError):
        return body
    if not isinstance(body, dict):
        return ApiError(400, INVALID_REQUEST, "this route takes no body (or an empty object)")
    return unknown_fields(body, (), "the body")


def _shown(name: str) -> str:
    return repr(name if len(name) <= _SHOWN_CHARS else name[:_SHOWN_CHARS] + "…")
