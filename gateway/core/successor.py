"""Keep the last while running: a key's one pending successor.

`unique.keep_last_if_active` (an OJS extension) and BullMQ's
`deduplication.keepLastIfActive`. The work a request asks for while the key's
job runs is not lost: the request becomes the key's successor, a job in state
`pending` that no worker is offered and that is kept off `jobs`, and it is
enqueued when the job it follows finishes, however it finishes (completed,
discarded, cancelled, expired). Rules, each decided here and only here:

- A request with the option meets the rule when a job matching it is active,
  or when the key already has a pending successor (its job has not finished:
  it may be retrying, or back in the queue after a lost lease). The rule comes
  before the policy's debounce and on_conflict.
- The first such request is accepted as the successor (state pending); a newer
  one replaces it: the older successor is cancelled and the newer one, with
  its own payload, is the successor now (outcome `replaced`). Latest data wins.
  The decision reports the job followed as the existing job.
- The successor is released when no other live job holds the key (every job
  it followed is terminal): it becomes available, or scheduled if its run time
  is still ahead (a relative one counts from the release), in the same
  transaction as the move that finished its job. So at most one job of the key
  runs at a time, and at most two live jobs hold it: the running one and its
  successor.
- A successor leaves `pending` only so: a job event may cancel it, nothing
  else moves it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from gateway.core.entries import Entry, effective_state
from gateway.core.errors import INVALID_REQUEST, GatewayError
from gateway.core.jobs import initial_state
from gateway.core.states import State
from gateway.core.times import format_rfc3339

SUCCESSOR_OF = "successor_of"  # the job record's field: the job its successor follows
SUCCESSOR_DELAY = "successor_delay_ms"  # and its run time after its release, if relative


def followed(kept: Iterable[Entry], matches: Iterable[Entry], now_ms: int) -> Entry | None:
    """The job a keep-last request would follow (see the rules), else None: an active
    match, else, when the key has a pending successor, the live job it waits for."""
    active = next((e for e in matches if effective_state(e, now_ms) is State.ACTIVE), None)
    if active is not None:
        return active
    kept = tuple(kept)
    if pending(kept) is None:
        return None
    return next((e for e in reversed(kept) if not e.terminal and not e.successor), None)


def pending(entries: Iterable[Entry]) -> Entry | None:
    """The key's pending successor, if it has one."""
    return next((e for e in entries if e.successor and e.state is State.PENDING), None)


def as_successor(
    job: dict[str, Any], entry: Entry, holder_id: str, delay_ms: int | None
) -> tuple[dict[str, Any], Entry]:
    """An accepted job and its entry, made the successor of `holder_id`: pending until
    released, so neither enqueued nor offered. A relative run time (`delay_ms`, BullMQ's
    delay, OJS's "+PT5M") counts from the release, the job's real enqueue: until then the
    job has no scheduled time but its delay."""
    job = {**job, "state": str(State.PENDING), SUCCESSOR_OF: holder_id}
    job.pop("enqueued_at", None)
    scheduled_at = entry.scheduled_at
    if delay_ms is not None:
        job.pop("scheduled_at", None)
        job[SUCCESSOR_DELAY] = delay_ms
        scheduled_at = None
    kept_copy = None if entry.job is None else job  # the entry keeps a copy where it did
    return job, replace(
        entry, state=State.PENDING, successor=True, job=kept_copy, scheduled_at=scheduled_at,
        delay_ms=delay_ms,
    )  # fmt: skip


def release(entries: tuple[Entry, ...], now_ms: int) -> tuple[tuple[Entry, ...], Entry | None]:
    """The key's entries after its successor is released, and the released entry; the
    entries as they were and None while another live job still holds the key."""
    successor = pending(entries)
    if successor is None or any(not e.terminal and not e.successor for e in entries):
        return entries, None
    scheduled_at = successor.scheduled_at
    if successor.delay_ms is not None:
        scheduled_at = now_ms + successor.delay_ms
    state = initial_state(scheduled_at, now_ms)
    released = replace(
        successor.moved_to(state, now_ms, scheduled_at), successor=False, delay_ms=None
    )
    return tuple(released if e is successor else e for e in entries), released


def released_job(job: Mapping[str, Any], entry: Entry, now_ms: int) -> dict[str, Any]:
    """A successor's record once released (`entry`: its entry from `release`)."""
    out = {**job, "state": str(entry.state)}
    if out.pop(SUCCESSOR_DELAY, None) is not None and entry.scheduled_at is not None:
        out["scheduled_at"] = format_rfc3339(entry.scheduled_at)
    if entry.state is State.AVAILABLE:
        out["enqueued_at"] = format_rfc3339(now_ms)
    return out


def held_back(entries: Iterable[Entry], job_id: str, target: State | None) -> GatewayError | None:
    """Why an event may not move a pending successor to `target` (None: it may)."""
    if target is State.CANCELLED:
        return None
    successor = pending(entries)
    if successor is None or successor.job_id != job_id:
        return None
    return GatewayError(
        INVALID_REQUEST,
        f"job {job_id} is the pending successor of its unique key's running job: it is "
        "enqueued when that job finishes, and may only be cancelled before",
    )
