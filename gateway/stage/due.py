"""What event time made due, done before any record of the partition is handled (a tick
carries nothing else): the one entry through which time acts (schedule.py keeps what
falls due when).

- LEASES: an active job past its lease or timeout fails as a nack would fail it, a
  waiting one past its expires_at is discarded (`core.expire_job`), a rescheduled
  duplicate come due is decided again (`core.kept_duplicates.redecide`);
- TOMBSTONES: a finished job past its retention leaves `job_states`, and its id's claim
  learns so;
- CRONS: a cron whose slot came fires (commands.py).
"""

from __future__ import annotations

import logging
from typing import Any

from gateway.core import expire_job, job_deadline
from gateway.core.jobs import job_expires_at
from gateway.core.kept_duplicates import redecide, reschedule_due
from gateway.stage.commands import Commands
from gateway.stage.context import Staged
from gateway.stage.events import Events
from gateway.stage.ids import Ids
from gateway.stage.records import Source, job_state_tombstone, released_output
from gateway.stage.schedule import LEASES, TOMBSTONES
from gateway.stage.shared import Shared

log = logging.getLogger("gateway.processor")


class Due:
    def __init__(self, shared: Shared, events: Events, ids: Ids, commands: Commands) -> None:
        self._shared = shared
        self._events = events
        self._ids = ids
        self._commands = commands

    def passed(self, source: Source) -> None:
        """Everything the record's time made due, in the order the processor has always done
        it."""
        self._expire_attempts(source)
        self._tombstone_expired(source)
        self._commands.fire_due(source)

    def _expire_attempts(self, source: Source) -> None:
        shared = self._shared
        for route, job_id in shared.take_due(LEASES, source):
            state = shared.state_of(source, route.encode())
            job = shared.load_job(state, job_id)
            # A heartbeat, an ack or a new attempt since made the entry stale: the job is
            # judged as it is now, and only once its own deadline's bucket has ended (so its
            # expiry time is a function of the job alone: see audit/jobs.py).
            deadline = None if job is None else job_deadline(job)
            if job is None or deadline is None or LEASES.seen_at(deadline) > source.timestamp_ms:
                continue
            if job is not None and reschedule_due(job) is not None:
                self._redecide(job, route, state, source)
                continue
            result = expire_job(job, source.timestamp_ms)
            if result is not None and result.job is not None:
                self._events.follow(result.job, result, state, source)
                log.info(
                    "job expired",
                    extra={"job_id": job_id, "state": str(result.state),
                           "error": result.job.get("error"), "source": source.as_dict()},
                )  # fmt: skip

    def _redecide(self, job: dict[str, Any], route: str, state: Staged, source: Source) -> None:
        """A rescheduled duplicate come due: it takes its key and is enqueued on `jobs`, or
        waits again (its record, stored, is looked at again when next due)."""
        shared = self._shared
        entries = shared.load_entries(state)
        now = redecide(job, entries, source.timestamp_ms, shared.limits.retention_ms)
        shared.store_entries(state, entries, now.entries, source.timestamp_ms)
        shared.put_job(state, now.job, source)
        if now.took:
            shared.emit(released_output(now.job, route), source)

    def _tombstone_expired(self, source: Source) -> None:
        shared = self._shared
        for route, job_id in shared.take_due(TOMBSTONES, source):
            state = shared.state_of(source, route.encode())
            job = shared.load_job(state, job_id)
            if job is not None:
                due = job_expires_at(job, shared.limits.retention_ms)
                if due is None or due > source.timestamp_ms:
                    continue  # taken again by a new job, or revived: a later entry has it
                # Expired, though the store's TTL has not hidden it yet: it goes now, so the
                # record and its tombstone never disagree.
                shared.drop_job(state, job_id)
            elif self._ids.claimed(state, job_id, route):
                # Gone from its home early (a deleted dead letter), and its id taken since by a
                # keyed job of another route: the id's `job_states` record is that job's now.
                continue
            shared.emit(job_state_tombstone(job_id), source)
            self._ids.left(source, job_id, route)
