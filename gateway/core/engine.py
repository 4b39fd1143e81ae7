"""The decision engine: (stored entries for a key, request, decision time) -> decision.

Pure: no clock, no I/O. Times are epoch milliseconds (the request record's
broker timestamp), so replaying the log replays every decision.

Rules, each decided here and only here:
- An entry is a duplicate iff its effective state (a scheduled job whose
  time has passed counts as available) is in the request's states and the
  request has no period or now < entry.created_at + period.
- Entries are first pruned (see entries.py); matching sees what is kept.
- Several entries may match. The one reported as the existing job is the
  newest-created live (non-terminal) match, else the newest terminal match.
- reject -> rejected; ignore -> ignored; both report the existing job.
- replace cancels every live match, the active one included (this gateway
  is strong: the decision lists the cancelled jobs so the processor emits
  cancellations a worker can act on), and accepts the new job in the same
  decision. Terminal matches cannot be cancelled: they are superseded and
  left as they are. The outcome is `replaced` whenever a duplicate existed,
  even if it was terminal and nothing was cancelled.
- replace_except_schedule is replace, except that when the existing job is
  still scheduled the new job keeps its scheduled_at.
- Job ids are unique. A request carrying the id of a known job (one stored
  under its key, or `known`, the job record the processor holds under that
  id) is rejected as a duplicate naming that job, whatever its policy.
- A request without a unique policy is accepted and stores no entry.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from functools import lru_cache
from typing import Any

from gateway.core.entries import DEFAULT_RETENTION_MS, Entry, effective_state, prune
from gateway.core.errors import DUPLICATE, GatewayError
from gateway.core.jobs import initial_state, job_record, uuid7
from gateway.core.policy import OnConflict, UniquePolicy
from gateway.core.request import Request
from gateway.core.states import State
from gateway.core.times import format_rfc3339, parse_rfc3339

DUPLICATE_MESSAGE = "A job matching the uniqueness key already exists"


class Outcome(StrEnum):
    ACCEPTED = "accepted"
    REJECTED = "rejected"
    IGNORED = "ignored"
    REPLACED = "replaced"
    INVALID = "invalid"


@dataclass(frozen=True, slots=True)
class Decision:
    outcome: Outcome
    decided_at: int
    # The entries to store under the key afterwards, pruned.
    entries: tuple[Entry, ...]
    unique_key: str | None = None
    policy: UniquePolicy | None = None
    # The accepted job record (accepted, replaced).
    job: dict[str, Any] | None = None
    # The matched job (rejected, ignored, replaced) and its effective state.
    existing: Entry | None = None
    existing_state: State | None = None
    # Jobs moved to cancelled by a replace, as they were before.
    cancelled: tuple[Entry, ...] = ()
    error: GatewayError | None = None

    @property
    def existing_job(self) -> dict[str, Any] | None:
        """The existing job as reported to the caller (e.g. for ignore's deduplicated reply)."""
        if self.existing is None:
            return None
        job = {
            "id": self.existing.job_id,
            "type": self.existing.type,
            "queue": self.existing.queue,
            "state": str(self.existing_state),
            "created_at": format_rfc3339(self.existing.created_at),
        }
        if self.existing.scheduled_at is not None:
            job["scheduled_at"] = format_rfc3339(self.existing.scheduled_at)
        return job


def decide(
    entries: Iterable[Entry],
    request: Request | GatewayError,
    now_ms: int,
    retention_ms: int = DEFAULT_RETENTION_MS,
    *,
    seed: bytes,
    known: Mapping[str, Any] | None = None,
) -> Decision:
    """Decide one request. `seed` identifies the request (see jobs.uuid7).

    `known`: the job record already held under the request's id, if any.
    """
    kept = prune(entries, now_ms, retention_ms)
    if isinstance(request, GatewayError):
        return Decision(Outcome.INVALID, now_ms, kept, error=request)
    policy, key = request.policy, request.unique_key
    job_id = request.envelope.id
    taken = next((e for e in kept if e.job_id == job_id), None) if job_id else None
    if taken is None and known is not None:
        taken = entry_of(known)
    if taken is not None:
        refused = _refuse(Outcome.REJECTED, request, kept, now_ms, taken)
        message = f"job id {taken.job_id} is already taken by a {taken.state} job"
        return replace(refused, error=GatewayError(DUPLICATE, message))
    if policy is None:
        return _accept(request, kept, now_ms, seed)

    matches = [e for e in kept if _matches(e, policy, now_ms)]
    if not matches:
        return _accept(request, kept, now_ms, seed)
    existing = _pick(matches)
    if policy.on_conflict is OnConflict.REJECT:
        return _refuse(Outcome.REJECTED, request, kept, now_ms, existing)
    if policy.on_conflict is OnConflict.IGNORE:
        return _refuse(Outcome.IGNORED, request, kept, now_ms, existing)

    to_cancel = [e for e in matches if not e.terminal]
    scheduled_at = request.envelope.scheduled_at
    if (
        policy.on_conflict is OnConflict.REPLACE_EXCEPT_SCHEDULE
        and effective_state(existing, now_ms) is State.SCHEDULED
    ):
        scheduled_at = existing.scheduled_at
    cancel_ids = {e.job_id for e in to_cancel}
    after = [e.moved_to(State.CANCELLED, now_ms) if e.job_id in cancel_ids else e for e in kept]
    accepted = _accept(request, after, now_ms, seed, scheduled_at)
    return Decision(
        Outcome.REPLACED,
        now_ms,
        prune(accepted.entries, now_ms, retention_ms),
        key,
        policy,
        job=accepted.job,
        existing=existing,
        existing_state=effective_state(existing, now_ms),
        cancelled=tuple(to_cancel),
    )


def entry_of(job: Mapping[str, Any]) -> Entry:
    """A stored job record seen as an entry, to report it as the existing job."""
    created = parse_rfc3339(str(job.get("created_at", ""))) or 0
    scheduled = job.get("scheduled_at")
    return Entry(
        job_id=str(job["id"]),
        state=State(job["state"]),
        created_at=created,
        state_changed_at=created,
        type=str(job.get("type", "")),
        queue=str(job.get("queue", "")),
        scheduled_at=parse_rfc3339(scheduled) if isinstance(scheduled, str) else None,
        max_attempts=int(job.get("max_attempts") or 1),
    )


def _matches(entry: Entry, policy: UniquePolicy, now_ms: int) -> bool:
    if effective_state(entry, now_ms) not in policy.states:
        return False
    return policy.period_ms is None or now_ms < entry.created_at + policy.period_ms


def _pick(matches: list[Entry]) -> Entry:
    # Newest live match first; among equals the later-stored one (max keeps the last).
    return max(reversed(matches), key=lambda e: (not e.terminal, e.created_at))


def _refuse(
    outcome: Outcome, request: Request, kept: tuple[Entry, ...], now_ms: int, existing: Entry
) -> Decision:
    return Decision(
        outcome,
        now_ms,
        kept,
        request.unique_key,
        request.policy,
        existing=existing,
        existing_state=effective_state(existing, now_ms),
        error=GatewayError(DUPLICATE, DUPLICATE_MESSAGE) if outcome is Outcome.REJECTED else None,
    )


def _accept(
    request: Request,
    kept: Iterable[Entry],
    now_ms: int,
    seed: bytes,
    scheduled_at: int | None = None,
) -> Decision:
    envelope, key = request.envelope, request.unique_key
    if scheduled_at is None:
        scheduled_at = envelope.scheduled_at
    job_id = envelope.id or uuid7(now_ms, key, seed)
    job = job_record(envelope, job_id, key, now_ms, scheduled_at)
    stored = tuple(kept)
    if key is not None:
        stored += (
            Entry(
                job_id=job_id,
                state=initial_state(scheduled_at, now_ms),
                created_at=now_ms,
                state_changed_at=now_ms,
                type=envelope.type,
                queue=envelope.queue,
                scheduled_at=scheduled_at,
                max_attempts=envelope.max_attempts,
            ),
        )
    return Decision(Outcome.ACCEPTED, now_ms, stored, key, request.policy, job=job)


def audit_fields(decision: Decision) -> dict[str, Any]:
    """The decision's part of the audit record.

    job_id is the new job, or for rejected and ignored the existing one.

    The processor adds request_id, decided_at and source.
    """
    return {
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
    }


@lru_cache(maxsize=1024)
def _policy_dict(policy: UniquePolicy) -> dict[str, Any]:
    """`policy.to_dict()`, once per policy: every decision record carries one. Shared, so
    read-only: the record is serialised as it is."""
    return policy.to_dict()


def _job_id(decision: Decision) -> str | None:
    """The job the caller ends up with: the new one, or the existing one it was refused for."""
    if decision.job is not None:
        return str(decision.job["id"])
    return None if decision.existing is None else decision.existing.job_id


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
