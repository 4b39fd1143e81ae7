"""What an audit record, read alone or beside its partition's chain, shows of itself: its
seal (digest, keyed or not), its place (the decisions partition its input writes to), and
what the chain says of it (chain.py). Shared by replay, which also has the inputs, and by
explain and the history route, which have only the record and the index.

What is cheap to check from the record alone: its bytes against its digest (with the key
it names, when the reader holds it) and its partition against its source's. From the
index: whether the chain runs through it (its `prev`, and the next record's), and whether
it lacks a digest or a key where its partition's records have them. Whether its input
justifies it, only a replay tells.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway.audit.chain import Chain
from gateway.stage.audit_keys import AuditKeys
from gateway.stage.trail import SEALED_BY, intact

# A record's seal.
SOUND = "sound"  # its digest matches its bytes (keyed with a key the reader holds)
ALTERED = "altered"  # it does not
UNCHECKED = "unchecked"  # keyed with a key the reader does not hold
UNSEALED = "unsealed"  # no digest: the router's decisions, records written before 0.4


def seal_of(raw: bytes, record: Mapping[str, Any], keys: AuditKeys | None) -> str:
    if "digest" not in record:
        return UNSEALED
    key_id = record.get(SEALED_BY)
    if key_id is None:
        return SOUND if intact(raw) else ALTERED
    if not isinstance(key_id, str):
        return ALTERED
    key = None if keys is None else keys.get(key_id)
    if key is None:
        return UNCHECKED
    return SOUND if intact(raw, key) else ALTERED


def not_held(record: Mapping[str, Any], keys: AuditKeys | None) -> str:
    """Why a keyed record's digest was not checked."""
    if keys is None:
        return (
            "it is sealed with a key, and no --audit-key-file was given: its digest is not checked"
        )
    return (
        f"it is sealed with key {str(record.get(SEALED_BY))[:64]!r}, which the audit key file "
        "does not hold: its digest is not checked"
    )


@dataclass(frozen=True)
class Layout:
    """Where each input's audit records go: the decisions partition of the same number as
    the input's (an intake partition's modulo the partitions of decisions)."""

    requests: str
    intake: str
    partitions: int  # of decisions, as of requests

    def home(self, source: Any) -> int | None:
        """The decisions partition a record from `source` belongs on; None: no input's."""
        if not isinstance(source, Mapping):
            return None
        topic, partition, offset = (
            source.get("topic"),
            source.get("partition"),
            source.get("offset"),
        )
        if (
            not (isinstance(partition, int) and isinstance(offset, int))
            or partition < 0
            or offset < 0
        ):
            return None
        if topic == self.requests and partition < self.partitions:
            return partition
        if topic == self.intake:
            return partition % self.partitions
        return None

    def misplaced(self, partition: int, record: Mapping[str, Any]) -> str | None:
        """Why a record on decisions `partition` does not belong there, or None."""
        source = record.get("source")
        home = self.home(source)
        if home is None:
            return (
                f"its source ({_source(source)}) is no record of {self.requests} or {self.intake}"
            )
        if home != partition:
            return (
                f"it sits on partition {partition}, but the audit records of its source "
                f"({_source(source)}) are written to partition {home}"
            )
        return None


def _source(source: Any) -> str:
    if not isinstance(source, Mapping):
        return "none"
    return "{}[{}]@{}".format(source.get("topic"), source.get("partition"), source.get("offset"))


@dataclass(frozen=True)
class Verdict:
    """What refutes a record (it is not as the processor wrote it, or not where it wrote
    it), and what could not be checked; neither: nothing cheap to check refutes it."""

    refuted: tuple[str, ...] = ()
    unchecked: tuple[str, ...] = ()


@dataclass(frozen=True)
class Verifier:
    layout: Layout | None = None
    keys: AuditKeys | None = None

    def check(
        self, position: tuple[int, int], raw: bytes, record: Mapping[str, Any],
        marks: list[str], chain: Chain,
    ) -> Verdict:  # fmt: skip
        """The record at `position` (partition, offset) of decisions; `marks`: what the index
        found of its place in the chain, `chain`: its partition's chain as the index holds it."""
        partition, offset = position
        refuted = list(marks)
        unchecked = []
        placed = None if self.layout is None else self.layout.misplaced(partition, record)
        if placed is not None:
            refuted.append(placed)
        seal = seal_of(raw, record, self.keys)
        if seal == ALTERED:
            refuted.append(
                "its bytes do not match its digest: it is not as the processor sealed it"
            )
        elif seal == UNCHECKED:
            unchecked.append(not_held(record, self.keys))
        elif seal == UNSEALED and self._of_requests(record) and chain.unsealed(offset):
            refuted.append(
                "it carries no digest, though its partition's records are sealed since offset "
                f"{chain.sealed_since}: the processor seals every record it writes"
            )
        elif seal == UNSEALED:
            unchecked.append(
                "it carries no digest (a decision of the router at intake, or a record written "
                "before 0.4): only a replay checks it"
            )
        if seal != UNSEALED and chain.unkeyed(offset, record):
            refuted.append(
                "it is sealed without a key, though its partition's records are sealed with "
                f"one since offset {chain.keyed_since}: the processor keys every record then"
            )
        return Verdict(tuple(refuted), tuple(unchecked))

    def _of_requests(self, record: Mapping[str, Any]) -> bool:
        """Whether a record is about a record of requests (the router's are not)."""
        source = record.get("source")
        topic = source.get("topic") if isinstance(source, Mapping) else None
        return self.layout is not None and topic == self.layout.requests


# Checks a record's seal without keys, and its place not at all.
PLAIN = Verifier()
