"""A request's dialect told and its parser asked (see the package's docstring).

Every request passes here, so it is compiled with the per-record path
(gateway/compiled.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import orjson

from gateway.core.dialects import bullmq, faktory, oban, river, sidekiq, zizq
from gateway.core.errors import (
    INVALID_REQUEST,
    GatewayError,
    Invalid,
    invalid_request,
)
from gateway.core.limits import (
    MAX_REQUEST_BYTES,
    json_problem,
    rounded_integer_problem,
    too_large,
)
from gateway.core.request import OJS, Request, ojs_request_or_raise

_PARSERS: dict[str, Callable[[Mapping[str, object]], Request]] = {
    OJS: ojs_request_or_raise,
    oban.ELIXIR: oban.parse_elixir,
    oban.PYTHON: oban.parse_python,
    zizq.ZIZQ: zizq.parse,
    faktory.FAKTORY: faktory.parse,
    bullmq.BULLMQ: bullmq.parse,
    sidekiq.SIDEKIQ: sidekiq.parse,
    river.RIVER: river.parse,
}
DIALECTS = tuple(_PARSERS)
# The dialect recorded for a request whose dialect cannot be told.
UNKNOWN_DIALECT = "unknown"


def parse_request(raw: object) -> Request | GatewayError:
    """Validate a job in its dialect (OJS without a `dialect` field) and compute its key.

    First the limits (limits.py): nesting, number range and the size of the
    job as it will be serialised, so every record derived from it fits.
    """
    try:
        if not isinstance(raw, Mapping):
            raise invalid_request("the job must be a JSON object")
        problem = json_problem(raw)
        if problem is not None:
            return GatewayError(INVALID_REQUEST, problem)
        try:
            size = len(orjson.dumps(raw))
        except orjson.JSONEncodeError as exc:
            return GatewayError(INVALID_REQUEST, f"the job is not JSON: {exc}")
        if size > MAX_REQUEST_BYTES:
            return too_large("the request", size, MAX_REQUEST_BYTES)
        dialect = raw.get("dialect", OJS)
        parser = _PARSERS.get(dialect) if isinstance(dialect, str) else None
        if parser is None:
            names = ", ".join(f'"{d}"' for d in DIALECTS)
            raise invalid_request(f"dialect must be one of {names}, or omitted for OJS")
        return parser(raw)
    except Invalid as exc:
        return exc.error


def parse_request_json(data: bytes | str) -> Request | GatewayError:
    """`parse_request` of a JSON text; malformed JSON is an `invalid_request` error, and
    one over MAX_REQUEST_BYTES is refused (`payload_too_large`) before it is parsed.

    Malformed JSON is OJS's `invalid_request` ("Malformed request") on every surface:
    the processor's decision, the HTTP binding's 400, the CLI. OJS's `invalid_payload`
    means args that fail a schema, which the gateway does not check."""
    if len(data) > MAX_REQUEST_BYTES:
        return too_large("the request", len(data), MAX_REQUEST_BYTES)
    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        return GatewayError(INVALID_REQUEST, f"the request is not valid JSON: {exc}")
    problem = rounded_integer_problem(raw, data)  # orjson made a float of a long integer
    if problem is not None:
        return GatewayError(INVALID_REQUEST, problem)
    return parse_request(raw)


def requested_dialect(data: bytes | str) -> str:
    """The dialect a request names, for the record of one that was refused:
    a known name, `ojs` when it names none, else `unknown`."""
    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError:
        return UNKNOWN_DIALECT
    if not isinstance(raw, dict):
        return UNKNOWN_DIALECT
    dialect = raw.get("dialect", OJS)
    return dialect if isinstance(dialect, str) and dialect in _PARSERS else UNKNOWN_DIALECT
