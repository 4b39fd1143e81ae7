"""Who calls, and whether they may: the check every route's endpoint makes first.

Each route of the table (app.py) names what it needs, a Need: an operation
(OJS security §7.2), on the queue it touches, or on every queue for a route that
spans them (lists, stats, bulk changes, crons, events). The endpoint
(plumbing.endpoint) asks `check` for the operation before anything else; a
handler that learns the queue it touches (from the body, the path, or the job the
view holds) asks `permit` (or `refusal`) for it, under the same need. Without a
credentials file every request may do everything.

401 `unauthenticated` without a valid key (gateway/auth/bearer.py says whose a key
is, the processor's status port asks it too); 403 `permission_denied` naming the
principal, the operation and the queue (OJS security §15.2).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextvars import ContextVar, Token
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from gateway.auth import bearer, roles
from gateway.auth.credentials import Principal
from gateway.auth.keyring import Watcher
from gateway.http import errors
from gateway.http.caller import PRINCIPAL
from gateway.http.errors import ApiError


@dataclass(frozen=True)
class Need:
    operation: str
    # The route spans every queue: only a principal that reaches any queue may call it.
    every_queue: bool = False


ENQUEUE = Need(roles.ENQUEUE)
DEQUEUE = Need(roles.DEQUEUE)
CANCEL = Need(roles.CANCEL)
INSPECT = Need(roles.INSPECT)
INSPECT_ALL = Need(roles.INSPECT, every_queue=True)
ADMIN = Need(roles.ADMIN)
ADMIN_ALL = Need(roles.ADMIN, every_queue=True)
# Open to anyone, with or without a key: health and what describes the binding.
OPEN = Need("")

_NEED = "need"  # the attribute an endpoint carries its Need in (`mark`, `need_of`)


def mark(route_endpoint: Callable[..., Any], need: Need) -> None:
    setattr(route_endpoint, _NEED, need)


def need_of(route_endpoint: Callable[..., Any]) -> Need | None:
    """The Need a route's endpoint was made with; None for one made without."""
    need = getattr(route_endpoint, _NEED, None)
    return need if isinstance(need, Need) else None


@dataclass(frozen=True)
class Caller:
    principal: Principal
    need: Need


# The caller of the request being answered (None: no credentials file, all allowed).
_CALLER: ContextVar[Caller | None] = ContextVar("gateway_http_caller", default=None)


async def check(request: Request, watcher: Watcher | None, need: Need) -> Token[Caller | None]:
    """401 without a valid key, 403 without the operation (on every queue, if the route
    spans them); else the caller is who `permit` asks about until `done(token)`."""
    if watcher is None or need is OPEN:
        return _CALLER.set(None)
    principal = await authenticate(request, watcher)
    # Named for the audit (caller.py) and the security log, a refusal included.
    request.scope[PRINCIPAL] = (principal.name, principal.role)
    if need.operation not in principal.operations:
        raise _denied(principal, need, None)
    if need.every_queue and not principal.queues.every:
        raise _denied(principal, need, roles.ANY_QUEUE)
    return _CALLER.set(Caller(principal, need))


def done(token: Token[Caller | None]) -> None:
    """The request is answered: its caller is forgotten."""
    _CALLER.reset(token)


def refusal(queue: str | None) -> ApiError | None:
    """The 403 if the caller may not do the route's operation on `queue`, else None."""
    caller = _CALLER.get()
    if caller is None or caller.principal.queues.every:
        return None
    if queue is not None and caller.principal.queues.matches(queue):
        return None
    return _denied(caller.principal, caller.need, queue)


def permit(queue: str | None) -> None:
    """Raise `refusal(queue)`, if there is one."""
    error = refusal(queue)
    if error is not None:
        raise error


def restricted() -> bool:
    """Whether the caller's queues are limited: only then is a queue worth finding out."""
    caller = _CALLER.get()
    return caller is not None and not caller.principal.queues.every


async def authenticate(request: Request, watcher: Watcher) -> Principal:
    """The principal of the request's key (or of its address, for a keyless one); 401."""
    ring = watcher.current()
    client = request.client
    try:
        found = bearer.identify(
            ring, request.headers.getlist("authorization"), client.host if client else None
        )
        if isinstance(found, bearer.Unverified):
            # Its first use in this process: scrypt, off the event loop.
            found = await asyncio.to_thread(bearer.verify, ring, found)
    except bearer.Unauthenticated as exc:
        raise errors.unauthenticated(str(exc)) from None
    return found


def _denied(principal: Principal, need: Need, queue: str | None) -> ApiError:
    return errors.permission_denied(principal.name, need.operation, queue)
