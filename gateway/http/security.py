"""The security log: one structured line (JSON on stderr, gateway/logs.py) for each
privileged request (a change an operator makes: a cancel, a bulk retry or cancel, a pause
or resume, a cron change, a dead letter retry or delete, a rate key's override) and each
refused one (401, 403), with who asked (caller.py: principal, role, source address,
request id), the route (its path as the route names it, so no key or name the path
carries is logged) and the outcome. Never a job's args or keys: whoever reads the log
sees who changed what kind of thing, and the audit trail says which.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import unquote

from starlette.requests import Request

from gateway.http.caller import caller

log = logging.getLogger("gateway.security")

Route = TypeVar("Route", bound=Callable[..., Any])
_PRIVILEGED: set[Callable[..., Any]] = set()
REFUSED = frozenset({401, 403})


def privileged(handler: Route) -> Route:
    """Marks a route's handler as privileged: each request to it is logged."""
    _PRIVILEGED.add(handler)
    return handler


def note(request: Request, handler: Callable[..., Any], request_id: str, status: int) -> None:
    """The security line for a request the handler answered with `status`, if it is
    privileged or refused."""
    refused = status in REFUSED
    if not refused and handler not in _PRIVILEGED:
        return
    outcome = "refused" if refused else "done" if status < 400 else "failed"
    fields = caller(request, request_id).fields()
    log.log(
        logging.WARNING if refused else logging.INFO,
        "refused request" if refused else "privileged request",
        extra={
            "principal": None, "role": None, "source": None, **fields,
            "route": f"{request.method} {route_of(request)}", "status": status,
            "outcome": outcome,
        },
    )  # fmt: skip


def route_of(request: Request) -> str:
    """The request's path with each path parameter's segment named, not shown:
    `/ojs/v1/jobs/{job_id}`."""
    named = {str(value): f"{{{name}}}" for name, value in request.path_params.items()}
    segments = request.url.path.split("/")
    return "/".join(named.get(unquote(segment), segment) for segment in segments)
