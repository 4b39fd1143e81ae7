"""The decision engine: (stored entries for a key, request, decision time) -> decision.

Pure: no clock, no I/O. Times are epoch milliseconds (the request record's
broker timestamp), so replaying the log replays every decision. What a
decision publishes besides its job (audit fields, cancellations) is
decision_records.py's.

Rules, each decided here and only here (an update and a debounce, which change the
existing job in place, are carried out by updates.py; a successor by successor.py):
- An entry is a duplicate iff it holds its key against the request
  (`matching.holds_key`: the request's states and period, or the holder's rule).
- Entries are first pruned (see entries.py); matching sees what is kept.
- Several entries may match. The one reported as the existing job is the
  newest-created live (non-terminal) match, else the newest terminal match.
- reject -> rejected; ignore -> ignored; both report the existing job. A request
  that keeps its duplicate (sidekiq-unique-jobs' reject and reschedule) is ignored
  and its duplicate made a job of its own, dead or rescheduled (kept_duplicates.py).
- replace cancels every live match, the active one included (this gateway
  is strong: the decision lists the cancelled jobs so the processor emits
  cancellations a worker can act on), and accepts the new job in the same
  decision. Terminal matches cannot be cancelled: they are superseded and
  left as they are. The outcome is `replaced` whenever a duplicate existed,
  even if it was terminal and nothing was cancelled.
- replace_except_schedule is replace, except that when the existing job is
  still scheduled the new job keeps its scheduled_at.
- update (Oban's replace) updates, in the existing job, the fields the policy
  names for its state, to the request's values; the outcome is `updated` and
  the updated job is published. When its state names no fields or no value
  changes, the existing job is returned as under ignore.
- Job ids are unique. A request carrying the id of a known job (one stored
  under its key, or `known`, the job record the processor holds under that
  id) is never a second job. In OJS it is rejected as a duplicate naming that
  job, whatever its policy. In a dialect, resubmitting the job that holds the
  request's own key is answered as that dialect answers a conflict: ignored
  under on_conflict ignore and update, rejected otherwise, whatever its states
  and period; any other known id is rejected as in OJS.
- debounce (an OJS extension, BullMQ's deduplication replace/extend): a
  request whose key is held by a job still waiting (effective state in the
  debounce's states: scheduled or available for OJS, scheduled for BullMQ)
  moves that job instead of meeting on_conflict: its run time becomes the
  request's run time (decision time + delay; BullMQ: its own delay), capped
  at the job's creation (the burst's first request) + max_wait, and under
  `replace` its args and meta become the request's. The outcome is `updated`,
  and the decision carries what the debounce did (`Decision.debounced`: the
  record's `debounce`); the changed fields are its changes, as for any
  update, and the updated job is published. A job that
  no longer waits is a duplicate under on_conflict as before. The first
  request of a burst is accepted to run at decision time + delay. With
  `restart_lock` (BullMQ's extend) the holder's lock restarts at the move,
  or, when the debounce moves no job (extend without replace), whenever the
  lock absorbs a duplicate.
- keep_last_if_active (an OJS extension, BullMQ's keepLastIfActive): a request
  whose key a running job holds becomes the key's one pending successor,
  replacing an older one, before debounce and on_conflict (core/successor.py).
- A request without a unique policy is accepted and stores no entry.
- The accepted job's entry keeps the request's holder rule (Zizq, Faktory,
  BullMQ, sidekiq-unique-jobs, River) and, for dialects whose conflicts
  update it, the job itself. A River request with by_period meets only
  holders of its own period bucket (its scheduled time, else the decision
  time, truncated), recorded in the policy as applied (`bucket_start`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any, assert_never

from gateway.core import successor
from gateway.core.decision import Decision, Outcome, refuse
from gateway.core.entries import DEFAULT_RETENTION_MS, Entry, effective_state, prune
from gateway.core.envelope import resolved
from gateway.core.errors import GatewayError
from gateway.core.holder import bucket_of, holder_for
from gateway.core.jobs import accepted_job, initial_state, uuid7
from gateway.core.kept_duplicates import kept_job
from gateway.core.matching import holds_key
from gateway.core.policy import OnConflict
from gateway.core.request import OJS, Request
from gateway.core.states import State
from gateway.core.times import parse_rfc3339
from gateway.core.updates import lock_restarted, move_waiting, update

# What a new job's id is minted from: the request's seed and what the id must satisfy.
Mint = tuple[bytes, Callable[[bytes], bool] | None]


def decide(
    entries: Iterable[Entry],
    request: Request | GatewayError,
    now_ms: int,
    retention_ms: int = DEFAULT_RETENTION_MS,
    *,
    seed: bytes,
    known: Mapping[str, Any] | None = None,
    at_home: Callable[[bytes], bool] | None = None,
    records: Mapping[str, Mapping[str, Any]] | None = None,
) -> Decision:
    """Decide one request. `seed` identifies the request (see jobs.uuid7).

    `known`: the job already holding the request's id, if any. `at_home`: what an id the
    decision mints must satisfy (see core/ids.py); None: anything. `records`: the job
    records of the key's entries by id, as stored (a debounce updates the record's
    fields; see `wants_records`); without one, what the entry knows of its job.
    """
    kept = prune(entries, now_ms, retention_ms)
    if isinstance(request, GatewayError):
        return Decision(Outcome.INVALID, now_ms, kept, error=request)
    delay_ms = request.envelope.scheduled_in  # a successor's counts from its release
    envelope = resolved(request.envelope, now_ms)  # relative times: instants from now on
    if envelope is not request.envelope:
        request = replace(request, envelope=envelope)
    bucket = bucket_of(request.holder_rule, now_ms, envelope.scheduled_at)
    if bucket is not None and request.policy is not None:  # River's by_period
        request = replace(request, policy=replace(request.policy, bucket_start=bucket))
    policy = request.policy
    debounce = None if policy is None else policy.debounce
    if debounce is not None and debounce.delay_ms is not None and envelope.scheduled_at is None:
        # A burst's first request runs a delay after it (OJS's debounce.delay).
        envelope = replace(envelope, scheduled_at=now_ms + debounce.delay_ms)
        request = replace(request, envelope=envelope)
    job_id = request.envelope.id
    taken = next((e for e in kept if e.job_id == job_id), None) if job_id else None
    if taken is not None:
        return id_taken(request, kept, now_ms, taken, holds_this_key=True)
    if known is not None:
        return id_taken(request, kept, now_ms, entry_of(known), holds_this_key=False)
    if policy is None:
        return _accept(request, kept, now_ms, (seed, at_home))

    matches = [e for e in kept if holds_key(e, policy, now_ms)]
    if policy.keep_last and (followed := successor.followed(kept, matches, now_ms)) is not None:
        kept_for = (followed, delay_ms)
        return _succeed(request, kept, now_ms, (seed, at_home), kept_for, retention_ms)
    if not matches:
        return _accept(request, kept, now_ms, (seed, at_home))
    existing = _pick(matches)
    if debounce is not None and effective_state(existing, now_ms) in debounce.states:
        record = None if records is None else records.get(existing.job_id)
        return move_waiting(request, kept, now_ms, existing, debounce, record)
    match policy.on_conflict:
        case OnConflict.REJECT:
            return refuse(Outcome.REJECTED, request, kept, now_ms, existing)
        case OnConflict.IGNORE:
            ignored = refuse(Outcome.IGNORED, request, kept, now_ms, existing)
            keep = request.keep_duplicate
            if keep is not None:
                job_id = _new_id(request, now_ms, seed, at_home)
                return replace(ignored, duplicate=kept_job(request, keep, job_id, existing, now_ms))
            if debounce is not None and debounce.restart_lock and not debounce.states:
                return lock_restarted(ignored, existing, now_ms)
            return ignored
        case OnConflict.UPDATE:
            return update(request, kept, now_ms, existing)
        case OnConflict.REPLACE | OnConflict.REPLACE_EXCEPT_SCHEDULE:
            return _replace(request, kept, now_ms, (seed, at_home), matches, existing, retention_ms)
        case _:
            assert_never(policy.on_conflict)


def _resubmitted(on_conflict: OnConflict) -> Outcome:
    """A resubmitted job id is never a second job; what the caller hears instead."""
    match on_conflict:
        case OnConflict.IGNORE | OnConflict.UPDATE:
            return Outcome.IGNORED
        case OnConflict.REJECT | OnConflict.REPLACE | OnConflict.REPLACE_EXCEPT_SCHEDULE:
            return Outcome.REJECTED
        case _:
            assert_never(on_conflict)


def _replace(
    request: Request,
    kept: tuple[Entry, ...],
    now_ms: int,
    mint: Mint,
    matches: list[Entry],
    existing: Entry,
    retention_ms: int,
) -> Decision:
    policy = request.policy
    to_cancel = [e for e in matches if not e.terminal]
    scheduled_at = request.envelope.scheduled_at
    if (
        policy is not None
        and policy.on_conflict is OnConflict.REPLACE_EXCEPT_SCHEDULE
        and effective_state(existing, now_ms) is State.SCHEDULED
    ):
        scheduled_at = existing.scheduled_at
    cancel_ids = {e.job_id for e in to_cancel}
    after = [e.moved_to(State.CANCELLED, now_ms) if e.job_id in cancel_ids else e for e in kept]
    accepted = _accept(request, after, now_ms, mint, scheduled_at)
    return replace(
        accepted,
        outcome=Outcome.REPLACED,
        entries=prune(accepted.entries, now_ms, retention_ms),
        existing=existing,
        existing_state=effective_state(existing, now_ms),
        cancelled=tuple(to_cancel),
    )


def _succeed(
    request: Request,
    kept: tuple[Entry, ...],
    now_ms: int,
    mint: Mint,
    kept_for: tuple[Entry, int | None],
    retention_ms: int,
) -> Decision:
    """The request kept as the successor of a job (`kept_for`: its entry, reported as the
    existing job, and the request's relative run time), replacing an older successor."""
    followed, delay_ms = kept_for
    previous = successor.pending(kept)
    after = [e.moved_to(State.CANCELLED, now_ms) if e is previous else e for e in kept]
    accepted = _accept(request, after, now_ms, mint)
    assert accepted.job is not None
    job, entry = successor.as_successor(
        accepted.job, accepted.entries[-1], followed.job_id, delay_ms
    )
    return replace(
        accepted,
        outcome=Outcome.ACCEPTED if previous is None else Outcome.REPLACED,
        job=job,
        entries=prune((*accepted.entries[:-1], entry), now_ms, retention_ms),
        existing=followed,
        existing_state=effective_state(followed, now_ms),
        cancelled=() if previous is None else (previous,),
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


def id_taken(
    request: Request, kept: tuple[Entry, ...], now_ms: int, taken: Entry, *, holds_this_key: bool
) -> Decision:
    """The request's id is already a job's: never a second job (see the rules above)."""
    policy = request.policy
    if policy is not None and holds_this_key and _resubmits_own_key(request, request.unique_key):
        return refuse(_resubmitted(policy.on_conflict), request, kept, now_ms, taken)
    refused = refuse(Outcome.REJECTED, request, kept, now_ms, taken)
    message = f"job id {taken.job_id} is already taken by a {refused.existing_state} job"
    return replace(refused, error=GatewayError(request.duplicate_code, message))


def _resubmits_own_key(request: Request, holder_key: str | None) -> bool:
    """Whether a request carrying the id of the job that holds `holder_key` is answered as
    its dialect answers a conflict (a dialect resubmitting its own key's job) rather than
    refused as a taken id (always, in OJS)."""
    return (
        request.dialect != OJS
        and request.policy is not None
        and holder_key is not None
        and holder_key == request.unique_key
    )


def _pick(matches: list[Entry]) -> Entry:
    # Newest live match first; among equals the later-stored one (max keeps the last).
    return max(reversed(matches), key=lambda e: (not e.terminal, e.created_at))


def _new_id(
    request: Request, now_ms: int, seed: bytes, at_home: Callable[[bytes], bool] | None
) -> str:
    return request.envelope.id or uuid7(now_ms, request.unique_key, seed, at_home)


def _accept(
    request: Request,
    kept: Iterable[Entry],
    now_ms: int,
    mint: Mint,
    scheduled_at: int | None = None,
) -> Decision:
    envelope, key = request.envelope, request.unique_key
    if scheduled_at is None:
        scheduled_at = envelope.scheduled_at
    job_id = _new_id(request, now_ms, *mint)
    limit = None if request.policy is None else request.policy.concurrency
    job = accepted_job(envelope, job_id, key, now_ms, scheduled_at, limit)
    stored = tuple(kept)
    rule = request.holder_rule
    holder = None if rule is None else holder_for(rule, now_ms, scheduled_at)
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
                holder=holder,
                job=job if request.stores_job else None,
            ),
        )
    return Decision(Outcome.ACCEPTED, now_ms, stored, key, request.policy, job=job, holder=holder)
