"""The tenant routes the OJS Admin UI's Tenants page and the multi-tenancy suite read.

A tenant is known by its jobs (core/tenants.py): every tenant the view has seen a
job of, with the counts of its jobs per queue and state (the view's tenant counters,
view/keys.py), when its first job was created, and the workers running one of its jobs
now. The gateway keeps no tenant registry and no tenant limits: every tenant is
`active`, its `limits` empty. A caller bound to tenants (access.Scope) sees those only;
another tenant is 404, as one that has had no job.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from gateway.core import INVALID_REQUEST, State
from gateway.core.job_filter import JobFilter
from gateway.core.tenants import is_valid_tenant
from gateway.http import access, errors
from gateway.http.answers import Answer
from gateway.http.binding import Binding
from gateway.http.errors import ApiError
from gateway.http.shared import as_recorded, page_of, settled
from gateway.view.listing import jobs_page

# The UI's JobCounts: these states, each always present.
COUNTED = ("available", "active", "scheduled", "retryable", "completed", "discarded", "cancelled")
_SUMMARY_FIELDS = ("id", "type", "queue", "state", "priority", "attempt", "created_at")


async def list_tenants(request: Request, binding: Binding, _: str) -> Answer:
    """Every tenant the caller sees, by id, a page at a time."""
    page = page_of(request, numbered=True)
    await settled(binding)
    scope = access.scope()
    known = {t: k for t, k in binding.view.tenants().items() if scope.sees_tenant(t)}
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
    })  # fmt: skip


async def jobs(request: Request, binding: Binding, _: str) -> Answer:
    """The tenant's jobs, a page at a time, by state, queue and id (as the UI's JobSummary)."""
    tenant_id, _known_tenant = await _known(request, binding)
    page = page_of(request, numbered=True)
    found, total = jobs_page(
        binding.view, JobFilter(), page.first, page.count, tenants=(tenant_id,)
    )
    summaries = [
        {k: v for k, v in as_recorded(job).items() if k in _SUMMARY_FIELDS and v is not None}
        for job in found
    ]
    return Answer(200, page.paged(summaries, total))


async def _known(request: Request, binding: Binding) -> tuple[str, dict[str, Any]]:
    """The tenant the path names, as the view knows it; 404 for one the caller does not
    see or that has had no job, 400 for an id that names no tenant."""
    tenant_id = request.path_params["tenant_id"]
    if not is_valid_tenant(tenant_id):
        raise ApiError(400, INVALID_REQUEST, f"no tenant is named {tenant_id!r}")
    await settled(binding)
    known = binding.view.tenants().get(tenant_id)
    if known is None or not access.scope().sees_tenant(tenant_id):
        raise ApiError(
            404, errors.NOT_FOUND, f"tenant {tenant_id} has had no job",
            details={"resource_type": "tenant", "resource_id": tenant_id},
        )  # fmt: skip
    return str(tenant_id), known


def _tenant(binding: Binding, tenant_id: str, known: dict[str, Any]) -> dict[str, Any]:
    """A tenant as the UI's Tenant reads it."""
    queues = known["queues"]
    return {
        "id": tenant_id, "name": tenant_id, "state": "active", "limits": {},
        "stats": {
            "queues": sum(1 for counts in queues.values() if any(counts.values())),
            "jobs": _counts(queues), "workers": len(_workers(binding, tenant_id)),
        },
        "created_at": known["created_at"],
    }  # fmt: skip


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
