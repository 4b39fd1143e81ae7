"""A job's tenant (OJS multi-tenancy §5), and the unique keys it scopes.

A job belongs to the tenant its `meta.tenant_id` names: 1 to 128 characters of
letters, digits, `.`, `_`, `:` and `-`, starting with a letter or digit (§5.2). A job
without one belongs to no tenant and is decided as it always was. In every dialect that is
the meta of the job's record (`request_tenant`): River's `metadata`, Oban's `meta`, and in
the others a `meta` field, which their records keep as sent (`meta_field`).

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
from dataclasses import replace
from typing import Any

from gateway.core.canonical import canonical_json
from gateway.core.dialects.river import RIVER
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


# The field a job names its tenant under in its dialect, when not `meta`: its record's meta.
_META_FIELDS = {RIVER: "metadata"}


def meta_field(job: Mapping[str, Any]) -> str:
    """Where a job as sent, in its dialect, keeps the meta its record will show."""
    dialect = job.get("dialect")
    return _META_FIELDS.get(dialect, "meta") if isinstance(dialect, str) else "meta"


def request_tenant(request: Request) -> str | None:
    """The tenant a request's job is of: the one its record's meta names (the record is the
    envelope's raw fields, in every dialect), as every route shows the job (`tenant_of`)."""
    return tenant_of(request.envelope.raw)


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
    meta = request.envelope.raw.get("meta")
    tenant = meta.get(TENANT_FIELD) if isinstance(meta, Mapping) else None
    if not is_valid_tenant(tenant):
        return GatewayError(
            INVALID_REQUEST,
            "the request is marked as scoped by its tenant, so meta.tenant_id must be a "
            f"string of {TENANT_RULE}",
        )
    if request.unique_key is None:
        return request
    return replace(request, unique_key=scoped_key(request.unique_key, str(tenant)))


def for_tenant(job: object, tenant: str | None) -> object:
    """`job` sent for `tenant` (None: as it is): the `tenant_id` of its meta (`meta_field`)
    set to it. A tenant that is none, or a job whose meta names another, is the GatewayError
    saying so; a job that is no object is left to the parser."""
    if tenant is None or not isinstance(job, dict):
        return job
    if not is_valid_tenant(tenant):
        return GatewayError(INVALID_REQUEST, f"the tenant must be a string of {TENANT_RULE}")
    field = meta_field(job)
    meta = job.get(field)
    named = tenant_in(meta)
    if named is not None and named != tenant:
        return GatewayError(
            INVALID_REQUEST,
            f"{field}.tenant_id {named!r} and the tenant {tenant!r} differ; send one",
        )
    return {**job, field: {**(meta if isinstance(meta, dict) else {}), TENANT_FIELD: tenant}}
