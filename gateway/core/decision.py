"""A decision: what became of a request, the job it made or met, and what it did.

`engine.decide` makes one; decision_records.py publishes it. Each field is a value
the processor writes as it is (see `decision_record`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from gateway.core.entries import Entry, effective_state
from gateway.core.errors import GatewayError
from gateway.core.holder import Holder
from gateway.core.policy import UniquePolicy
from gateway.core.request import Request
from gateway.core.states import State
from gateway.core.times import format_rfc3339

DUPLICATE_MESSAGE = "A job matching the uniqueness key already exists"


class Outcome(StrEnum):
    ACCEPTED = "accepted"
    REJECTED = "rejected"
    IGNORED = "ignored"
    REPLACED = "replaced"
    UPDATED = "updated"
    INVALID = "invalid"


# Not frozen: built for every record, and a frozen dataclass sets each field through
# object.__setattr__ (seven times the cost). Treated as a value all the same: never assigned.
@dataclass(slots=True, init=False)
class Change:
    """One field an update changed in the existing job."""

    field: str
    before: Any
    after: Any

    def __init__(self, field: str, before: Any, after: Any) -> None:
        self.field = field
        self.before = before
        self.after = after


@dataclass(slots=True, init=False)  # not frozen: see Change
class Debounced:
    """What a debounce did: the job's new run time (None: it moved no job, only restarted
    the holder's lock), the burst's start (the job's creation), whether max_wait capped
    the run time, and whether the holder's lock restarted."""

    run_at: int | None
    burst_start: int | None
    capped: bool = False
    lock_restarted: bool = False

    def __init__(
        self,
        run_at: int | None,
        burst_start: int | None,
        capped: bool = False,
        lock_restarted: bool = False,
    ) -> None:
        self.run_at = run_at
        self.burst_start = burst_start
        self.capped = capped
        self.lock_restarted = lock_restarted

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_at": None if self.run_at is None else format_rfc3339(self.run_at),
            "burst_start": None if self.burst_start is None else format_rfc3339(self.burst_start),
            "capped": self.capped,
            "lock_restarted": self.lock_restarted,
        }


@dataclass(slots=True, init=False)  # not frozen: see Change
class Decision:
    outcome: Outcome
    decided_at: int
    # The entries to store under the key afterwards, pruned.
    entries: tuple[Entry, ...]
    unique_key: str | None = None
    policy: UniquePolicy | None = None
    # The accepted job record (accepted, replaced), or the updated one (updated).
    job: dict[str, Any] | None = None
    # The matched job (rejected, ignored, replaced) and its effective state.
    existing: Entry | None = None
    existing_state: State | None = None
    # Jobs moved to cancelled by a replace, as they were before.
    cancelled: tuple[Entry, ...] = ()
    error: GatewayError | None = None
    # The fields an update changed (updated).
    changes: tuple[Change, ...] = ()
    # The holder the accepted job keeps its key by (Zizq, Faktory).
    holder: Holder | None = None
    # What a debounce did (an updated job, or a holder's restarted lock); None: no debounce.
    debounced: Debounced | None = None
    # The duplicate kept as a job of its own (kept_duplicates.py): dead, or rescheduled.
    duplicate: dict[str, Any] | None = None

    def __init__(
        self,
        outcome: Outcome,
        decided_at: int,
        entries: tuple[Entry, ...],
        unique_key: str | None = None,
        policy: UniquePolicy | None = None,
        job: dict[str, Any] | None = None,
        existing: Entry | None = None,
        existing_state: State | None = None,
        cancelled: tuple[Entry, ...] = (),
        error: GatewayError | None = None,
        changes: tuple[Change, ...] = (),
        holder: Holder | None = None,
        debounced: Debounced | None = None,
        duplicate: dict[str, Any] | None = None,
    ) -> None:
        self.outcome = outcome
        self.decided_at = decided_at
        self.entries = entries
        self.unique_key = unique_key
        self.policy = policy
        self.job = job
        self.existing = existing
        self.existing_state = existing_state
        self.cancelled = cancelled
        self.error = error
        self.changes = changes
        self.holder = holder
        self.debounced = debounced
        self.duplicate = duplicate

    def with_existing(self, existing: Entry) -> Decision:
        """The decision with another existing job: dataclasses.replace without its cost
        (a duplicate's decision gets its job in full; test_engine checks every field)."""
        return Decision(
            self.outcome, self.decided_at, self.entries, self.unique_key, self.policy,
            self.job, existing, self.existing_state, self.cancelled, self.error, self.changes,
            self.holder, self.debounced, self.duplicate,
        )  # fmt: skip

    @property
    def existing_job(self) -> dict[str, Any] | None:
        """The existing job as reported to the caller (e.g. for ignore's deduplicated reply)."""
        if self.existing is None:
            return None
        if self.existing.job is not None:
            return {**self.existing.job, "state": str(self.existing_state)}
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


def refuse(
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
        error=(
            GatewayError(request.duplicate_code, DUPLICATE_MESSAGE)
            if outcome is Outcome.REJECTED
            else None
        ),
    )
