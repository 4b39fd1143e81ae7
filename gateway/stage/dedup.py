"""What the processor does with one record of `requests`: wiring between Kafka and the
core, one handler per kind of record.

A record is told once (kinds.py) and handed to the handler of its kind: requests
(requests.py), job events (events.py), queue and cron commands (commands.py), id reports
(ids.py), ticks (which carry only time). Before any of them, what the record's time made
due is done (due.py). No rule of uniqueness or of the job lifecycle lives here: this
module runs each record all or nothing (total.py), leaves its audit record (trail.py),
and keeps what every handler shares: a key's entries and job records, and the schedules.

Job records. Every accepted job is stored in its route's state (`job/<id>`) and written to
`job_states` with each change, in the same transaction as the decision or event that
changed it. A terminal job's record expires from the store by the state's event-time TTL,
`retention_ms` after it finished, and leaves `job_states` with a tombstone then.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any, Protocol

import orjson
from mypy_extensions import mypyc_attr

from gateway import wire
from gateway.core import (
    Entry,
    GatewayError,
    dump_entries,
    expires_at,
    job_deadline,
    load_entries,
)
from gateway.core.jobs import job_expires_at, job_route
from gateway.core.limits import headers_refusal
from gateway.processor.metrics import Metrics
from gateway.stage.commands import CRON, Commands
from gateway.stage.due import time_passed
from gateway.stage.events import Events
from gateway.stage.idempotency import Idempotency
from gateway.stage.ids import Ids
from gateway.stage.kinds import Kind, kind_of
from gateway.stage.parsing import Limits
from gateway.stage.records import Output, Source, job_state
from gateway.stage.requests import Requests
from gateway.stage.schedule import LEASES, TOMBSTONES, Known, Schedule
from gateway.stage.total import Guard
from gateway.stage.trail import CHAIN_KEY, JOB, UNKEYED, Sealer, seal

Emit = Callable[[Output, Source], None]
# The state of the record's key (its fingerprint) in the partition's store:
# get_bytes, set_bytes (with an optional event-time ttl) and delete.
KeyState = Any
# The state of any key in a record's partition, as of that record.
StateOf = Callable[[Source, bytes], KeyState]
ENTRIES = "entries"


class Handler(Protocol):
    """What handles one kind of record."""

    def handle(
        self, value: bytes | None, key: bytes | None, source: Source, state: KeyState
    ) -> bool:
        """Handle it; False: it was sent on to be decided elsewhere."""

    def refused(self, source: Source, error: GatewayError, key: bytes | None) -> list[Output]:
        """What it writes when it is refused unread, or its handling failed."""


class _Ticks:
    """A tick carries time alone: what it made due is done before it is handled."""

    def handle(self, *_: Any) -> bool:
        return True

    def refused(self, *_: Any) -> list[Output]:
        return []


# Compiled by `make compiled`; the replay's window subclasses it (audit/replay.py).
@mypyc_attr(allow_interpreted_subclasses=True)
class Dedup:
    """Decides requests and applies job events for the partitions this instance owns."""

    def __init__(
        self,
        partitions: int,
        emit: Emit,
        metrics: Metrics,
        limits: Limits,
        state_of: StateOf,
        epoch: Callable[[], object] | None = None,
        sealer: Sealer = UNKEYED,
    ) -> None:
        """`epoch`: an object that changes whenever the store may have changed other than
        through this instance (the stores' epoch: a rebalance, an abandoned transaction); None:
        it never does. `sealer`: how audit records are sealed (keyed: audit_keys.py)."""
        self.partitions = partitions
        self.sealer = sealer
        self._known = Known(epoch)
        # Every record is handled all or nothing, and never raises (see total.py).
        self._guard = Guard(emit, state_of, metrics)
        self.emit = self._guard.emit
        self.state_of = self._guard.state_of
        self.metrics = metrics
        self.limits = limits
        self.commands = Commands(self)
        self.ids = Ids(self)
        self.idempotency = Idempotency(self)
        self.events = Events(self)
        self._handlers: dict[Kind, Handler] = {
            Kind.REQUEST: Requests(self), Kind.EVENT: self.events, Kind.TICK: _Ticks(),
            Kind.COMMAND: self.commands, Kind.ID_REPORT: self.ids,
        }  # fmt: skip
        # For the record's audit record: what it did when it is no decision (an event's
        # result), what its time made due (schedule key, route, item), and the state of each
        # job record it wrote (None: deleted).
        self.what: dict[str, Any] | None = None
        self.taken: list[tuple[bytes, str, str]] = []
        self._jobs_after: dict[str, str | None] = {}

    def on_record(
        self, value: bytes | None, key: bytes | None, source: Source, state: KeyState
    ) -> None:
        """One record of the partition's log, handled by the handler of its kind. A request
        whose id its home claimed for this route is reported back there once decided,
        whatever became of it, failures included (see core/ids.py)."""
        staged = self._guard.stage(key, state)
        kind = kind_of(source, value)
        handler = self._handlers[kind]
        claimed = (
            kind is Kind.REQUEST and source.headers.get(wire.ID_CLAIM_HEADER) == wire.ID_CLAIMED
        )
        self.what, self.taken, self._jobs_after = None, [], {}

        def handle() -> None:
            time_passed(self, source)
            refusal = None if kind is Kind.TICK else headers_refusal(source.headers)
            if refusal is not None:  # refused before it is read
                for output in handler.refused(source, refusal, key):
                    self.emit(output, source)
                self.metrics.refused_inputs.labels("dedup", refusal.code).inc()
            elif handler.handle(value, key, source, staged) and claimed:
                self.emit(self.ids.decided(source, key), source)
            self._seal(self._guard.outputs, source, key, kind)

        def answer(source: Source, error: GatewayError) -> list[Output]:
            # What the failed handling did is gone, and so is what its audit record would say.
            self.what, self.taken, self._jobs_after = None, [], {}
            outputs = handler.refused(source, error, key)
            if claimed:
                outputs.append(self.ids.decided(source, key))
            self._seal(outputs, source, key, kind)
            return outputs

        self._known.settle(self._guard.run("dedup", source, value, key, handle, answer))

    def _seal(self, outputs: list[Output], source: Source, key: bytes | None, kind: Kind) -> None:
        """The record's audit record, with the state it was decided from (trail.py)."""
        head = self.state_of(source, CHAIN_KEY)
        seal(outputs, self._guard.staged, head, source, key, kind, self.what, self.taken,
             self._jobs_after, self.sealer)  # fmt: skip

    # -- a key's entries ------------------------------------------------------

    @staticmethod
    def load_entries(state: KeyState) -> tuple[Entry, ...]:
        return load_entries(state.get_bytes(ENTRIES))

    def store_entries(
        self, state: KeyState, before: tuple[Entry, ...], after: tuple[Entry, ...], now_ms: int
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
    def load_job(state: KeyState, job_id: str) -> dict[str, Any] | None:
        raw = state.get_bytes(JOB + job_id)
        return None if raw is None else orjson.loads(raw)  # type: ignore[no-any-return]

    def put_job(
        self, state: KeyState, job: dict[str, Any], source: Source, encoded: bytes | None = None
    ) -> None:
        """Store and publish a job (`encoded`: its JSON, when known); a terminal one expires
        the retention after it ended, and its tombstone is scheduled for then; an active
        one's attempt is looked at again when its lease or timeout ends."""
        due = job_expires_at(job, self.limits.retention_ms)
        ttl = None if due is None else timedelta(milliseconds=max(due - source.timestamp_ms, 1))
        # One encoding for both: the stored record is the one published.
        published = job_state(job, encoded)
        job_id = str(job["id"])
        state.set_bytes(JOB + job_id, published.value, ttl=ttl)
        self._jobs_after[job_id] = job.get("state")
        self.emit(published, source)
        self._schedule_job(job, source, self.state_of)

    def drop_job(self, state: KeyState, job_id: str) -> None:
        """A job record leaves its route's state now (its tombstone is the caller's)."""
        state.delete(JOB + job_id)
        self._jobs_after[job_id] = None

    def _schedule_job(self, job: dict[str, Any], source: Source, state_of: StateOf) -> None:
        due = job_expires_at(job, self.limits.retention_ms)
        if due is not None:
            self.schedule(TOMBSTONES, source, job_route(job), job["id"], due, state_of)
        deadline = job_deadline(job)
        if deadline is not None:
            self.schedule(LEASES, source, job_route(job), job["id"], deadline, state_of)

    def seeded(self, source: Source, state_of: StateOf, name: str, value: bytes) -> None:
        """A value a replay took from an audit record, which read it: on the schedules (in
        `state_of`) as the processor put it there when it wrote it, so that what falls due
        falls due at the same record. What is due is a function of the value alone."""
        if name.startswith(JOB):
            self._schedule_job(orjson.loads(value), source, state_of)
        elif name == CRON:
            self.commands.schedule_cron(source, orjson.loads(value), state_of)

    def schedule(
        self, schedule: Schedule, source: Source, route: str, item: str, due_ms: int,
        state_of: StateOf | None = None,
    ) -> None:  # fmt: skip
        """Look at `item` (kept under `route`) once the partition's time passes `due_ms`."""
        state = (state_of or self.state_of)(source, schedule.key)
        schedule.add(state, route, item, due_ms, source.timestamp_ms)
        self._known.forget(schedule, source.partition)

    def take_due(self, schedule: Schedule, source: Source) -> list[tuple[str, str]]:
        """What `schedule` holds that the record's time made due; kept for its audit record."""
        if self._known.nothing_due(schedule, source.partition, source.timestamp_ms):
            return []
        taken, next_bucket = schedule.sweep(
            self.state_of(source, schedule.key), source.timestamp_ms
        )  # fmt: skip
        self._known.saw(schedule, source.partition, next_bucket)
        self.taken.extend((schedule.key, route, item) for route, item in taken)
        return taken
