"""A duplicate kept as a job of its own: sidekiq-unique-jobs' `reject` and `reschedule`.

Under either strategy the request is answered as under `log` (ignored: Sidekiq's
push returns a nil jid and the caller gets the existing job), and the duplicate
is not lost. Rules, each decided here and only here:

- `reject` (KeepDuplicate DEAD): the duplicate becomes a job of its own, born
  `discarded` with a `SidekiqUniqueJobs::Conflict` error: a dead letter job (the
  gem's dead set). It holds no key; a dead-letter retry enqueues it again only
  when no other live job holds the key (lifecycle.on_key), as the gem's retry
  from the dead set pushes it through the uniqueness check again.
- `reschedule` (KeepDuplicate RESCHEDULE): the duplicate becomes a job of its own
  in state `pending`, kept off `jobs` and holding no key, due at decision time +
  `delay_ms` (the gem's `schedule_in`, default 5 s). When event time passes that
  instant (`reschedule_due`; the processor's lease schedule looks at it then), its
  uniqueness is decided again (`redecide`): if no other job holds the key it takes
  the key, as an accepted job takes it then, and is enqueued (available); else it
  is rescheduled again, due `delay_ms` later. Until then a job event may only
  cancel it (`held_back`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gateway.core.entries import Entry, prune
from gateway.core.errors import INVALID_REQUEST, GatewayError
from gateway.core.holder import Holder, StatesRule, holder_for
from gateway.core.jobs import accepted_job
from gateway.core.matching import holds_key
from gateway.core.policy import Judge, OnConflict, UniquePolicy
from gateway.core.request import Fate, KeepDuplicate, Request
from gateway.core.states import State
from gateway.core.times import format_rfc3339, parse_rfc3339

# The rescheduled job's record field: {"of": the job it met, "delay_ms", "holder": the rule it
# takes the key by, "times": how often it met a holder}.
RESCHEDULE_FIELD = "reschedule"


def kept_job(
    request: Request, keep: KeepDuplicate, job_id: str, existing: Entry, now_ms: int
) -> dict[str, Any]:
    """The duplicate as a job of its own (see the rules): dead, or pending until due."""
    envelope = request.envelope
    limit = None if request.policy is None else request.policy.concurrency
    job = accepted_job(envelope, job_id, request.unique_key, now_ms, None, limit)
    job.pop("enqueued_at", None)
    now = format_rfc3339(now_ms)
    if keep.fate is Fate.DEAD:
        error = {
            "type": request.duplicate_code, "attempt": 0, "at": now,
            "message": f"a duplicate of job {existing.job_id}, sent to the dead letters "
            "(on_conflict reject)",
        }  # fmt: skip
        job.update(state=str(State.DISCARDED), discarded_at=now, completed_at=now, error=error,
                   errors=[error])  # fmt: skip
        return job
    rule = request.holder_rule
    assert isinstance(rule, StatesRule)
    job.update(
        state=str(State.PENDING),
        scheduled_at=format_rfc3339(now_ms + keep.delay_ms),
        **{RESCHEDULE_FIELD: {"of": existing.job_id, "delay_ms": keep.delay_ms,
                              "holder": Holder(rule, now_ms).to_dict(), "times": 1}},
    )  # fmt: skip
    return job


def reschedule_due(job: Mapping[str, Any]) -> int | None:
    """When a rescheduled job's uniqueness is decided again; None for any other job."""
    if job.get("state") != State.PENDING or not isinstance(job.get(RESCHEDULE_FIELD), Mapping):
        return None
    at = job.get("scheduled_at")
    return parse_rfc3339(at) if isinstance(at, str) else None


def held_back(job: Mapping[str, Any] | None, target: State | None) -> GatewayError | None:
    """Why an event may not move a rescheduled job to `target` (None: it may)."""
    if target is State.CANCELLED or job is None or reschedule_due(job) is None:
        return None
    return GatewayError(
        INVALID_REQUEST,
        f"job {job['id']} is a rescheduled duplicate: its uniqueness is decided again at "
        f"{job['scheduled_at']}, and it is enqueued then if its lock is free; it may only be "
        "cancelled before",
    )


@dataclass(frozen=True, slots=True)
class Redecided:
    job: dict[str, Any]
    entries: tuple[Entry, ...]
    # Whether it took the key (enqueued), else it met a holder (rescheduled again).
    took: bool


def redecide(
    job: Mapping[str, Any], entries: Iterable[Entry], now_ms: int, retention_ms: int
) -> Redecided:
    """A rescheduled job come due (`reschedule_due` <= now_ms), decided again."""
    marker = dict(job[RESCHEDULE_FIELD])
    rule = Holder.from_dict(marker["holder"]).rule
    assert isinstance(rule, StatesRule)
    kept = prune(entries, now_ms, retention_ms)
    judge = UniquePolicy(states=rule.states, on_conflict=OnConflict.IGNORE, judge=Judge.HOLDER)
    holder = next((e for e in kept if holds_key(e, judge, now_ms)), None)
    out = dict(job)
    if holder is not None:
        marker.update(of=holder.job_id, times=int(marker.get("times", 1)) + 1)
        out.update(scheduled_at=format_rfc3339(now_ms + marker["delay_ms"]),
                   **{RESCHEDULE_FIELD: marker})  # fmt: skip
        return Redecided(out, kept, took=False)
    out.update(state=str(State.AVAILABLE), enqueued_at=format_rfc3339(now_ms))
    taken = holder_for(rule, now_ms, None)
    entry = Entry(
        job_id=str(job["id"]), state=State.AVAILABLE, created_at=now_ms,
        state_changed_at=now_ms, type=str(job.get("type", "")), queue=str(job.get("queue", "")),
        max_attempts=int(job.get("max_attempts") or 1), holder=taken,
    )  # fmt: skip
    return Redecided(out, prune((*kept, entry), now_ms, retention_ms), took=True)
