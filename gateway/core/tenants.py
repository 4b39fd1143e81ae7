"""A job's tenant (OJS multi-tenancy §5), and the unique keys it scopes.

A job belongs to the tenant its `meta.tenant_id` names: 1 to 128 characters of
letters, digits, `.`, `_`, `:` and `-`, starting with a letter or digit (§5.2). A job
without one belongs to no tenant and is decided as it always was.

A tenant's unique keys are its own: a request marked as scoped by its tenant (the
`tenant_scoped` header, wire.py; the SDK marks every job with a tenant) holds the key
`scoped_key(key, tenant)`, a SHA-256 of the dimension's key and the tenant, so two
tenants' jobs never share a key, whatever their dialect. The mark, not the meta field,
turns it on: a request without it is decided as before the rule, so a log recorded
before it replays the same, even where its jobs named a tenant.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any

from gateway.core.canonical import canonical_json
from gateway.core.errors import INVALID_REQUEST, GatewayError
from gateway.core.request import Request

TENANT_FIELD = "tenant_id"
MAX_TENANT_CHARS = 128
TENANT_RULE = (
    f'1 to {MAX_TENANT_CHARS} characters of A-Z, a-z, 0-9, ".", "_", ":" and "-", '
    "starting with a letter or digit"
)
_TENANT = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9._:-]{0,127}")


def is_valid_tenant(value: object) -> bool:
    return isinstance(value, str) and _TENANT.fullmatch(value) is not None


def tenant_of(job: Mapping[str, Any]) -> str | None:
    """The tenant a job (or a cron's job template) names in its meta; None for none."""
    return tenant_in(job.get("meta"))


def tenant_in(meta: object) -> str | None:
    """The tenant `meta` names; None for none."""
    tenant = meta.get(TENANT_FIELD) if isinstance(meta, dict) else None
    return tenant if isinstance(tenant, str) else None


def tenant_problem(meta: object, where: str = "meta.tenant_id") -> str | None:
    """Why the tenant `meta` names is not one (None: it names a valid one, or none)."""
    if not isinstance(meta, dict) or TENANT_FIELD not in meta:
        return None
    if is_valid_tenant(meta[TENANT_FIELD]):
        return None
    return f"{where} must be a string of {TENANT_RULE}"


def scoped_key(unique_key: str, tenant: str) -> str:
    """The key a tenant's job holds for the dimensions' key `unique_key`."""
    return hashlib.sha256(canonical_json({"key": unique_key, "tenant": tenant}, "")).hexdigest()


def scoped(request: Request) -> Request | GatewayError:
    """A request marked as scoped by its tenant, its key scoped (a request without a key is
    as it was); one whose meta names no valid tenant is invalid."""
    meta = request.envelope.meta
    tenant = None if meta is None else meta.get(TENANT_FIELD)
    if not is_valid_tenant(tenant):
        return GatewayError(
            INVALID_REQUEST,
            "the request is marked as scoped by its tenant, so meta.tenant_id must be a "
            f"string of {TENANT_RULE}",
        )
    if request.unique_key is None:
        return request
    return Request(
        request.envelope, request.policy, scoped_key(request.unique_key, str(tenant)),
        request.dialect, request.holder_rule, request.stores_job, request.duplicate_code,
    )  # fmt: skip


def for_tenant(job: object, tenant: str | None) -> object:
    """`job` sent for `tenant` (None: as it is): its `meta.tenant_id` set to it. A tenant that
    is none, or a job whose meta names another, is the GatewayError saying so; a job that is
    no object is left to the parser."""
    if tenant is None or not isinstance(job, dict):
        return job
    if not is_valid_tenant(tenant):
        return GatewayError(INVALID_REQUEST, f"the tenant must be a string of {TENANT_RULE}")
    meta = job.get("meta")
    named = tenant_in(meta)
    if named is not None and named != tenant:
        return GatewayError(
            INVALID_REQUEST, f"meta.tenant_id {named!r} and the tenant {tenant!r} differ; send one"
        )
    return {**job, "meta": {**(meta if isinstance(meta, dict) else {}), TENANT_FIELD: tenant}}
