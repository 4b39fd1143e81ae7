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


def ojs_response(
    status: int, body: Any, request_id: str, headers: Mapping[str, str] | None = None
) -> Response:
    return Response(
        orjson.dumps(body),
        status_code=status,
        media_type=MEDIA_TYPE,
        headers={"OJS-Version": OJS_VERSION, "X-Request-Id": request_id, **(headers or {})},
    )


def error_response(error: ApiError, request_id: str) -> Response:
    return ojs_response(error.status, error.envelope(request_id), request_id)
