"""Responses in the OJS media type, with the headers every response carries."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from starlette.responses import Response

from gateway.http.errors import ApiError

MEDIA_TYPE = "application/openjobspec+json"
OJS_VERSION = "1.0"
ACCEPTED_MEDIA_TYPES = frozenset({"application/json", MEDIA_TYPE})


JSON_TYPE = "application/json"
# The official OJS Python SDK (0.4) asks for the OJS type, but its transport reads a body
# only if "application/json" is in its Content-Type, else it hands back nothing (an
# enqueue raises after its job was made, a fetch leases jobs and returns none). The OJS
# conformance suite checks for the OJS type, asking exactly as the SDK does. What tells
# them apart is what the SDK sends beside: httpx's User-Agent and an `OJS-Version`
# header; such a request gets application/json, which any httpx caller reads.
SDK_AGENT = "python-httpx/"


def negotiate(accept: str | None, user_agent: str | None = None, version: str | None = None) -> str:
    """The response type for a request: the OJS type unless the caller accepts plain
    `application/json` and not the OJS type (no header, `*/*`: the OJS type), or is the
    official OJS Python SDK (its User-Agent and `OJS-Version`: see SDK_AGENT)."""
    if version is not None and user_agent is not None and user_agent.startswith(SDK_AGENT):
        return JSON_TYPE
    wanted: set[str] = set()
    for part in (accept or "").split(","):
        media, *params = (p.strip() for p in part.split(";"))
        quality = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        if media and quality > 0:
            wanted.add(media.lower())
    if MEDIA_TYPE in wanted or JSON_TYPE not in wanted:
        return MEDIA_TYPE
    return JSON_TYPE


def ojs_response(
    status: int,
    body: Any,
    request_id: str,
    headers: Mapping[str, str] | None = None,
    media_type: str = MEDIA_TYPE,
) -> Response:
    return Response(
        orjson.dumps(body),
        status_code=status,
        media_type=media_type,
        headers={"OJS-Version": OJS_VERSION, "X-Request-Id": request_id, **(headers or {})},
    )


def error_response(error: ApiError, request_id: str, media_type: str = MEDIA_TYPE) -> Response:
    # A 401 names the scheme that would be accepted (RFC 9110 §11.6.1).
    headers = dict(error.headers)
    if error.status == 401:
        headers["WWW-Authenticate"] = 'Bearer realm="gateway"'
    return ojs_response(error.status, error.envelope(request_id), request_id, headers, media_type)
