"""Who calls, and whether they may: the check every route's endpoint makes first.

Each route of the table (app.py) names what it needs, a Need: an operation
(OJS security §7.2), and which queues it touches (`Need.queues`): the one it names
(ONE), those of the caller's reach for a read that spans them (REACHED: lists,
stats, events, crons, dead letters, unique keys), or every queue for a change
that spans them, or a read no queue bounds (EVERY: bulk changes, crons, rate
keys). The endpoint (plumbing.endpoint) asks `check` for the operation before
anything else. A handler that learns the queue it touches from the body or the
path asks `permit` (or `refusal`) for it, under the same need; one that reads a
job by its id, or reads across queues, asks the caller's `scope` what it may see:
a job it may not see is as missing (404), and a list, count or feed holds only
what it may. Without a credentials
file every request may do everything.

401 `unauthenticated` without a valid key (gateway/auth/bearer.py says whose a key
is, the processor's status port asks it too); 403 `permission_denied` naming the
principal, the operation and the queue (OJS security §15.2), for a route whose
operation the principal lacks, or for a queue the caller names and does not reach
(it names the queue: the answer tells it nothing new).
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
from gateway.auth.roles import Patterns
from gateway.http import errors
from gateway.http.caller import PRINCIPAL
from gateway.http.errors import ApiError

# Which queues a route touches (Need.queues).
ONE = "one"  # the one it names, or its job's
REACHED = "reached"  # it reads across queues: those the caller reaches (Scope)
EVERY = "every"  # it spans queues unbounded: only a principal that reaches every queue


@dataclass(frozen=True)
class Need:
    operation: str
    queues: str = ONE


ENQUEUE = Need(roles.ENQUEUE)
DEQUEUE = Need(roles.DEQUEUE)
CANCEL = Need(roles.CANCEL)
INSPECT = Need(roles.INSPECT)
INSPECT_ALL = Need(roles.INSPECT, REACHED)
# A read whose answer no queue bounds (a rate key's permits span the queues of its jobs).
INSPECT_EVERY = Need(roles.INSPECT, EVERY)
ADMIN = Need(roles.ADMIN)
ADMIN_ALL = Need(roles.ADMIN, EVERY)
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


@dataclass(frozen=True)
class Scope:
    """What a caller may see: the one predicate every read asks of a queue, where it
    reads (a job by its id, a listing, a count, an event feed, a cron, a key's history).
    The queues a principal reaches bound it today (None: every queue); a bound of
    another kind (a tenant's) joins them here, so every route keeps asking `sees`."""

    queues: Patterns | None = None

    @property
    def everything(self) -> bool:
        return self.queues is None

    def sees(self, queue: str | None) -> bool:
        """Whether what belongs to `queue` (its jobs, counts, events, crons, keys) is shown."""
        return self.queues is None or (queue is not None and self.queues.matches(queue))

    @property
    def queue_filter(self) -> Callable[[str], bool] | None:
        """`sees`, for a view listing; None when it hides nothing (the listing's fast path)."""
        return None if self.queues is None else self.sees


EVERYTHING = Scope()

# The caller of the request being answered (None: no credentials file, all allowed).
_CALLER: ContextVar[Caller | None] = ContextVar("gateway_http_caller", default=None)


async def check(request: Request, watcher: Watcher | None, need: Need) -> Token[Caller | None]:
    """401 without a valid key, 403 without the operation (on every queue, if the route
    needs EVERY); else the caller is who `permit` and `scope` ask about until
    `done(token)`."""
    if watcher is None or need is OPEN:
        return _CALLER.set(None)
    principal = await authenticate(request, watcher)
    # Named for the audit (caller.py) and the security log, a refusal included.
    request.scope[PRINCIPAL] = (principal.name, principal.role)
    if need.operation not in principal.operations:
        raise _denied(principal, need, None)
    if need.queues == EVERY and not principal.queues.every:
        raise _denied(principal, need, roles.ANY_QUEUE)
    return _CALLER.set(Caller(principal, need))


def done(token: Token[Caller | None]) -> None:
    """The request is answered: its caller is forgotten."""
    _CALLER.reset(token)


def scope() -> Scope:
    """What the caller may see, until `done`: an answer that outlives its handler (an
    event stream) takes it first and keeps it."""
    caller = _CALLER.get()
    if caller is None or caller.principal.queues.every:
        return EVERYTHING
    return Scope(caller.principal.queues)


def refusal(queue: str | None) -> ApiError | None:
    """The 403 if the caller may not do the route's operation on `queue`, which it named,
    else None."""
    caller = _CALLER.get()
    if caller is None or scope().sees(queue):
        return None
    return _denied(caller.principal, caller.need, queue)


def permit(queue: str | None) -> None:
    """Raise `refusal(queue)`, if there is one."""
    error = refusal(queue)
    if error is not None:
        raise error


def restricted() -> bool:
    """Whether the caller's queues are limited: only then is a queue worth finding out."""
    return not scope().everything


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
