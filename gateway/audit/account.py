"""Every record of a partition of `decisions`, accounted for as a replay streams it.

A record belongs on the partition of its source (verify.Layout): one of the partition's
own `requests` records, replayed beside it (replay.py), or one of the router's decisions
at intake, replayed with its intake partition. Anything else is reported: a record that
is not an audit record (`unreadable`), one whose source writes its trail elsewhere or is
no input's (`misplaced`), one altered after it was sealed (`altered`), one without a
digest or without a key after the partition's records have them (`unsealed`,
`unkeyed`), and what the partition's chain shows (chain.py): a record the chain passes
over (`off-chain`) and a gap (`missing`). A record reported once is not reported again
for what follows from it.

Of the records whose place holds, where their input is met decides the rest (`unmatched`):
the replay decides them again, and one whose input it never meets is named too.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.audit.chain import WINDOW, Chain
from gateway.audit.findings import (
    AFTER_WINDOW,
    BEFORE_WINDOW,
    INPUT_GONE,
    KEY_NOT_HELD,
    Position,
    ReplayReport,
)
from gateway.audit.log import LogRecord
from gateway.audit.verify import ALTERED, UNCHECKED, UNSEALED, Layout, seal_of
from gateway.stage.audit_keys import AuditKeys


@dataclass(frozen=True, slots=True)
class Audit:
    """One recorded audit record, where it is, its source, and its seal (verify.py)."""

    position: Position
    raw: bytes
    value: Mapping[str, Any]
    seal: str
    source: Position

    @property
    def intact(self) -> bool:
        """Whether nothing in its bytes contradicts its digest."""
        return self.seal != ALTERED


def parsed(record: LogRecord) -> Mapping[str, Any] | None:
    try:
        value = orjson.loads(record.value or b"")
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def source_of(value: Mapping[str, Any]) -> Position:
    """An audit record's source; an unreadable one sorts first and matches no record."""
    s = value.get("source")
    s = s if isinstance(s, dict) else {}
    partition, offset = s.get("partition"), s.get("offset")
    return (
        str(s.get("topic")),
        partition if isinstance(partition, int) else -1,
        offset if isinstance(offset, int) else -1,
    )


class Trail:
    """One partition of decisions, read once, in log order."""

    def __init__(
        self, partition: int, layout: Layout, report: ReplayReport, keep: int = 1_000,
        keys: AuditKeys | None = None,
    ) -> None:  # fmt: skip
        self.partition, self.layout, self.keys = partition, layout, keys
        self.report, self.keep = report, keep
        self.topic = ""  # of decisions, as its records name it
        self.chain = Chain()
        self.reported: set[Position] = set()  # records reported the chain may still name

    def audits(self, records: Iterable[LogRecord]) -> Iterator[Audit]:
        """The audit records of the partition's own `requests` partition, each once its place
        is checked; every other record is accounted for here."""
        for record in records:
            self.topic = record.topic
            value = parsed(record)
            if value is None:
                self.find("unreadable", record.position, "it is no audit record (not a JSON "
                          "object): the processor writes none such")  # fmt: skip
                continue
            raw = record.value or b""
            audit = Audit(record.position, raw, value, seal_of(raw, value, self.keys),
                          source_of(value))  # fmt: skip
            if self._placed(audit):
                yield audit

    def _placed(self, audit: Audit) -> bool:
        """Whether the audit record is one of the partition's requests records', to be
        replayed beside its input; it is checked in its place first, and one reported for
        itself is not reported for the chain's break as well."""
        offset, value = audit.position[2], audit.value
        misplaced = self.layout.misplaced(self.partition, value)
        ours = misplaced is None and audit.source[0] == self.layout.requests
        if misplaced is not None:
            if audit.seal == ALTERED:
                misplaced += ", and its bytes do not match its digest"
            self.find("misplaced", audit.position, misplaced)
        elif audit.seal == ALTERED:
            # Replayed still, unchecked, so that the routes it names start afresh.
            self.find("altered", audit.position, "its bytes do not match its digest")
        elif ours and audit.seal == UNSEALED and self.chain.unsealed(offset):
            self.find("unsealed", audit.position, "it carries no digest, though the partition's "
                      f"records are sealed since @{self.chain.sealed_since}")  # fmt: skip
            ours = False  # it would pass for a record of before 0.4
        elif ours and audit.seal != UNSEALED and self.chain.unkeyed(offset, value):
            # Replayed still: without its key, what it says may yet be what was decided.
            self.find("unkeyed", audit.position, "it is sealed without a key, though the "
                      f"partition's records are keyed since @{self.chain.keyed_since}")  # fmt: skip
        elif ours and audit.seal == UNCHECKED:
            self.report.unverifiable[KEY_NOT_HELD] += 1
        self._link(audit)
        return ours  # not: the router's decision, replayed with its intake partition

    def _link(self, audit: Audit) -> None:
        """What the chain shows on reaching the record; a break that a record already
        reported accounts for is not reported again."""
        topic, _, offset = audit.position
        link = self.chain.follow(offset, audit.value)
        if link is None:
            return
        for about, text in link.said(offset).items():
            position = (topic, self.partition, about)
            if position in self.reported:
                continue
            if link.follows is not None:
                self.find("off-chain", position, text)
            elif (topic, self.partition, link.last) not in self.reported:
                self.find("missing", position, f"the chain has a gap before it: {text}")

    def find(self, kind: str, position: Position, detail: str) -> None:
        """Report a finding; one about a record of the partition is remembered while the
        chain may still name it."""
        self.report.find(kind, position, detail, self.keep)
        if position[0] != self.topic:
            return
        self.reported.add(position)
        if len(self.reported) > 4 * WINDOW:
            oldest = self.chain.recent[0][0] if self.chain.recent else position[2]
            self.reported = {p for p in self.reported if p[2] >= oldest}


@dataclass(frozen=True)
class Span:
    """The offsets of an input partition a replay reads: from `start` (None: its first
    record read) up to `end` (None: not known); `opened`: the read starts after the
    partition's first record (at --from), so what comes before is context; `cut`: the read
    stopped before the end (at --to), so what comes after is no one's to judge here."""

    start: int | None = None
    end: int | None = None
    cut: bool = False
    opened: bool = False


UNKNOWN = Span()


def unmatched(
    source: Position, previous: int | None, following: int | None, first: int | None, span: Span
) -> tuple[str, str]:
    """An audit record whose input the replay did not meet where the record stands: between
    the input records at `previous` and `following` (None: before the first, after the
    last), the first read at `first`. (kind, detail) of the finding it is, or ("", reason)
    when it cannot be verified."""
    offset, named = source[2], "{}[{}]@{}".format(*source)
    start = span.start if span.start is not None else first
    if start is None or offset < start:
        return "", BEFORE_WINDOW if span.opened and span.start is not None else INPUT_GONE
    if previous is not None and offset <= previous:
        return "reordered", (f"its input, {named}, was passed already: it is out of order, "
                             "a second audit record of it, or it names no record")  # fmt: skip
    if following is not None:
        between = f"@{start if previous is None else previous} and @{following}"
        return "without input", (f"its source, {named}, is no record of the log (none is "
                                 f"read between {between})")  # fmt: skip
    if span.end is not None and offset >= span.end:
        return "beyond the last input", (f"its source, {named}, is past the end of its "
                                         f"partition (@{span.end})")  # fmt: skip
    if span.cut:
        return "", AFTER_WINDOW
    read = "none was read" if previous is None else f"the last read is @{previous}"
    return "beyond the last input", (f"its source, {named}, comes after the last input "
                                     f"record ({read}): no record is there")  # fmt: skip


def strays(
    records: Iterable[LogRecord], partition: int, layout: Layout, wanted: frozenset[int],
    report: ReplayReport, keep: int,
) -> None:  # fmt: skip
    """A partition of decisions that is not replayed: its records that belong on one of the
    `wanted` partitions are misplaced here."""
    for record in records:
        value = parsed(record)
        home = None if value is None else layout.home(value.get("source"))
        if value is not None and home in wanted and home != partition:
            report.find("misplaced", record.position, str(layout.misplaced(partition, value)), keep)
