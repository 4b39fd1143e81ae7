"""What the processor does with one input record: wiring between Kafka and the core.

No rule of uniqueness or of the job lifecycle lives here: requests go to
`core.decide`, job events to `core.apply_job_event` (the key's entries follow
the job's new state), and the results become records (see records.py). Before
any record is handled, what its time made due is done (see schedule.py): active
jobs past their lease or timeout and waiting ones past their expires_at go
through `core.expire_job`, finished jobs past their retention get their
tombstones, due crons fire (commands.py, which also takes queue and cron
commands). A tick record does only that. This module loads and stores a key's
entries and job records, checks that a record sits on the partition its route
belongs to, and hands records to `emit`.

Routing. A job lives under its route (`wire.route`): its unique_key, else
its id. The SDK and the router give a job without a policy an id before it
reaches `requests` and key it by that id, so its requests and events meet in
one key's state like a fingerprint's; a request with neither that arrives on
`requests` anyway is sent back through `intake` to get one.

Job records. Every accepted job is stored in its route's state (`job/<id>`)
and written to `job_states` with each change, in the same transaction as the
decision or event that changed it. A terminal job's record expires from the
store by the state's event-time TTL, `retention_ms` after it finished, and
leaves `job_states` with a tombstone then; a deleted one (job.deleted) at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

import orjson

from gateway import wire
from gateway.core import (
    Decision,
    Entry,
    EventOutcome,
    EventResult,
    GatewayError,
    JobEvent,
    Outcome,
    Request,
    State,
    decide,
    dump_entries,
    expire_job,
    expires_at,
    job_deadline,
    load_entries,
    stored_job,
)
from gateway.core.engine import updated_record
from gateway.core.jobs import job_expires_at, job_route
from gateway.core.lifecycle import cancelled_by_replace, follow, on_key
from gateway.core.limits import headers_refusal
from gateway.partitioner import partition_for
from gateway.processor.commands import CRON, Commands
from gateway.processor.ids import Ids
from gateway.processor.metrics import Metrics
from gateway.processor.parsing import Limits, dialect_of, parse_event_record, parse_limited
from gateway.processor.records import (
    Output,
    Source,
    cancellation,
    decision_outputs,
    event_reply,
    event_summary,
    is_command,
    is_id_report,
    is_tick,
    job_state,
    job_state_tombstone,
    refused_command,
    refused_event,
    refused_request,
    request_id,
    stored_json,
)
from gateway.processor.schedule import LEASES, TOMBSTONES, Known, Schedule
from gateway.processor.total import Guard
from gateway.processor.trail import CHAIN_KEY, seal

log = logging.getLogger("gateway.processor")

Emit = Callable[[Output, Source], None]
# The state of the record's key (its fingerprint) in the partition's store:
# get_bytes, set_bytes (with an optional event-time ttl) and delete.
KeyState = Any
# The state of any key in a record's partition, as of that record.
StateOf = Callable[[Source, bytes], KeyState]
ENTRIES = "entries"
JOB = "job/"  # + job id: a job record in its route's state


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
    ) -> None:
        """`epoch`: an object that changes whenever the store may have changed other than
        through this instance (the stores' epoch: a rebalance, an abandoned transaction); None:
        it never does."""
        self.partitions = partitions
        self._known = Known(epoch)
        # Every record is handled all or nothing, and never raises (see total.py).
        self._guard = Guard(emit, state_of, metrics)
        self.emit = self._guard.emit
        self.state_of = self._guard.state_of
        self.metrics = metrics
        self.limits = limits
        self.commands = Commands(self)
        self.ids = Ids(self)
        # What the record did, for its audit record when it is no decision (an event's result),
        # and what its time made due (schedule key, route, item), for its audit record.
        self._what: dict[str, Any] | None = None
        self.taken: list[tuple[bytes, str, str]] = []
        self._jobs_after: dict[str, str | None] = {}  # the state of each job record written

    def on_record(
        self, value: bytes | None, key: bytes | None, source: Source, state: KeyState
    ) -> None:
        """One record of the partition's log: a request, or a job event the router forwarded.
        A request whose id its home claimed for this route is reported back there once
        decided, whatever became of it, failures included (see core/ids.py)."""
        staged = self._guard.stage(key, state)
        claimed = (
            not source.is_job_event
            and not is_tick(source, value)
            and not is_command(source)
            and source.headers.get(wire.ID_CLAIM_HEADER) == wire.ID_CLAIMED
        )

        self._what = None
        self.taken = []
        self._jobs_after = {}

        def handle() -> None:
            if self._on_record(value, key, source, staged) and claimed:
                self.emit(self.ids.decided(source, key), source)
            self._seal(self._guard.outputs, source, key, value)

        def answer(source: Source, error: GatewayError) -> list[Output]:
            if source.is_job_event:
                outputs = refused_event(source, error)
            elif is_command(source):
                outputs = refused_command(source, error, key)
            elif is_id_report(source):
                outputs = []  # the gateway's own record: kept as a dead letter, not answered
            else:
                report = [self.ids.decided(source, key)] if claimed else []
                outputs = [*refused_request(source, error), *report]
            self._seal(outputs, source, key, value)
            return outputs

        self._known.settle(self._guard.run("dedup", source, value, key, handle, answer))

    def _seal(
        self, outputs: list[Output], source: Source, key: bytes | None, value: bytes | None
    ) -> None:
        """The record's audit record, with the state it was decided from (trail.py)."""
        head = self.state_of(source, CHAIN_KEY)
        seal(outputs, self._guard.staged, head, source, key, value, self._what, self.taken,
             self._jobs_after)  # fmt: skip

    def _on_record(
        self, value: bytes | None, key: bytes | None, source: Source, state: KeyState
    ) -> bool:
        """First, what the record's time made due; a tick carries nothing else.
        False when the record was sent on to be decided elsewhere."""
        self._expire_attempts(source)
        self._tombstone_expired(source)
        self.commands.fire_due(source)
        if is_tick(source, value):
            return True
        refusal = headers_refusal(source.headers)
        if refusal is not None:
            self._refuse(source, refusal)
            return True
        if is_command(source):
            self.commands.on_command(value, key, source)
            return True
        if is_id_report(source):
            self.ids.on_report(value, state)
            return True
        if source.is_job_event:
            self.on_event(value, key, source, state)
            return True
        return self.on_request(value, key, source, state)

    def _refuse(self, source: Source, error: GatewayError) -> None:
        """A record refused before it is read: its answer, and the count."""
        if source.is_job_event:
            outputs = refused_event(source, error)
        elif is_command(source):
            outputs = refused_command(source, error)
        else:
            outputs = refused_request(source, error)
        for output in outputs:
            self.emit(output, source)
        self.metrics.refused_inputs.labels("dedup", error.code).inc()

    def _load(self, state: KeyState) -> tuple[Entry, ...]:
        return load_entries(state.get_bytes(ENTRIES))

    def _store(
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
            self.metrics.state_keys.dec()
            return
        ttl = None if due is None else timedelta(milliseconds=due - now_ms)
        state.set_bytes(ENTRIES, dump_entries(after), ttl=ttl)
        if not before:
            self.metrics.state_keys.inc()

    # -- requests -----------------------------------------------------------

    def on_request(
        self, value: bytes | None, key: bytes | None, source: Source, state: KeyState
    ) -> bool:
        """Decide a request (True), or send it where it must go first (False)."""
        request = parse_limited(value, self.limits)
        if isinstance(request, Request) and self._unclaimed(request, source):
            # A keyed job's client id is claimed at the id's home first (core/ids.py).
            home = str(request.envelope.id).encode()
            if key == home and self.ids.home(home) == source.partition:
                self.ids.claim(request, value, source, state)
            else:
                again = Output(value or b"", home, "requests", headers=list(source.headers.items()))
                self.emit(again, source)
            return False
        if isinstance(request, Request) and self._misrouted(request, key, source.partition):
            # Deciding here could let two copies of one fingerprint be decided on two
            # partitions: keyed by its route, it lands where that route is decided; one
            # without an id goes through the router, which gives it one.
            self.metrics.reroutes.inc()
            log.warning(
                "request on the wrong partition re-routed",
                extra={"source": source.as_dict()},
            )
            route = wire.route(request)
            headers = list(source.headers.items())
            again = (
                Output(value or b"", key, role="intake", headers=headers)
                if route is None
                else Output(value or b"", route.encode(), role="requests", headers=headers)
            )
            self.emit(again, source)
            return False
        unique_key = request.unique_key if isinstance(request, Request) else None
        entries = self._load(state) if unique_key else ()
        known = self.ids.known(state, request) if isinstance(request, Request) else None
        decision = decide(
            entries, request, source.timestamp_ms, self.limits.retention_ms,
            seed=source.seed, known=known, at_home=self.ids.at_home(source.partition),
        )  # fmt: skip
        if unique_key:
            self._store(state, entries, decision.entries, source.timestamp_ms)
        decision = self._existing_in_full(decision, state)
        raw = request.envelope.raw if isinstance(request, Request) else None
        dialect = dialect_of(request, value)
        encoded = None  # the new job's JSON, as the jobs topic gets it
        for output in decision_outputs(decision, source, request_id(source, raw), dialect):
            self.emit(output, source)
            if output.role == "jobs":
                encoded = output.value
        self._record_jobs(decision, state, source, encoded)
        self.metrics.decided(decision.outcome, dialect, source.timestamp_ms)
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "decided",
                extra={"outcome": str(decision.outcome), "unique_key": decision.unique_key},
            )
        return True

    def _existing_in_full(self, decision: Decision, state: KeyState) -> Decision:
        """The job a duplicate matched, reported as its record holds it (an entry keeps only
        what deciding needs): an ignored request's caller gets the whole job back."""
        existing = decision.existing
        if existing is None or existing.job is not None:
            return decision
        record = self.load_job(state, existing.job_id)
        if record is None:
            return decision
        shown = {k: v for k, v in record.items() if k not in ("route", "partition")}
        return replace(decision, existing=replace(existing, job=shown))

    @staticmethod
    def _unclaimed(request: Request, source: Source) -> bool:
        """A keyed request with a client id its home has not claimed for it."""
        job_id = request.envelope.id
        return (
            job_id is not None
            and wire.route(request) != job_id
            and source.header(wire.CLAIMED_ID_HEADER) != job_id
        )

    def _misrouted(self, request: Request, key: bytes | None, partition: int) -> bool:
        route = wire.route(request)
        if route is None:
            return True  # no key and no id: the router gives it an id to route by
        wanted = route.encode()
        return key != wanted or partition_for(wanted, self.partitions) != partition

    # -- job records --------------------------------------------------------

    @staticmethod
    def load_job(state: KeyState, job_id: str) -> dict[str, Any] | None:
        raw = state.get_bytes(JOB + job_id)
        return None if raw is None else dict(orjson.loads(raw))

    def _record_jobs(
        self, decision: Decision, state: KeyState, source: Source, encoded: bytes | None
    ) -> None:
        """Store and publish the jobs a decision made or moved: a new one (`encoded`: its
        JSON, whose record is encoded from it), replaced ones cancelled, an updated one
        (Oban's replace) with its changed fields."""
        if decision.outcome is Outcome.UPDATED and decision.job is not None:
            # The stored record keeps what the update does not touch (attempts, stamps).
            stored = self.load_job(state, str(decision.job["id"]))
            if stored is not None:
                self._put_job(state, updated_record(stored, decision), source)
                return
        if decision.job is not None:
            job_id = str(decision.job["id"])
            job = stored_job(decision.job, decision.unique_key, source.partition)
            route = job["route"]
            self._put_job(state, job, source, stored_json(encoded, decision.job, job))
            if route != job_id and source.header(wire.CLAIMED_ID_HEADER) != job_id:
                self.ids.minted(source, job, route)
        for entry in decision.cancelled:
            old = self.load_job(state, entry.job_id)
            cancelled = None if old is None else cancelled_by_replace(old, decision.decided_at)
            if cancelled is not None:
                self._put_job(state, cancelled, source)

    def _put_job(
        self, state: KeyState, job: dict[str, Any], source: Source, encoded: bytes | None = None
    ) -> None:
        """Store and publish a job (`encoded`: its JSON, when known); a terminal one expires
        the retention after it ended, and its tombstone is scheduled for then; an active
        one's attempt is looked at again when its lease or timeout ends."""
        due = job_expires_at(job, self.limits.retention_ms)
        ttl = None if due is None else timedelta(milliseconds=max(due - source.timestamp_ms, 1))
        # One encoding for both: the stored record is the one published.
        published = job_state(job, encoded)
        state.set_bytes(JOB + str(job["id"]), published.value, ttl=ttl)
        self._jobs_after[str(job["id"])] = job.get("state")
        self.emit(published, source)
        self._schedule_job(job, source, self.state_of)

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

    def _tombstone_expired(self, source: Source) -> None:
        for route, job_id in self.take_due(TOMBSTONES, source):
            state = self.state_of(source, route.encode())
            job = self.load_job(state, job_id)
            if job is not None:
                due = job_expires_at(job, self.limits.retention_ms)
                if due is None or due > source.timestamp_ms:
                    continue  # taken again by a new job, or revived: a later entry has it
                # Expired, though the store's TTL has not hidden it yet: it goes now,
                # so the record and its tombstone never disagree.
                state.delete(JOB + job_id)
                self._jobs_after[job_id] = None
            self.emit(job_state_tombstone(job_id), source)
            self.ids.left(source, job_id, route)

    def _expire_attempts(self, source: Source) -> None:
        """Jobs whose deadline has passed: an active one past its lease or timeout fails as
        a nack would fail it; a waiting one past its expires_at is discarded."""
        for route, job_id in self.take_due(LEASES, source):
            state = self.state_of(source, route.encode())
            job = self.load_job(state, job_id)
            # A heartbeat, an ack or a new attempt since made the entry stale: the job
            # is judged as it is now, and only once its own deadline's bucket has ended
            # (so its expiry time is a function of the job alone: see audit/jobs.py).
            deadline = None if job is None else job_deadline(job)
            if job is None or deadline is None or LEASES.seen_at(deadline) > source.timestamp_ms:
                continue
            result = expire_job(job, source.timestamp_ms)
            if result is not None and result.job is not None:
                self._follow(result.job, result, state, source)
                log.info(
                    "job expired",
                    extra={"job_id": job_id, "state": str(result.state),
                           "error": result.job.get("error"), "source": source.as_dict()},
                )  # fmt: skip

    # -- job events ---------------------------------------------------------

    def on_event(
        self, value: bytes | None, key: bytes | None, source: Source, state: KeyState
    ) -> None:
        event = parse_event_record(value, key)
        job_id = None if isinstance(event, GatewayError) else event.job_id
        job = self.load_job(state, job_id) if job_id else None
        keyed = job is not None and isinstance(job.get("unique_key"), str)
        entries = self._load(state) if keyed else ()
        paused = job is not None and self.commands.paused(source, job.get("queue"))
        result, after = on_key(
            job, entries, event, source.timestamp_ms, self.limits.retention_ms, paused
        )  # fmt: skip
        if result.outcome is EventOutcome.APPLIED and result.job is not None:
            self._follow(result.job, result, state, source, (entries, after) if keyed else None)
        self._what = {"job_id": result.job_id, **event_summary(result)}
        reply = event_reply(result, route_of(job, event), source)
        if reply is not None:
            self.emit(reply, source)
        reason = result.reason or (result.error.code if result.error else "")
        self.metrics.event(str(result.outcome), str(reason))
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

    def _follow(
        self,
        job: dict[str, Any],
        result: EventResult,
        state: KeyState,
        source: Source,
        entries: tuple[tuple[Entry, ...], tuple[Entry, ...]] | None = None,
    ) -> None:
        """Store the moved job (a deleted one goes, with its tombstone at once); its key's
        entries follow; a cancel tells the worker."""
        if result.deleted:
            # Its id stays claimed until its scheduled tombstone (it was terminal, so one is
            # scheduled): released now, the id could go to a job under another route that
            # the scheduled tombstone would then wipe from job_states.
            state.delete(JOB + str(job["id"]))
            self._jobs_after[str(job["id"])] = None
            self.emit(job_state_tombstone(str(job["id"])), source)
        else:
            self._put_job(state, job, source)
        unique_key = job.get("unique_key")
        if isinstance(unique_key, str):
            if entries is None:  # an expiry: the core moved the job alone
                before = self._load(state)
                entries = before, follow(
                    before, job, result, source.timestamp_ms, self.limits.retention_ms
                )  # fmt: skip
            self._store(state, *entries, source.timestamp_ms)
        if result.state is State.CANCELLED:
            self.emit(cancellation(job, str(result.previous_state), unique_key), source)


def route_of(job: dict[str, Any] | None, event: JobEvent | GatewayError) -> str | None:
    if job is not None:
        return job_route(job)
    return None if isinstance(event, GatewayError) else event.route
