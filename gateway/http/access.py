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
what it may. Without a credentials file every request may do everything, within
the tenant its X-OJS-Tenant header names.

Tenants (core/tenants.py). A request's X-OJS-Tenant header, or a principal bound to
tenants in the credentials file, bounds what it sees to their jobs (`Scope.tenants`);
an enqueue's jobs are of the caller's tenant (`acting_for`).

401 `unauthenticated` without a valid key (gateway/auth/bearer.py says whose a key
is, the processor's status port asks it too); 403 `permission_denied` naming the
principal, the operation and the queue (OJS security §15.2), for a route whose
operation the principal lacks, or for a queue or tenant the caller names and does not
reach (it names them: the answer tells it nothing new).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from contextvars import ContextVar, Token
from dataclasses import dataclass, replace
from typing import Any

from starlette.requests import Request

from gateway import wire
from gateway.auth import bearer, roles
from gateway.auth.credentials import Principal
from gateway.auth.keyring import Watcher
from gateway.auth.roles import Patterns
from gateway.core import INVALID_REQUEST
from gateway.core.tenants import (
    TENANT_FIELD,
    TENANT_RULE,
    is_valid_tenant,
    meta_field,
    tenant_in,
    tenant_of,
    tenant_problem,
)
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
    principal: Principal | None  # None: no credentials file, every operation allowed
    need: Need
    tenant: str | None = None  # the tenant the request names (its X-OJS-Tenant header)


@dataclass(frozen=True)
class Scope:
    """What a caller may see: the one predicate every read asks, where it reads (a job by
    its id, a listing, a count, an event feed, a cron, a key's history). Two bounds: the
    queues a principal reaches (None: every queue), and the tenants whose jobs it sees
    (None: every job, of a tenant or of none), those of the request's X-OJS-Tenant header,
    else those its principal is bound to (core/tenants.py)."""

    queues: Patterns | None = None
    tenants: frozenset[str] | None = None

    @property
    def everything(self) -> bool:
        return self.queues is None and self.tenants is None

    def sees(self, queue: str | None) -> bool:
        """Whether `queue` itself (its name, its pause) is shown; what its jobs are also
        asks the tenant (`sees_job`, `sees_tenant`)."""
        return self.queues is None or (queue is not None and self.queues.matches(queue))

    def sees_tenant(self, tenant: str | None) -> bool:
        """Whether what belongs to `tenant` (None: to no tenant) is shown."""
        return self.tenants is None or tenant in self.tenants

    def sees_job(self, job: Mapping[str, Any]) -> bool:
        """Whether a job (or a cron's template) is shown: its queue's and its tenant's."""
        return self.sees_named(job.get("queue"), tenant_of(job))

    def sees_named(self, queue: str | None, tenant: str | None) -> bool:
        """Whether what belongs to `queue` and `tenant` (an event of a job) is shown."""
        return self.sees(queue) and self.sees_tenant(tenant)

    @property
    def queue_filter(self) -> Callable[[str], bool] | None:
        """`sees`, for a view listing; None when it hides no queue (the listing's fast path)."""
        return None if self.queues is None else self.sees


EVERYTHING = Scope()

# The caller of the request being answered (None: no credentials file, all allowed).
_CALLER: ContextVar[Caller | None] = ContextVar("gateway_http_caller", default=None)


async def check(request: Request, watcher: Watcher | None, need: Need) -> Token[Caller | None]:
    """401 without a valid key, 403 without the operation (on every queue, if the route
    needs EVERY) or for a tenant the principal is not bound to, 400 for a tenant
    header that names none; else the caller is who `permit` and `scope` ask about until
    `done(token)`."""
    if need is OPEN:
        return _CALLER.set(None)
    if watcher is None:
        tenant = _tenant_header(request)
        return _CALLER.set(None if tenant is None else Caller(None, need, tenant))
    principal = await authenticate(request, watcher)
    # Named for the audit (caller.py) and the security log, a refusal included.
    request.scope[PRINCIPAL] = (principal.name, principal.role)
    if need.operation not in principal.operations:
        raise _denied(principal, need, None)
    if need.queues == EVERY and not principal.queues.every:
        raise _denied(principal, need, roles.ANY_QUEUE)
    tenant = _tenant_header(request)
    if tenant is not None and principal.tenants and tenant not in principal.tenants:
        raise _tenant_denied(principal, need, tenant)
    return _CALLER.set(Caller(principal, need, tenant))


def done(token: Token[Caller | None]) -> None:
    """The request is answered: its caller is forgotten."""
    _CALLER.reset(token)


def principal_name() -> str | None:
    """The caller's principal's name; None without a credentials file."""
    caller = _CALLER.get()
    return None if caller is None or caller.principal is None else caller.principal.name


def scope() -> Scope:
    """What the caller may see, until `done`: an answer that outlives its handler (an
    event stream) takes it first and keeps it."""
    caller = _CALLER.get()
    if caller is None:
        return EVERYTHING
    principal = caller.principal
    queues = None if principal is None or principal.queues.every else principal.queues
    tenants = (
        frozenset((caller.tenant,)) if caller.tenant is not None
        else principal.tenants or None if principal is not None else None
    )  # fmt: skip
    return EVERYTHING if queues is None and tenants is None else Scope(queues, tenants)


def refusal(queue: str | None) -> ApiError | None:
    """The 403 if the caller may not do the route's operation on `queue`, which it named,
    else None."""
    caller = _CALLER.get()
    if caller is None or caller.principal is None or scope().sees(queue):
        return None
    return _denied(caller.principal, caller.need, queue)


def permit(queue: str | None) -> None:
    """Raise `refusal(queue)`, if there is one."""
    error = refusal(queue)
    if error is not None:
        raise error


def restricted() -> bool:
    """Whether the caller's queues or tenants are limited: only then is a queue worth
    finding out."""
    return not scope().everything


def acting_for(job: Any) -> Any:
    """The job to enqueue for the caller, of its tenant (OJS multi-tenancy §5.3): the one
    `meta.tenant_id` names (in its dialect: `meta_field`), else the request's X-OJS-Tenant
    header, written into its meta, else the principal's, if it is bound to exactly one. 400
    for a tenant that is none, or a header and a meta that differ; 403 for a tenant the
    principal is not bound to (or none, for one bound to several). A job that is not an
    object is left to the parser."""
    caller = _CALLER.get()
    if caller is None or not isinstance(job, dict):
        return job
    field = meta_field(job)
    meta = job.get(field)
    problem = tenant_problem(meta, f"{field}.tenant_id")
    if problem is not None:
        raise ApiError(400, INVALID_REQUEST, problem)
    named = tenant_in(meta)
    if named is not None and caller.tenant is not None and named != caller.tenant:
        raise ApiError(
            400, INVALID_REQUEST,
            f"{field}.tenant_id {named!r} and the {wire.HTTP_TENANT} header {caller.tenant!r} "
            "differ; send one tenant",
            details={f"{field}.tenant_id": named, wire.HTTP_TENANT: caller.tenant},
        )  # fmt: skip
    principal = caller.principal
    bound = () if principal is None else principal.tenants
    tenant = named or caller.tenant or (next(iter(bound)) if len(bound) == 1 else None)
    if principal is not None and bound and tenant not in bound:
        raise _tenant_denied(principal, caller.need, tenant)
    if tenant is None or named is not None:
        return job
    return {**job, field: {**(meta if isinstance(meta, dict) else {}), TENANT_FIELD: tenant}}


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


def _tenant_denied(principal: Principal, need: Need, tenant: str | None) -> ApiError:
    """403 naming the tenant (the caller named it, or named none)."""
    error = errors.permission_denied(principal.name, need.operation)
    where = f"for tenant {tenant!r}" if tenant is not None else "for no tenant"
    return replace(
        error, message=f"{error.message} {where}: it acts for {sorted(principal.tenants)} only",
        details={**error.details, "tenant": tenant},
    )  # fmt: skip


def _tenant_header(request: Request) -> str | None:
    """The tenant the request's X-OJS-Tenant header names; 400 for one that names none."""
    tenant = request.headers.get(wire.HTTP_TENANT)
    if tenant is None:
        return None
    if not is_valid_tenant(tenant):
        raise ApiError(400, INVALID_REQUEST, f"the {wire.HTTP_TENANT} header must be {TENANT_RULE}")
    return tenant
