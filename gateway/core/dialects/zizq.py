"""Zizq's unique options (`"zizq"`).

Job: `type`, `queue`, `payload` (an object or array; the job's args). With
`uniqueKey` (a string) the job is unique by that key alone, global across
types and queues, within the scope `uniqueWhile` (`queued`, the default,
`active` or `exists`) of the job that holds the key: the scope is the
holder's, never the newcomer's. A duplicate returns the existing job.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.core.dialects import fields as f
from gateway.core.envelope import Envelope, job_id_or_raise
from gateway.core.errors import invalid_request
from gateway.core.holder import QUEUED_STATES, ZizqRule, ZizqScope
from gateway.core.policy import Judge, OnConflict, UniquePolicy
from gateway.core.request import Request
from gateway.core.states import ALL_STATES, TERMINAL_STATES, State

ZIZQ = "zizq"
NAMESPACE = "zizq"
# The states each scope holds in, shown in the policy as applied (the holder's
# rule, holder.py, is what decides).
SCOPE_STATES = {
    ZizqScope.QUEUED: QUEUED_STATES,
    ZizqScope.ACTIVE: frozenset(State) - TERMINAL_STATES,
    ZizqScope.EXISTS: frozenset(ALL_STATES),
}


def parse(raw: Mapping[str, Any]) -> Request:
    job_type = f.name(raw, "type", '"send_email"')
    payload = raw.get("payload", {})
    if not isinstance(payload, dict | list):
        raise invalid_request("payload must be a JSON object or array")
    envelope = Envelope(
        raw=f.job_fields(raw, ("payload",), args=payload),
        type=job_type,
        queue=f.queue(raw),
        args=payload,
        id=job_id_or_raise(raw.get("id")),
    )
    key, scope = raw.get("uniqueKey"), raw.get("uniqueWhile")
    if key is None:
        if scope is not None:
            raise invalid_request("uniqueWhile needs a uniqueKey")
        return Request(envelope, None, None, ZIZQ)
    if not isinstance(key, str) or not key:
        raise invalid_request('uniqueKey must be a non-empty string, e.g. "send_email:welcome:42"')
    rule = ZizqRule(_scope(scope))
    policy = UniquePolicy(
        keys=(),
        states=SCOPE_STATES[rule.scope],
        on_conflict=OnConflict.IGNORE,
        judge=Judge.HOLDER,
    )
    unique_key = f.namespaced_key(NAMESPACE, {"key": key}, "uniqueKey")
    return Request(envelope, policy, unique_key, ZIZQ, holder_rule=rule)


def _scope(raw: Any) -> ZizqScope:
    if raw is None:
        return ZizqScope.QUEUED
    names = ", ".join(f'"{s}"' for s in ZizqScope)
    if not isinstance(raw, str) or raw not in {s.value for s in ZizqScope}:
        raise invalid_request(f"uniqueWhile must be one of {names}")
    return ZizqScope(raw)
