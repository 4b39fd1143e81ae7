"""The handler of job events (the router forwards them onto `requests`, marked so): applied
by `core.on_key`, the key's entries following the job's new state. `follow` is also how a
job that time moved (an expired lease, expires_at) is stored (due.py).

A claim of a rate-limited job applies only with its rate key's permit (core/rates.py): one
without is sent to the key's home (rates.py), which sends it back with one or answers it;
a permit the claim did not use goes back to the home at once. A claim the home refused of a
job whose `on_limit` moves it comes back marked so: the job is rescheduled or dropped here
(core/rate_moves.py), and the claim answered `rate_limited`.

A terminal job's record expires from the store by the state's event-time TTL,
`retention_ms` after it finished, and leaves `job_states` with a tombstone then (due.py);
a deleted one (job.deleted) at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from gateway.core import Entry, EventOutcome, EventResult, GatewayError, JobEvent, State, successor
from gateway.core.jobs import job_route
from gateway.core.lifecycle import follow, on_key
from gateway.core.queue_rates import needed as needed_keys
from gateway.core.rate_moves import on_limit_move
from gateway.core.rate_policy import JOB_FIELD, RateLimit, job_policy
from gateway.core.rates import PERMIT_FIELD, Permit, waits
from gateway.stage.context import Staged
from gateway.stage.parsing import parse_event_record
from gateway.stage.rates import is_claim, limited_of, permits_of, to_home
from gateway.stage.records import (
    Output,
    Source,
    cancellation,
    event_reply,
    event_summary,
    job_state_tombstone,
    refused_event,
    released_output,
)
from gateway.stage.reports import rate_report
from gateway.stage.shared import Shared

log = logging.getLogger("gateway.processor")
Moved = tuple[tuple[Entry, ...], tuple[Entry, ...]]  # a key's entries before and after


class Events:
    def __init__(
        self, shared: Shared, paused: Callable[[Source, object], bool],
        queue_limits: Callable[[Source, object], RateLimit | None],
    ) -> None:  # fmt: skip
        """`paused`: whether a queue is paused on the record's partition; `queue_limits`: its
        rate limit there (commands.py)."""
        self._shared = shared
        self._paused = paused
        self._queue_limits = queue_limits

    def refused(self, source: Source, error: GatewayError, _key: bytes | None) -> list[Output]:
        """What an event refused before it was applied writes: its reply, if it asked."""
        return refused_event(source, error)

    def handle(self, value: bytes | None, key: bytes | None, source: Source, state: Staged) -> bool:
        shared = self._shared
        event = parse_event_record(value, key)
        job_id = None if isinstance(event, GatewayError) else event.job_id
        job = shared.load_job(state, job_id) if job_id else None
        permits = permits_of(source.headers)
        claim = not isinstance(event, GatewayError) and is_claim(event)
        limited = limited_of(source.headers) if claim else None
        if limited is not None:
            self._limited(job, event, limited, permits, state, source)  # type: ignore[arg-type]
            return True
        needed = None
        if job is not None and waits(job, claim):
            own = job_policy(job)
            needed = needed_keys(own, self._queue_limits(source, job.get("queue")))
            keys = {p.key for p in needed}
            for extra in (p for p in permits if p.key not in keys):  # a limit cleared since
                shared.emit(rate_report(extra.key, extra.id, unused=True), source)
            permits = tuple(p for p in permits if p.key in keys)
            held = {p.key for p in permits}
            missing = next((p for p in needed if p.key not in held), None)
            if missing is not None:
                # Only a rate key's home grants a start: the claim goes there first.
                raw = job[JOB_FIELD] if missing is own else missing.to_dict()
                shared.emit(to_home(value, raw, missing.key, source, permits), source)
                shared.what = {"job_id": job_id, "rate": {"key": missing.key, "sent_home": True}}
                return True
        keyed = job is not None and isinstance(job.get("unique_key"), str)
        entries = shared.load_entries(state) if keyed else ()
        paused = job is not None and self._paused(source, job.get("queue"))
        result, after = on_key(
            job, entries, event, source.timestamp_ms, shared.limits.retention_ms, paused,
            permits, needed,
        )  # fmt: skip
        if permits and not _used(result, permits[0]):
            for permit in permits:
                shared.emit(rate_report(permit.key, permit.id, unused=True), source)
        released = None
        if result.outcome is EventOutcome.APPLIED and result.job is not None:
            moved = (entries, after) if keyed else None
            released = self.follow(result.job, result, state, source, moved)
        # The job as the event left it: explain tells the next attempt and the error by it.
        shared.what = {"job_id": result.job_id, **event_summary(result), "job": result.job}
        if released is not None:
            shared.what["released"] = released  # the key's successor, now enqueued
        reply = event_reply(result, route_of(job, event), source)
        if reply is not None:
            shared.emit(reply, source)
        reason = result.reason or (result.error.code if result.error else "")
        shared.metrics.event(str(result.outcome), str(reason))
        if result.outcome is not EventOutcome.APPLIED:
            log.info(
                "job event not applied",
                extra={
                    "result": str(result.outcome),
                    "reason": str(reason),
                    "error": result.error.message if result.error else None,
                    "source": source.as_dict(),
                },
            )
        return True

    def _limited(
        self, job: dict[str, Any] | None, event: JobEvent,
        limited: tuple[str, int | None, str, GatewayError], permits: tuple[Permit, ...],
        state: Staged, source: Source,
    ) -> None:  # fmt: skip
        """A claim its rate key's home refused: its job moved as its on_limit says (if it still
        waits), the claim answered `rate_limited`, and the permits of other keys it held given
        back unused."""
        shared = self._shared
        for permit in permits:
            shared.emit(rate_report(permit.key, permit.id, unused=True), source)
        on_limit, retry_at, key, error = limited
        moved = None if job is None else on_limit_move(job, on_limit, retry_at, key,
                                                       source.timestamp_ms)  # fmt: skip
        told: dict[str, Any] = {"key": key, "on_limit": on_limit, "outcome": "refused"}
        if moved is not None and moved.outcome is EventOutcome.APPLIED and moved.job is not None:
            self.follow(moved.job, moved, state, source)
            told["moved_to"] = str(moved.state)
            error = GatewayError(error.code, f"{error.message}; the job is {moved.state} by "
                                 f"its on_limit {on_limit}")  # fmt: skip
        shared.what = {"job_id": event.job_id, "rate": told,
                       "job": None if moved is None else moved.job}  # fmt: skip
        result = EventResult(EventOutcome.REFUSED, event.job_id, error=error)
        reply = event_reply(result, route_of(job, event), source)
        if reply is not None:
            shared.emit(reply, source)
        shared.metrics.event(str(EventOutcome.REFUSED), error.code)

    def follow(
        self,
        job: dict[str, Any],
        result: EventResult,
        state: Staged,
        source: Source,
        entries: Moved | None = None,
    ) -> str | None:
        """Store the moved job (a deleted one goes, with its tombstone at once); its key's
        entries follow (`entries`; None: the core moved the job alone, an expiry), and the
        key's successor is released if the job was the last it waited for; a cancel tells
        the worker. Returns the released successor's id."""
        shared = self._shared
        if result.deleted:
            # A keyed job's id stays claimed until its scheduled tombstone (it was terminal, so
            # one is scheduled): released now, the id could go to a job under another route
            # that the scheduled tombstone would then wipe from job_states. A plain job's id is
            # free at once; its scheduled tombstone spares a keyed job that claims it since.
            shared.drop_job(state, str(job["id"]))
            shared.emit(job_state_tombstone(str(job["id"])), source)
        else:
            shared.put_job(state, job, source)
        unique_key, released = job.get("unique_key"), None
        if isinstance(unique_key, str):
            if entries is None:
                before = shared.load_entries(state)
                entries = before, follow(
                    before, job, result, source.timestamp_ms, shared.limits.retention_ms
                )  # fmt: skip
            after, released = successor.release(entries[1], source.timestamp_ms)
            shared.store_entries(state, entries[0], after, source.timestamp_ms)
            if released is not None:
                self._release(released, unique_key, state, source)
        if result.state is State.CANCELLED:
            shared.emit(cancellation(job, str(result.previous_state), unique_key), source)
        return None if released is None else released.job_id

    def _release(self, entry: Entry, unique_key: str, state: Staged, source: Source) -> None:
        """The key's successor, released as its job finished: stored, and published on
        `jobs` as a new job is, now that a worker may take it."""
        shared = self._shared
        record = shared.load_job(state, entry.job_id)
        if record is None:  # never: a successor's record lives as long as its entry
            return
        job = successor.released_job(record, entry, source.timestamp_ms)
        shared.put_job(state, job, source)
        shared.emit(released_output(job, unique_key), source)


def _used(result: EventResult, permit: Permit) -> bool:
    """Whether the claim started the job with its permit (else the permit goes back)."""
    held = None if result.job is None else result.job.get(PERMIT_FIELD)
    return (
        result.outcome is EventOutcome.APPLIED
        and isinstance(held, dict)
        and held.get("id") == permit.id
    )


def route_of(job: dict[str, Any] | None, event: JobEvent | GatewayError) -> str | None:
    if job is not None:
        return job_route(job)
    return None if isinstance(event, GatewayError) else event.route
