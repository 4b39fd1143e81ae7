"""The tenant routes the OJS Admin UI's Tenants page and the multi-tenancy suite read.

A tenant is known by its jobs (core/tenants.py): every tenant the view has seen a
job of, with the counts of its jobs per queue and state (the view's tenant counters,
view/keys.py), when its first job was created, and the workers running one of its jobs
now, and its limits with their counts as its home last published them
(core/tenant_limits.py). A tenant with limits is known before its first job. The gateway
keeps no tenant registry: every tenant is `active`. A caller bound to tenants
(access.Scope) sees those only; another tenant is 404, as one that has had no job.

PUT /ojs/v1/admin/tenants/{id}/limits sets the limits its body names (null clears one),
sent to the tenant's home, which answers with the tenant's limits as they then stand.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from gateway import wire
from gateway.core import INVALID_REQUEST, State
from gateway.core.errors import Invalid
from gateway.core.job_filter import JobFilter
from gateway.core.rates import RateState
from gateway.core.tenant_limits import (
    TenantLimits,
    TenantState,
    concurrency_key,
    parse_limits,
    shown_limits,
)
from gateway.core.tenants import is_valid_tenant
from gateway.http import access, commands, errors
from gateway.http.answers import Answer
from gateway.http.binding import Binding
from gateway.http.caller import caller
from gateway.http.errors import ApiError
from gateway.http.plumbing import read_json
from gateway.http.security import privileged
from gateway.http.shared import page_of, settled, shown
from gateway.sdk.commands import tenant_commands
from gateway.view.listing import jobs_page

# The UI's JobCounts: these states, each always present.
COUNTED = ("available", "active", "scheduled", "retryable", "completed", "discarded", "cancelled")
_SUMMARY_FIELDS = ("id", "type", "queue", "state", "priority", "attempt", "created_at")


async def list_tenants(request: Request, binding: Binding, _: str) -> Answer:
    """Every tenant the caller sees, by id, a page at a time."""
    page = page_of(request, numbered=True)
    await settled(binding)
    scope = access.scope()
    known = {t: k for t, k in _tenants(binding).items() if scope.sees_tenant(t)}
    items = [_tenant(binding, tenant, known[tenant]) for tenant in page.of(sorted(known))]
    return Answer(200, page.paged(items, len(known)))


async def tenant(request: Request, binding: Binding, _: str) -> Answer:
    tenant_id, known = await _known(request, binding)
    return Answer(200, _tenant(binding, tenant_id, known))


async def stats(request: Request, binding: Binding, _: str) -> Answer:
    """The tenant's jobs now: in all (`total_jobs`), per state, and per queue."""
    tenant_id, known = await _known(request, binding)
    queues = known["queues"]
    jobs = _counts(queues)
    return Answer(200, {
        "tenant_id": tenant_id, "total_jobs": sum(jobs.values()), "jobs": jobs,
        "queues": {name: _counts({name: counts}) for name, counts in sorted(queues.items())},
        "workers": len(_workers(binding, tenant_id)),
        "limits": _limits(binding, tenant_id),
    })  # fmt: skip


@privileged
async def put_limits(request: Request, binding: Binding, request_id: str) -> Answer:
    """Set the tenant's limits its body names; answered as its home then holds them."""
    tenant_id = _tenant_id(request)
    scope = access.scope()
    if not scope.sees_tenant(tenant_id):
        raise _not_found(tenant_id)
    if scope.tenants is not None:  # limits hold a tenant back: not its own to set
        raise ApiError(403, errors.PERMISSION_DENIED, "a principal bound to tenants may not "
                       "set a tenant's limits")  # fmt: skip
    body = await read_json(request, binding.settings.max_body_bytes)
    if not isinstance(body, dict):
        raise ApiError(400, INVALID_REQUEST, "the body is an object of tenant limits")
    try:
        _, reason = parse_limits(body, TenantLimits())  # checked here, applied at the home
    except Invalid as exc:
        raise ApiError(400, exc.error.code, exc.error.message) from None
    answers = await commands.send(
        binding, caller(request, request_id), tenant_commands(tenant_id, body, reason),
        f"set the limits of tenant {tenant_id}",
    )  # fmt: skip
    shown = dict(answers[0].get("limits") or {})
    concurrency = shown.get("max_concurrency")
    if isinstance(concurrency, dict):
        concurrency["current"] = _running(binding, tenant_id)
    return Answer(200, {"tenant_id": tenant_id, "limits": shown})


async def jobs(request: Request, binding: Binding, _: str) -> Answer:
    """The tenant's jobs, a page at a time, by state, queue and id (as the UI's JobSummary)."""
    tenant_id, _known_tenant = await _known(request, binding)
    page = page_of(request, numbered=True)
    found, total = jobs_page(
        binding.view, JobFilter(), page.first, page.count, tenants=(tenant_id,)
    )
    summaries = [
        {k: v for k, v in shown(job).items() if k in _SUMMARY_FIELDS and v is not None}
        for job in found
    ]
    return Answer(200, page.paged(summaries, total))


async def _known(request: Request, binding: Binding) -> tuple[str, dict[str, Any]]:
    """The tenant the path names, as the view knows it; 404 for one the caller does not
    see or that has had no job, 400 for an id that names no tenant."""
    tenant_id = _tenant_id(request)
    await settled(binding)
    known = _tenants(binding).get(tenant_id)
    if known is None or not access.scope().sees_tenant(tenant_id):
        raise _not_found(tenant_id)
    return tenant_id, known


def _tenant_id(request: Request) -> str:
    tenant_id = request.path_params["tenant_id"]
    if not is_valid_tenant(tenant_id):
        raise ApiError(400, INVALID_REQUEST, f"no tenant is named {tenant_id!r}")
    return str(tenant_id)


def _not_found(tenant_id: str) -> ApiError:
    return errors.not_found("tenant", tenant_id, f"tenant {tenant_id} has had no job and has "
                            "no limits")  # fmt: skip


def _tenants(binding: Binding) -> dict[str, dict[str, Any]]:
    """Every tenant the view knows: by its jobs, or by the counts its home published."""
    known = dict(binding.view.tenants())
    for tenant_id in binding.view.controls(wire.TENANT_KEY_PREFIX):
        known.setdefault(tenant_id, {"queues": {}, "created_at": None})
    return known


def _state(binding: Binding, tenant_id: str) -> TenantState | None:
    return TenantState.load(binding.view.controls(wire.tenant_home(tenant_id)).get(""))


def _running(binding: Binding, tenant_id: str) -> int:
    """The permits the tenant's concurrency key holds, as its home last published them."""
    key = wire.rate_home(concurrency_key(tenant_id))
    state = RateState.load(binding.view.controls(key).get(""))
    return 0 if state is None else len(state.holders)


def _limits(binding: Binding, tenant_id: str) -> dict[str, Any]:
    return shown_limits(tenant_id, _state(binding, tenant_id), _running(binding, tenant_id))


def _tenant(binding: Binding, tenant_id: str, known: dict[str, Any]) -> dict[str, Any]:
    """A tenant as the UI's Tenant reads it."""
    queues = known["queues"]
    return {
        "id": tenant_id, "name": tenant_id, "state": "active",
        "limits": _ui_limits(binding, tenant_id),
        "stats": {
            "queues": sum(1 for counts in queues.values() if any(counts.values())),
            "jobs": _counts(queues), "workers": len(_workers(binding, tenant_id)),
        },
        "created_at": known["created_at"],
    }  # fmt: skip


def _ui_limits(binding: Binding, tenant_id: str) -> dict[str, Any]:
    """The limits as the spec names them, and those the UI's Tenant also reads."""
    shown = _limits(binding, tenant_id)
    rate = shown["max_enqueue_rate"]
    if rate is not None and rate["period"] == "PT1S":
        shown["max_jobs_per_second"] = rate["limit"]
    if shown["max_concurrency"]["limit"] is not None:
        shown["max_concurrent_jobs"] = shown["max_concurrency"]["limit"]
    return shown


def _counts(queues: dict[str, dict[str, int]]) -> dict[str, int]:
    return {s: sum(counts.get(s, 0) for counts in queues.values()) for s in COUNTED}


def _workers(binding: Binding, tenant_id: str) -> set[str]:
    """The workers running one of the tenant's jobs now (by their fetches' worker_id)."""
    found = set()
    for job_id in binding.view.in_state(str(State.ACTIVE), tenants=(tenant_id,)):
        job = binding.view.get(job_id)
        worker = None if job is None else job.get("worker_id")
        if isinstance(worker, str):
            found.add(worker)
    return found
