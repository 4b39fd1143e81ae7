"""What a decision publishes besides the job: the audit record's fields, and the
cancellations workers act on after a replace.

The processor adds the record's own fields (request_id, decided_at, source)
and writes the records (stage/records.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.core.decision import Decision, Outcome
from gateway.core.entries import effective_state
from gateway.core.policy import UniquePolicy
from gateway.core.states import State
from gateway.core.times import format_rfc3339


def audit_fields(decision: Decision) -> dict[str, Any]:
    """The decision's part of the audit record.

    job_id is the new job, or for rejected and ignored the existing one.

    The processor adds request_id, decided_at and source.
    """
    fields = {
        "outcome": str(decision.outcome),
        "unique_key": decision.unique_key,
        "job_id": _job_id(decision),
        "existing_job_id": None if decision.existing is None else decision.existing.job_id,
        "existing_job_state": (
            None if decision.existing_state is None else str(decision.existing_state)
        ),
        "cancelled_job_id": decision.cancelled[0].job_id if decision.cancelled else None,
        "cancelled_job_ids": [e.job_id for e in decision.cancelled],
        "error": None if decision.error is None else decision.error.to_dict(),
        "policy": None if decision.policy is None else _policy_dict(decision.policy),
        "holder": None if decision.holder is None else decision.holder.to_dict(),
        "updated_fields": (
            [{"field": c.field, "from": c.before, "to": c.after} for c in decision.changes]
            if decision.outcome is Outcome.UPDATED
            else None
        ),
    }
    if decision.debounced is not None:  # only then: other records keep their bytes
        fields["debounce"] = decision.debounced.to_dict()
    if decision.duplicate is not None:  # as for debounce: only then
        job = decision.duplicate
        fields["duplicate_job"] = {"id": job["id"], "state": job["state"]}
    return fields


# Policy dicts by the policy's identity: request.py hands out one policy object per policy
# text, and hashing a policy (its dataclass __hash__, run as Python) costs more than its
# dict. Each entry keeps its policy alive, so no other object can take its id meanwhile.
_POLICY_DICTS: dict[int, tuple[UniquePolicy, dict[str, Any]]] = {}
_POLICY_DICTS_MAX = 1024


def _policy_dict(policy: UniquePolicy) -> dict[str, Any]:
    """`policy.to_dict()`, once per policy: every decision record carries one. Shared, so
    read-only: the record is serialised as it is."""
    known = _POLICY_DICTS.get(id(policy))
    if known is not None and known[0] is policy:
        return known[1]
    if len(_POLICY_DICTS) >= _POLICY_DICTS_MAX:
        _POLICY_DICTS.clear()
    shown = policy.to_dict()
    _POLICY_DICTS[id(policy)] = (policy, shown)
    return shown


# A duplicate's audit record names the job it met by its record's name in the key's state
# (`job/<id>`, as `state.before` carries it read) instead of carrying it a second time as
# `job`. Its reply and its idempotent answer keep `job`. An audit record written before
# references carries `job` itself, as does one whose state does not carry the job as shown
# (its own record wrote the job before reading it, or the job was too large to carry).
JOB_REF = "job_ref"
# A job record's fields the job as shown and published leaves out: where it is filed.
_FILED = ("route", "partition")
# How `state.before` shows a value it does not carry as JSON (stage/trail.py).
_NOT_CARRIED = ({"digest", "bytes"}, {"b64"})


def published_job(record: Mapping[str, Any]) -> dict[str, Any]:
    """A job as shown and published, from its record in the processor's state."""
    return {k: v for k, v in record.items() if k not in _FILED}


def job_shown(record: Mapping[str, Any]) -> Any:
    """The job a request's audit record shows: its `job` (the new or updated job, or the one
    that held the key), or the job record its `job_ref` names in the key's `state.before`,
    as the caller was shown it (`Decision.existing_job`: in `existing_job_state`). Read
    from the record alone; None when the reference names nothing the record carries."""
    ref = record.get(JOB_REF)
    if ref is None:
        return record.get("job")
    state = record.get("state")
    rows = state.get("before") if isinstance(state, Mapping) else None
    key = record.get("unique_key")
    for row in rows if isinstance(rows, list) else ():
        if isinstance(row, list) and len(row) >= 3 and row[0] == key and row[1] == ref:
            value = row[2]
            if not isinstance(value, Mapping) or set(value) in _NOT_CARRIED:
                return None
            shown = published_job(value)
            shown["state"] = record.get("existing_job_state")
            return shown
    return None


def _job_id(decision: Decision) -> str | None:
    """The job the caller ends up with: the new or updated one, or the existing one."""
    if decision.job is not None:
        return str(decision.job["id"])
    return None if decision.existing is None else decision.existing.job_id


def on_jobs(decision: Decision) -> bool:
    """Whether the decision's job goes to `jobs`, where workers take jobs: any new or
    updated job but a key's pending successor, which waits off it (successor.py)."""
    if decision.job is None:
        return False
    return decision.outcome is Outcome.UPDATED or decision.job["state"] != State.PENDING


def cancellations(decision: Decision) -> list[dict[str, Any]]:
    """One cancellation per job a replace cancelled, for workers to act on."""
    return [
        {
            "job_id": entry.job_id,
            "unique_key": decision.unique_key,
            "previous_state": str(effective_state(entry, decision.decided_at)),
            "reason": "replaced",
            "replaced_by": None if decision.job is None else decision.job["id"],
            "cancelled_at": format_rfc3339(decision.decided_at),
        }
        for entry in decision.cancelled
    ]
