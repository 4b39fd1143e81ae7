"""Replay one partition's log through the processor's own per-record code, checked against
its audit trail, record by record, as it streams past.

Each `requests` record runs, in offset order, through `Dedup` (which calls the core) over
a `TrailStore`. Before it runs, the state its audit record says it was decided from (its
`state.before`, processor/trail.py) fills every value the replay has not seen yet: so a
window of the log whose start is gone replays like the whole log, each key starting from
the state its first surviving record carries. A value the replay already holds is
compared instead: the state a record was decided from must be the state the records
before it left. Then the audit record the replay writes is compared with the recorded
one, byte for byte, and field by field when they differ.

What the trail itself shows is reported by position, apart from different decisions:
- altered: an audit record whose digest does not match its bytes;
- missing: a record of the log that left no audit record, or a gap in the chain (`prev`
  is not the digest of the record before it);
- reordered: audit records out of their inputs' order;
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
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from gateway import wire
from gateway.audit.findings import (
    BEFORE_TRAIL,
    INPUT_GONE,
    NO_STATE,
    TOO_LARGE,
    TRUNCATED,
    UNREADABLE,
    Position,
    ReplayReport,
    compare_records,
    where,
)
from gateway.audit.log import LogRecord
from gateway.audit.trail_store import TrailStore
from gateway.processor.dedup import Dedup
from gateway.processor.metrics import Metrics
from gateway.processor.parsing import Limits
from gateway.processor.records import Output, Source
from gateway.processor.router import Router
from gateway.processor.schedule import Schedule
from gateway.processor.trail import CHAIN_KEY, HEAD, intact


@dataclass(frozen=True, slots=True)
class Audit:
    """One recorded audit record, where it is, its source, and whether its bytes match its
    digest."""

    position: Position
    raw: bytes
    value: Mapping[str, Any]
    intact: bool
    source: Position


def _source(value: Mapping[str, Any]) -> Position:
    """An audit record's source; an unreadable one sorts first and matches no record."""
    s = value.get("source")
    s = s if isinstance(s, dict) else {}
    partition, offset = s.get("partition"), s.get("offset")
    return (
        str(s.get("topic")),
        partition if isinstance(partition, int) else -1,
        offset if isinstance(offset, int) else -1,
    )


def audits(records: Iterable[LogRecord], report: ReplayReport) -> Iterator[Audit]:
    """A partition of `decisions`, read as audit records (one that is not JSON is counted)."""
    for record in records:
        try:
            value = orjson.loads(record.value or b"")
            if not isinstance(value, dict):
                raise ValueError("not an object")
        except (orjson.JSONDecodeError, ValueError):
            report.unverifiable[UNREADABLE] += 1
            continue
        raw = record.value or b""
        yield Audit(record.position, raw, value, intact(raw), _source(value))


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
        self.last: Audit | None = None  # the previous audit record of the chain
        self._out: list[Output] = []
        self.dedup = WindowDedup(
            partitions, lambda output, _: self._out.append(output), Metrics(), limits,
            lambda _, key: store.state(key),
        )  # fmt: skip

    def run(self, records: Iterable[LogRecord], trail: Iterable[Audit]) -> None:
        """The partition's requests records beside their audit records, both in log order.
        From the log's first offset, nothing came before: every record is checked."""
        pending = iter(trail)
        audit = next(pending, None)
        for record in records:
            self.report.records += 1
            self.started = self.started or record.offset == 0
            while audit is not None and audit.source[2] < record.offset:
                self._chain(audit)
                if self.started:
                    self.report.find("reordered", audit.position, "its input was decided "
                                     f"before {where(record.position)}", self.keep)  # fmt: skip
                else:
                    self.report.unverifiable[INPUT_GONE] += 1
                audit = next(pending, None)
            if audit is not None and audit.source[2] == record.offset:
                self._chain(audit)
                self.record(record, audit)
                audit = next(pending, None)
            else:
                self.record(record, None)

    def _chain(self, audit: Audit) -> None:
        """Its digest matches its bytes, and its `prev` the record before it."""
        last, self.last = self.last, audit
        if not audit.intact:
            return  # reported as altered when its record is replayed
        prev = audit.value.get("prev")
        if last is not None and last.intact and prev != last.value["digest"]:
            self.report.find("missing", audit.position, "the chain has a gap before it: its "
                             f"prev is not the digest of {where(last.position)} (a record "
                             "missing, or one rewritten)", self.keep)  # fmt: skip

    def record(self, record: LogRecord, audit: Audit | None) -> None:
        source = record.source
        self.store.at(record.timestamp_ms)
        if audit is not None and "digest" not in audit.value:
            self.report.unverifiable[NO_STATE] += 1
            self.started = self.sealed = False  # the log before the trail: nothing to seed
            return
        if audit is not None and not audit.intact:
            self.report.find("altered", audit.position, "its bytes do not match its digest",
                             self.keep)  # fmt: skip
            self._taint(audit.value)
            self._replayed(record, source)  # its writes are not checked: its routes start afresh
            return
        if audit is None and not self.started:
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
                self.report.find("altered", audit.position, "its state is not in the form of "
                                 "an audit record", self.keep)  # fmt: skip
                self._taint(audit.value)
                return
        replayed = self._replayed(record, source)
        if audit is None:
            if replayed is not None and not self.sealed:
                self.report.unverifiable[BEFORE_TRAIL] += 1
            elif replayed is not None:
                self.report.find("missing", record.position, "it was decided, and left no "
                                 "audit record", self.keep)  # fmt: skip
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
                self.report.find("broken", audit.position, f"the state of {route_text!r} "
                                 f"({name}) it was decided from is not what the records "
                                 "before it left", self.keep)  # fmt: skip
            state.put_stamped(name, raw, stamp)
            if raw is not None:
                self.dedup.seeded(source, lambda _, key: self.store.state(key), name, raw)
        self.tainted.difference_update(_route(r) for r in audit.value["state"]["routes"])
        self.store.state(CHAIN_KEY).put_stamped(HEAD, _prev(audit), None)
        self.dedup.recorded_due = [
            (_route(schedule), route, item) for schedule, route, item in audit.value["state"]["due"]
        ]
        return complete

    def _replayed(self, record: LogRecord, source: Source) -> Output | None:
        """Run the record; its audit record, if it wrote one."""
        self._out.clear()
        state = self.store.state(record.key or b"")
        self.dedup.on_record(record.value, record.key, source, state)
        self.dedup.recorded_due = []
        return next((o for o in self._out if o.role == "decisions"), None)

    def _rerouted(self) -> bool:
        report = (wire.KIND_HEADER, wire.ID_REPORT)
        return any(
            o.role in ("intake", "requests") and report not in (o.headers or []) for o in self._out
        )

    def _compare(self, source: Source, audit: Audit, replayed: Output | None) -> None:
        if replayed is not None and replayed.value == audit.raw:
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


class WindowDedup(Dedup):
    """The processor's Dedup, whose schedules may have begun before the window: what a
    record's audit record says its time made due is due here too, first and in its order,
    beside anything due on the replay's own schedules (a job it knows whose time came), so
    that a due item the processor missed shows as a difference. Taking an item is asking
    the core about the job as it is now, so an item taken twice does nothing twice."""

    recorded_due: list[tuple[bytes, str, str]] = []

    def take_due(self, schedule: Schedule, source: Source) -> list[tuple[str, str]]:
        own = super().take_due(schedule, source)
        recorded = [(route, item) for key, route, item in self.recorded_due if key == schedule.key]
        if not recorded:
            return own
        del self.taken[len(self.taken) - len(own) :]
        taken = [*recorded, *(x for x in own if x not in recorded)]
        self.taken.extend((schedule.key, route, item) for route, item in taken)
        return taken


def replay_intake(
    records: Iterable[LogRecord], trail: Iterable[Audit], limits: Limits, report: ReplayReport,
    keep: int = 1_000,
) -> None:  # fmt: skip
    """The router decides what it refuses at intake (it keeps no state): each such decision
    again, compared with the one recorded for the same intake record."""
    out: list[Output] = []
    router = Router(lambda output, _: out.append(output), Metrics(), limits)
    pending = iter(trail)
    audit = next(pending, None)
    for record in records:
        report.records += 1
        while audit is not None and audit.source[2] < record.offset:
            report.unverifiable[INPUT_GONE] += 1
            audit = next(pending, None)
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
