"""The handler of job events (the router forwards them onto `requests`, marked so): applied
by `core.on_key`, the key's entries following the job's new state. `follow` is also how a
job that time moved (an expired lease, expires_at) is stored (due.py).

A terminal job's record expires from the store by the state's event-time TTL,
`retention_ms` after it finished, and leaves `job_states` with a tombstone then (due.py);
a deleted one (job.deleted) at once.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from gateway.core import Entry, EventOutcome, EventResult, GatewayError, JobEvent, State, successor
from gateway.core.jobs import job_route
from gateway.core.lifecycle import follow, on_key
from gateway.stage.parsing import parse_event_record
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

if TYPE_CHECKING:
    from gateway.stage.dedup import Dedup, KeyState

log = logging.getLogger("gateway.processor")
Moved = tuple[tuple[Entry, ...], tuple[Entry, ...]]  # a key's entries before and after


class Events:
    def __init__(self, dedup: Dedup) -> None:
        self.dedup = dedup

    def refused(self, source: Source, error: GatewayError, _key: bytes | None) -> list[Output]:
        """What an event refused before it was applied writes: its reply, if it asked."""
        return refused_event(source, error)

    def handle(
        self, value: bytes | None, key: bytes | None, source: Source, state: KeyState
    ) -> bool:
        dedup = self.dedup
        event = parse_event_record(value, key)
        job_id = None if isinstance(event, GatewayError) else event.job_id
        job = dedup.load_job(state, job_id) if job_id else None
        keyed = job is not None and isinstance(job.get("unique_key"), str)
        entries = dedup.load_entries(state) if keyed else ()
        paused = job is not None and dedup.commands.paused(source, job.get("queue"))
        result, after = on_key(
            job, entries, event, source.timestamp_ms, dedup.limits.retention_ms, paused
        )  # fmt: skip
        released = None
        if result.outcome is EventOutcome.APPLIED and result.job is not None:
            moved = (entries, after) if keyed else None
            released = self.follow(result.job, result, state, source, moved)
        # The job as the event left it: explain tells the next attempt and the error by it.
        dedup.what = {"job_id": result.job_id, **event_summary(result), "job": result.job}
        if released is not None:
            dedup.what["released"] = released  # the key's successor, now enqueued
        reply = event_reply(result, route_of(job, event), source)
        if reply is not None:
            dedup.emit(reply, source)
        reason = result.reason or (result.error.code if result.error else "")
        dedup.metrics.event(str(result.outcome), str(reason))
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

    def follow(
        self,
        job: dict[str, Any],
        result: EventResult,
        state: KeyState,
        source: Source,
        entries: Moved | None = None,
    ) -> str | None:
        """Store the moved job (a deleted one goes, with its tombstone at once); its key's
        entries follow (`entries`; None: the core moved the job alone, an expiry), and the
        key's successor is released if the job was the last it waited for; a cancel tells
        the worker. Returns the released successor's id."""
        dedup = self.dedup
        if result.deleted:
            # A keyed job's id stays claimed until its scheduled tombstone (it was terminal, so
            # one is scheduled): released now, the id could go to a job under another route
            # that the scheduled tombstone would then wipe from job_states. A plain job's id is
            # free at once; its scheduled tombstone spares a keyed job that claims it since.
            dedup.drop_job(state, str(job["id"]))
            dedup.emit(job_state_tombstone(str(job["id"])), source)
        else:
            dedup.put_job(state, job, source)
        unique_key, released = job.get("unique_key"), None
        if isinstance(unique_key, str):
            if entries is None:
                before = dedup.load_entries(state)
                entries = before, follow(
                    before, job, result, source.timestamp_ms, dedup.limits.retention_ms
                )  # fmt: skip
            after, released = successor.release(entries[1], source.timestamp_ms)
            dedup.store_entries(state, entries[0], after, source.timestamp_ms)
            if released is not None:
                self._release(released, unique_key, state, source)
        if result.state is State.CANCELLED:
            dedup.emit(cancellation(job, str(result.previous_state), unique_key), source)
        return None if released is None else released.job_id

    def _release(self, entry: Entry, unique_key: str, state: KeyState, source: Source) -> None:
        """The key's successor, released as its job finished: stored, and published on
        `jobs` as a new job is, now that a worker may take it."""
        dedup = self.dedup
        record = dedup.load_job(state, entry.job_id)
        if record is None:  # never: a successor's record lives as long as its entry
            return
        job = successor.released_job(record, entry, source.timestamp_ms)
        dedup.put_job(state, job, source)
        dedup.emit(released_output(job, unique_key), source)


def route_of(job: dict[str, Any] | None, event: JobEvent | GatewayError) -> str | None:
    if job is not None:
        return job_route(job)
    return None if isinstance(event, GatewayError) else event.route
