"""What the dedup stage's handlers share for the record being handled: its emit and the
state of any key of its partition (both through the guard, total.py), a key's entries, job
records, the schedules, and what the record's audit record says beyond its outputs.

Job records. Every accepted job is stored in its route's state (`job/<id>`) and written to
`job_states` with each change, in the same transaction as the decision or event that
changed it. A terminal job's record expires from the store by the state's event-time TTL,
`retention_ms` after it finished, and leaves `job_states` with a tombstone then.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import orjson

from gateway.core import (
    Entry,
    GatewayError,
    dump_entries,
    expires_at,
    job_deadline,
    load_entries,
)
from gateway.core.jobs import job_expires_at, job_route
from gateway.core.rates import MORE_FIELD, PERMIT_FIELD, held_permits
from gateway.core.tenant_limits import SLOT_FIELD, holds_place
from gateway.stage.context import Emit, Staged, StageMetrics, StateOf
from gateway.stage.parsing import Limits
from gateway.stage.records import Source, command_reply, job_state, refused_command
from gateway.stage.reports import rate_report, tenant_report
from gateway.stage.schedule import LEASES, TOMBSTONES, Known, Schedule
from gateway.stage.trail import JOB

ENTRIES = "entries"
Due = list[tuple[str, str]]  # (route, item) of what a schedule made due
# What a replay's window makes of what a record's time made due (see audit/replay.py).
Window = Callable[[Schedule, Due], Due]


class Shared:
    """The dedup stage's partitions, limits and metrics, and the record being handled."""

    def __init__(
        self,
        partitions: int,
        limits: Limits,
        metrics: StageMetrics,
        emit: Emit,
        state_of: Callable[[Source, bytes], Staged],
        epoch: Callable[[], object] | None,
        window: Window | None,
    ) -> None:
        self.partitions = partitions
        self.limits = limits
        self.metrics = metrics
        self.emit = emit
        self.state_of = state_of
        self._known = Known(epoch)
        self._window = window
        # For the record's audit record: what it did when it is no decision (an event's
        # result), what its time made due (schedule key, route, item), and the state of each
        # job record it wrote (None: deleted).
        self.what: dict[str, Any] | None = None
        self.taken: list[tuple[bytes, str, str]] = []
        self.jobs_after: dict[str, str | None] = {}

    def refuse_command(self, source: Source, error: GatewayError, key: bytes | None) -> None:
        """A command refused (queue, cron, rate, tenant): answered, and counted."""
        for output in refused_command(source, error, key):
            self.emit(output, source)
        self.metrics.refused_inputs.labels("dedup", error.code).inc()

    def answer_command(self, source: Source, key: bytes | None, record: dict[str, Any]) -> None:
        """A command applied: `record` to its sender, if it asked."""
        reply = command_reply(source, key, record)
        if reply is not None:
            self.emit(reply, source)

    def begin(self) -> None:
        """Before a record's handling, and again when it failed: nothing to say yet."""
        self.what, self.taken, self.jobs_after = None, [], {}

    def settle(self, succeeded: bool) -> None:
        """After a record's handling: what it saw of the schedules is kept if it succeeded."""
        self._known.settle(succeeded)

    # -- a key's entries ------------------------------------------------------

    @staticmethod
    def load_entries(state: Staged) -> tuple[Entry, ...]:
        return load_entries(state.get_bytes(ENTRIES))

    def store_entries(
        self, state: Staged, before: tuple[Entry, ...], after: tuple[Entry, ...], now_ms: int
    ) -> None:
        """Write the key's entries. The store deletes them when the core says they expire,
        whether or not the key is touched again; an empty key is deleted now. Either way
        the changelog gets a tombstone."""
        if after == before:
            return
        due = expires_at(after, self.limits.retention_ms)
        if not after or (due is not None and due <= now_ms):
            state.delete(ENTRIES)
            return
        ttl = None if due is None else timedelta(milliseconds=due - now_ms)
        state.set_bytes(ENTRIES, dump_entries(after), ttl=ttl)

    # -- job records --------------------------------------------------------

    @staticmethod
    def load_job(state: Staged, job_id: str) -> dict[str, Any] | None:
        raw = state.get_bytes(JOB + job_id)
        return None if raw is None else orjson.loads(raw)  # type: ignore[no-any-return]

    def put_job(
        self, state: Staged, job: dict[str, Any], source: Source, encoded: bytes | None = None
    ) -> None:
        """Store and publish a job (`encoded`: its JSON, when known); a terminal one expires
        the retention after it ended, and its tombstone is scheduled for then; an active
        one's attempt is looked at again when its lease or timeout ends. A job that left
        active gives its rate permit back to its key's home (core/rates.py), and one that
        started or ended its place back to its tenant's (core/tenant_limits.py)."""
        for held in held_permits(job):
            job.pop(PERMIT_FIELD, None)
            job.pop(MORE_FIELD, None)
            encoded = None
            self.emit(rate_report(*held, unused=False), source)
        slot = job.get(SLOT_FIELD)
        if isinstance(slot, dict) and not holds_place(job):
            del job[SLOT_FIELD]
            encoded = None
            self.emit(tenant_report(str(slot.get("tenant")), slot.get("scheduled") is True),
                      source)  # fmt: skip
        due = job_expires_at(job, self.limits.retention_ms)
        ttl = None if due is None else timedelta(milliseconds=max(due - source.timestamp_ms, 1))
        # One encoding for both: the stored record is the one published.
        published = job_state(job, encoded)
        job_id = str(job["id"])
        state.set_bytes(JOB + job_id, published.value, ttl=ttl)  # type: ignore[arg-type]
        self.jobs_after[job_id] = job.get("state")
        self.emit(published, source)
        self.schedule_job(job, source)

    def drop_job(self, state: Staged, job_id: str) -> None:
        """A job record leaves its route's state now (its tombstone is the caller's)."""
        state.delete(JOB + job_id)
        self.jobs_after[job_id] = None

    def schedule_job(
        self, job: dict[str, Any], source: Source, state_of: StateOf | None = None
    ) -> None:
        """The job's tombstone and its attempt's end on their schedules (in `state_of`'s,
        else the record's)."""
        due = job_expires_at(job, self.limits.retention_ms)
        if due is not None:
            self.schedule(TOMBSTONES, source, job_route(job), job["id"], due, state_of)
        deadline = job_deadline(job)
        if deadline is not None:
            self.schedule(LEASES, source, job_route(job), job["id"], deadline, state_of)

    # -- the schedules --------------------------------------------------------

    def schedule(
        self, schedule: Schedule, source: Source, route: str, item: str, due_ms: int,
        state_of: StateOf | None = None,
    ) -> None:  # fmt: skip
        """Look at `item` (kept under `route`) once the partition's time passes `due_ms`."""
        if state_of is None:
            schedule.add(self.state_of(source, schedule.key), route, item, due_ms,
                         source.timestamp_ms)  # fmt: skip
        else:
            schedule.add(state_of(source, schedule.key), route, item, due_ms, source.timestamp_ms)
        self._known.forget(schedule, source.partition)

    def take_due(self, schedule: Schedule, source: Source) -> Due:
        """What `schedule` holds that the record's time made due; kept for its audit record."""
        taken: Due = []
        if not self._known.nothing_due(schedule, source.partition, source.timestamp_ms):
            taken, next_bucket = schedule.sweep(
                self.state_of(source, schedule.key), source.timestamp_ms
            )  # fmt: skip
            self._known.saw(schedule, source.partition, next_bucket)
        if self._window is not None:
            taken = self._window(schedule, taken)
        self.taken.extend((schedule.key, route, item) for route, item in taken)
        return taken
