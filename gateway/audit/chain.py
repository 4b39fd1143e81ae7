"""A partition of `decisions` as its chain: what each sealed record's `prev` says of the
records before it, as a reader meets them in log order (the index as it reads the topic,
a replay as it streams it).

Every sealed record names the digest of the partition's previous sealed one. A record
whose `prev` is the last one's follows it. One whose `prev` is an earlier one's shows
that the records between are off the chain: something appended them that the processor
never chained onto (a forged record written by another, resealed onto the head). One
whose `prev` names none of the recent records shows a gap: a record before it is missing,
or it was rewritten. Records without a digest (the router's decisions at intake, records
written before 0.4) are no part of it.

It also notes where the partition's records began to be sealed, and keyed: the processor
seals every record it writes from 0.4 on, and keys every one once it has a key, so a
record without a digest or without a key after those points is not the processor's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.stage.trail import SEALED_BY

# How many of the last sealed records a chain remembers: an insertion of fewer records
# than this is told apart from a gap.
WINDOW = 16


@dataclass(frozen=True)
class Link:
    """What the chain says on reaching a sealed record that does not follow the one before
    it: it follows an earlier one, passing over the records between (off the chain), or
    none of the recent ones (a gap before it)."""

    last: int  # the offset of the sealed record read before it
    follows: int | None = None  # the offset of the earlier record it follows
    passed: tuple[int, ...] = ()

    def said(self, offset: int) -> dict[int, str]:
        """What it shows, by the offset of the record it is about (the record reached at
        `offset`, or each it passes over)."""
        if self.follows is None:
            return {offset: f"its prev is not the digest of the record before it (@{self.last}): "
                            "a record between them is missing, or it was rewritten"}  # fmt: skip
        return {
            passed: f"the chain passes over it: the record at @{offset} follows the one at "
            f"@{self.follows}, before it, so the processor never chained onto it (another "
            "wrote it onto the head)"
            for passed in self.passed
        }


@dataclass
class Chain:
    recent: list[tuple[int, str]] = field(default_factory=list)  # (offset, digest), oldest first
    sealed_since: int | None = None  # the offset of the first sealed record read
    keyed_since: int | None = None  # of the first one sealed with a key

    def follow(self, offset: int, record: Mapping[str, Any]) -> Link | None:
        """Move the chain onto the record at `offset`; None if it is no part of it (not
        sealed) or follows the record before it."""
        digest = record.get("digest")
        if not isinstance(digest, str):
            return None
        if self.sealed_since is None:
            self.sealed_since = offset
        if self.keyed_since is None and SEALED_BY in record:
            self.keyed_since = offset
        prev = record.get("prev")
        recent = self.recent
        link = None
        if recent and prev != recent[-1][1]:
            found = next((i for i in range(len(recent) - 2, -1, -1) if recent[i][1] == prev), None)
            if found is None:  # what came before stays: a record inserted shows still
                link = Link(recent[-1][0])
            else:
                passed = tuple(o for o, _ in recent[found + 1 :])
                link = Link(recent[-1][0], recent[found][0], passed)
                del recent[found + 1 :]
        recent.append((offset, digest))
        del recent[:-WINDOW]
        return link

    def unsealed(self, offset: int) -> bool:
        """A record without a digest at `offset` comes after the partition's sealed ones."""
        return self.sealed_since is not None and offset > self.sealed_since

    def unkeyed(self, offset: int, record: Mapping[str, Any]) -> bool:
        """A sealed record at `offset` has no key, after the partition's keyed ones."""
        return (
            self.keyed_since is not None and offset > self.keyed_since and SEALED_BY not in record
        )

    def state(self) -> dict[str, Any]:
        return {"recent": self.recent, "sealed": self.sealed_since, "keyed": self.keyed_since}

    @staticmethod
    def of(state: Mapping[str, Any]) -> Chain:
        return Chain([(o, d) for o, d in state.get("recent", [])], state.get("sealed"),
                     state.get("keyed"))  # fmt: skip
