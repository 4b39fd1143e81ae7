"""What a replay finds: its counts, the differences of records decided again, what the
audit trail itself shows, and why what could not be verified could not."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

Position = tuple[str, int, int]  # topic, partition, offset

# Why a record could not be verified.
BEFORE_TRAIL = "decided before the oldest audit record read (retention, or before --from)"
INPUT_GONE = "its input record is gone (the topic's retention deleted it)"
TOO_LARGE = "it read a value too large for its audit record to carry"
TRUNCATED = "it touched more than its audit record could carry (the replay started afresh after it)"
NO_STATE = "its audit record was written before audit records carried their state (< 0.4)"
# Outside the window asked for: read as the window's context, nothing to verify.
BEFORE_WINDOW = "an audit record of an input before --from (read for the window's start)"
AFTER_WINDOW = "an audit record of an input after --to"
CONTEXT = frozenset({BEFORE_WINDOW, AFTER_WINDOW})
KEY_NOT_HELD = (
    "its audit record is sealed with a key that no --audit-key-file given holds: its digest "
    "is not checked (what it says is)"
)


@dataclass(frozen=True, slots=True)
class Difference:
    request_id: str
    source: Position
    field: str
    recorded: Any
    replayed: Any


@dataclass(frozen=True, slots=True)
class Finding:
    """What the audit trail itself shows (account.py, replay.py): a record missing, altered,
    reordered, misplaced, without input, beyond the last input, off the chain, unsealed,
    unkeyed or unreadable, or state broken."""

    kind: str
    position: Position  # the audit record that shows it (a requests record: missing)
    detail: str


@dataclass
class ReplayReport:
    verified: int = 0  # decided again: identical
    different: int = 0  # decided again: not identical (listed in differences)
    rerouted: int = 0  # sent on to be decided elsewhere: their audit is where they landed
    unverifiable: Counter[str] = field(default_factory=Counter)
    differences: list[Difference] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    records: int = 0  # input records read

    @property
    def compared(self) -> int:
        return self.verified + self.different

    def context(self) -> Counter[str]:
        """Records outside the window asked for, by why: expected, not failures."""
        return Counter({r: n for r, n in self.unverifiable.items() if r in CONTEXT})

    def unchecked(self) -> Counter[str]:
        """Records of the window that could not be verified, by why."""
        return Counter({r: n for r, n in self.unverifiable.items() if r not in CONTEXT})

    def merge(self, other: ReplayReport, keep: int) -> None:
        self.verified += other.verified
        self.different += other.different
        self.rerouted += other.rerouted
        self.records += other.records
        self.unverifiable.update(other.unverifiable)
        self.differences.extend(other.differences[: max(0, keep - len(self.differences))])
        self.findings.extend(other.findings[: max(0, keep - len(self.findings))])

    def find(self, kind: str, position: Position, detail: str, keep: int) -> None:
        if len(self.findings) < keep:
            self.findings.append(Finding(kind, position, detail))
        self.unverifiable[f"{kind} audit record"] += 1


def compare_records(
    position: Position, recorded: Mapping[str, Any] | None, replayed: Mapping[str, Any] | None
) -> list[Difference]:
    """Every top-level field on which two audit records differ; a missing record is one."""
    request_id = str((recorded or replayed or {}).get("request_id", where(position)))
    if recorded is None or replayed is None:
        return [
            Difference(request_id, position, "(record)", _outcome(recorded), _outcome(replayed))
        ]
    return [
        Difference(request_id, position, name, recorded.get(name), replayed.get(name))
        for name in sorted(recorded.keys() | replayed.keys())
        if recorded.get(name) != replayed.get(name)
    ]


def _outcome(record: Mapping[str, Any] | None) -> str:
    if record is None:
        return "none"
    if "outcome" in record:
        return f"decision {record.get('outcome')}"
    return f"audit record ({record.get('kind')})"


def where(position: Position) -> str:
    return "{}[{}]@{}".format(*position)
