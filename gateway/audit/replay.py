"""Replay one partition's log through the processor's own per-record code, checked against
its audit trail, record by record, as it streams past.

Each `requests` record runs, in offset order, through `Dedup` (which calls the core) over
a `TrailStore`. Before it runs, the state its audit record says it was decided from (its
`state.before`, stage/trail.py) fills every value the replay has not seen yet: so a
window of the log whose start is gone replays like the whole log, each key starting from
the state its first surviving record carries. A value the replay already holds is
compared instead: the state a record was decided from must be the state the records
before it left. Then the audit record the replay writes is compared with the recorded
one, byte for byte, and field by field when they differ.

What the trail itself shows is reported by position, apart from different decisions.
Every record of the decisions partition is accounted for as it is read (account.py:
altered, misplaced, off the chain, a gap, ...); here, by where its input is met:
- missing: a record of the log that left no audit record;
- reordered: an audit record whose input was passed already (out of order, or a second
  one);
- without input: one whose source offset is no record of the log;
- beyond the last input: one after the last input record read;
- broken: the state a record was decided from is not what the records before it left,
  with no missing or altered record to account for it.
After a missing or altered record, the routes it touched are taken afresh from the next
audit records that read them: the consequence is not reported a second time.

What cannot be verified is counted, by reason, never skipped silently: records decided
before the oldest audit record kept, audit records whose input is gone, records that
read a value too large for their audit record to carry, and records written before audit
records carried their state.

`intake` records run through the stateless `Router` and what it decided is compared the
same way (see replay_intake).
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import orjson

from gateway import wire
from gateway.audit.account import UNKNOWN, Audit, Span, Trail, parsed, source_of, unmatched
from gateway.audit.findings import (
    BEFORE_TRAIL,
    NO_STATE,
    TOO_LARGE,
    TRUNCATED,
    Position,
    ReplayReport,
    compare_records,
)
from gateway.audit.log import LogRecord
from gateway.audit.trail_store import TrailStore
from gateway.audit.verify import seal_of
from gateway.core.decision_records import JOB_REF
from gateway.processor.metrics import Metrics
from gateway.stage.dedup import Dedup
from gateway.stage.kinds import Kind, kind_of
from gateway.stage.parsing import Limits
from gateway.stage.records import Output, Source
from gateway.stage.router import Router
from gateway.stage.schedule import Schedule
from gateway.stage.shared import Due
from gateway.stage.trail import CHAIN_KEY, HEAD, SEALED_BY, UNKEYED, Sealer, sealed_bytes


class PartitionReplay:
    """Replays one partition of `requests` beside its audit trail."""

    def __init__(
        self, partitions: int, limits: Limits, store: TrailStore, report: ReplayReport,
        keep: int = 1_000,
    ) -> None:  # fmt: skip
        self.store = store
        self.report = report
        self.keep = keep
        # From here on every record is checked: the log's first offset, or an audit record
        # with its state read. `sealed`: such a record has been read, so one that is absent
        # is missing (before it, the log may be older than the trail).
        self.started = self.sealed = False
        self.tainted: set[bytes] = set()  # routes a missing or altered record touched
        self._out: list[Output] = []
        # What the audit record being replayed says its time made due (schedule, route, item).
        self.recorded_due: list[tuple[bytes, str, str]] = []
        self.dedup = Dedup(
            partitions, lambda output, _: self._out.append(output), Metrics(), limits,
            lambda _, key: store.state(key), window=self._window,
        )  # fmt: skip
        self.find: Callable[[str, Position, str], None] = lambda kind, position, detail: (
            report.find(kind, position, detail, keep)
        )
        # By the key id an audit record names: what seals the record replayed beside it.
        # Its digest is not compared (the recorded one is checked against its key, if held,
        # as it is read): only what it seals.
        self._sealers: dict[str, Sealer] = {}

    def run(
        self, records: Iterable[LogRecord], trail: Trail, decisions: Iterable[LogRecord],
        span: Span = UNKNOWN,
    ) -> None:  # fmt: skip
        """The partition's requests records beside its partition of decisions, both in log
        order, `span` the offsets of requests read. From the log's first offset, nothing
        came before: every record is checked. Every audit record left after the last input
        record is accounted for too."""
        self.find = trail.find
        pending = trail.audits(decisions)
        audit = next(pending, None)
        first = previous = None
        for record in records:
            self.report.records += 1
            self.started = self.started or record.offset == 0
            while audit is not None and audit.source[2] < record.offset:
                self._unmatched(audit, previous, record.offset, first, span)
                audit = next(pending, None)
            first = record.offset if first is None else first
            if audit is not None and audit.source[2] == record.offset:
                self.record(record, audit)
                audit = next(pending, None)
            else:
                self.record(record, None)
            previous = record.offset
        while audit is not None:
            self._unmatched(audit, previous, None, first, span)
            audit = next(pending, None)

    def _unmatched(
        self, audit: Audit, previous: int | None, following: int | None, first: int | None,
        span: Span,
    ) -> None:  # fmt: skip
        if not audit.intact:
            return  # reported as altered
        kind, detail = unmatched(audit.source, previous, following, first, span)
        if kind:
            self.find(kind, audit.position, detail)
        else:
            self.report.unverifiable[detail] += 1

    def record(self, record: LogRecord, audit: Audit | None) -> None:
        source = record.source
        self.store.at(record.timestamp_ms)
        if audit is not None and "digest" not in audit.value:
            self.report.unverifiable[NO_STATE] += 1
            self.started = self.sealed = False  # the log before the trail: nothing to seed
            return
        if audit is not None and not audit.intact:  # reported as altered (account.py)
            self._taint(audit.value)
            self._replayed(record, source)  # its writes are not checked: its routes start afresh
            return
        if audit is None and not self.started:
            # A tick leaves an audit record only when it made something due: one without
            # had nothing to verify.
            if kind_of(source, record.value) is not Kind.TICK:
                self.report.unverifiable[BEFORE_TRAIL] += 1
            return
        state = None if audit is None else audit.value.get("state")
        if isinstance(state, dict) and state.get("truncated"):
            self.report.unverifiable[TRUNCATED] += 1
            self.store.forget()
            self.tainted.clear()
            self.started = self.sealed = True
            return
        seeded = True
        if audit is not None:
            self.started = self.sealed = True
            try:
                seeded = self._seed(source, audit)
            except (AttributeError, KeyError, TypeError, ValueError):  # digest holds, form not
                self.find("altered", audit.position, "its state is not in the form of an audit "
                          "record")  # fmt: skip
                self._taint(audit.value)
                return
        replayed = self._replayed(record, source)
        if audit is None:
            if replayed is not None and not self.sealed:
                self.report.unverifiable[BEFORE_TRAIL] += 1
            elif replayed is not None:
                self.find("missing", record.position, "it was decided, and left no audit "
                          "record")  # fmt: skip
                self._taint(orjson.loads(replayed.value or b"{}"))
            elif self._rerouted():
                self.report.rerouted += 1
            return
        if not seeded:
            self.report.unverifiable[TOO_LARGE] += 1
            self._taint(audit.value)
            return
        self._compare(source, audit, replayed)

    def _seed(self, source: Source, audit: Audit) -> bool:
        """Fill what the replay has not seen from the audit record's state before; check
        what it has. False: a value it needs was too large to carry."""
        complete = True
        for route_text, name, value, stamp in audit.value["state"]["before"]:
            route = _route(route_text)
            state = self.store.state(route)
            if isinstance(value, dict) and "digest" in value:
                complete = complete and state.known(name)
                continue
            raw = None if value is None else _raw(value)
            held = state.held(name)
            if held is not None:
                if held == (raw, stamp):
                    continue
                if route in self.tainted:
                    state.put_stamped(name, raw, stamp)
                    continue
                self.find("broken", audit.position, f"the state of {route_text!r} ({name}) it "
                          "was decided from is not what the records before it left")  # fmt: skip
            state.put_stamped(name, raw, stamp)
            if raw is not None:
                self.dedup.seeded(source, lambda _, key: self.store.state(key), name, raw)
        self.tainted.difference_update(_route(r) for r in audit.value["state"]["routes"])
        self.store.state(CHAIN_KEY).put_stamped(HEAD, _prev(audit), None)
        self.dedup.sealer = self._sealer(audit.value.get(SEALED_BY))
        # A duplicate's record that carries the job it met (written before references, or
        # with no state to name it in) is written again as it was.
        self.dedup.references = JOB_REF in audit.value
        self.recorded_due = [
            (_route(schedule), route, item) for schedule, route, item in audit.value["state"]["due"]
        ]
        return complete

    def _window(self, schedule: Schedule, own: Due) -> Due:
        """The replay's schedules may have begun before its window: what a record's audit
        record says its time made due is due here too, first and in its order, beside
        anything due on the replay's own schedules (a job it knows whose time came), so that
        a due item the processor missed shows as a difference. Taking an item is asking the
        core about the job as it is now, so an item taken twice does nothing twice."""
        recorded = [(route, item) for key, route, item in self.recorded_due if key == schedule.key]
        if not recorded:
            return own
        return [*recorded, *(x for x in own if x not in recorded)]

    def _sealer(self, key_id: Any) -> Sealer:
        """Seals a record as one sealed with the key `key_id` names is (its digest aside)."""
        if not isinstance(key_id, str):
            return UNKEYED
        sealer = self._sealers.get(key_id)
        if sealer is None:
            sealer = self._sealers[key_id] = Sealer(key_id=key_id)
        return sealer

    def _replayed(self, record: LogRecord, source: Source) -> Output | None:
        """Run the record; its audit record, if it wrote one."""
        self._out.clear()
        state = self.store.state(record.key or b"")
        self.dedup.on_record(record.value, record.key, source, state)
        self.recorded_due = []
        return next((o for o in self._out if o.role == "decisions"), None)

    def _rerouted(self) -> bool:
        report = (wire.KIND_HEADER, wire.ID_REPORT)
        return any(
            o.role in ("intake", "requests") and report not in (o.headers or []) for o in self._out
        )

    def _compare(self, source: Source, audit: Audit, replayed: Output | None) -> None:
        if replayed is not None and sealed_bytes(replayed.value or b"") == sealed_bytes(audit.raw):
            self.report.verified += 1
            return
        self.report.different += 1
        theirs = None if replayed is None else orjson.loads(replayed.value or b"")
        position = (source.topic, source.partition, source.offset)
        for diff in compare_records(position, audit.value, theirs):
            if len(self.report.differences) < self.keep:
                self.report.differences.append(diff)

    def _taint(self, value: Mapping[str, Any]) -> None:
        """The routes an audit record names start afresh from the next that read them."""
        state = value.get("state")
        routes = state.get("routes") if isinstance(state, dict) else None
        for route in routes if isinstance(routes, list) else []:
            self.tainted.add(_route(route))


def replay_intake(
    records: Iterable[LogRecord], trail: Iterable[Audit], limits: Limits, report: ReplayReport,
    keep: int = 1_000, span: Span = UNKNOWN,
) -> None:  # fmt: skip
    """The router decides what it refuses at intake (it keeps no state): each such decision
    again, compared with the one recorded for the same intake record (`trail`: the audit
    records of the intake partition, in log order); one whose input is not met is named."""
    out: list[Output] = []
    router = Router(lambda output, _: out.append(output), Metrics(), limits)
    pending = iter(trail)
    audit = next(pending, None)
    first = previous = None

    def unmet(audit: Audit, following: int | None) -> None:
        kind, detail = unmatched(audit.source, previous, following, first, span)
        if kind:
            report.find(kind, audit.position, detail, keep)
        else:
            report.unverifiable[detail] += 1

    for record in records:
        report.records += 1
        while audit is not None and audit.source[2] < record.offset:
            unmet(audit, record.offset)
            audit = next(pending, None)
        first = record.offset if first is None else first
        previous = record.offset
        out.clear()
        router.on_record(record.value, record.key, record.source)
        replayed = next((o for o in out if o.role == "decisions"), None)
        recorded = audit if audit is not None and audit.source[2] == record.offset else None
        if recorded is not None:
            audit = next(pending, None)
        if replayed is None and recorded is None:
            continue
        if replayed is not None and recorded is not None and replayed.value == recorded.raw:
            report.verified += 1
            continue
        report.different += 1
        theirs = None if replayed is None else orjson.loads(replayed.value or b"")
        ours = None if recorded is None else recorded.value
        for diff in compare_records(record.position, ours, theirs):
            if len(report.differences) < keep:
                report.differences.append(diff)
    while audit is not None:
        unmet(audit, None)
        audit = next(pending, None)


def intake_audits(records: Iterable[LogRecord], topic: str, partition: int) -> Iterator[Audit]:
    """The router's decisions about one intake partition, of a partition of decisions
    (every other record is accounted for by that partition's Trail)."""
    for record in records:
        value = parsed(record)
        if value is None:
            continue
        source = source_of(value)
        if source[0] == topic and source[1] == partition:
            raw = record.value or b""
            yield Audit(record.position, raw, value, seal_of(raw, value, None), source)


def _route(text: Any) -> bytes:
    if isinstance(text, dict):
        return base64.b64decode(str(text.get("b64", "")))
    return str(text).encode()


def _raw(value: Any) -> bytes:
    """A value as the store held it: the JSON the audit record carried, or its bytes."""
    if isinstance(value, dict) and set(value) == {"b64"}:
        return base64.b64decode(str(value["b64"]))
    return orjson.dumps(value)


def _prev(audit: Audit) -> bytes | None:
    prev = audit.value.get("prev")
    return None if prev is None else str(prev).encode()
