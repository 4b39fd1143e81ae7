"""What the processor stores per key: one entry per job that held or holds the key.

Several entries coexist under one key (a completed job and a newer available
one, say); each request's states and period decide which of them count.

Pruning bound. An entry is dropped only when no valid request could match it:
- non-terminal entries are live and always kept;
- a terminal entry is kept for `retention_ms` after it became terminal
  (default 7 days), so a request listing completed/cancelled/discarded in its
  states sees terminal jobs for that long and no longer, whatever its period;
- of the terminal entries in one state, only the newest-created is kept: a
  request that matches an older one (state listed, period not elapsed since
  its created_at) matches the newer one as well, so the older adds nothing.
Hence a key holds at most its live jobs plus three terminal entries.
Entries with a holder rule (dialects) are exempt from the last rule, since
their own rule may keep them holding the key differently.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import orjson

from gateway.core.envelope import DEFAULT_MAX_ATTEMPTS
from gateway.core.states import TERMINAL_STATES, State

DEFAULT_RETENTION_MS = 7 * 86_400_000


@dataclass(frozen=True, slots=True)
class Entry:
    job_id: str
    state: State
    created_at: int
    state_changed_at: int
    type: str
    queue: str
    scheduled_at: int | None = None
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    # The rule under which this job holds its key when its dialect has one
    # (Zizq's scope, Faktory's TTL); None for OJS, where only the newcomer's
    # policy decides.
    holder: Mapping[str, Any] | None = None

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    def moved_to(self, state: State, at_ms: int, scheduled_at: int | None = None) -> Entry:
        return replace(
            self,
            state=state,
            state_changed_at=at_ms,
            scheduled_at=self.scheduled_at if scheduled_at is None else scheduled_at,
        )

    def to_dict(self) -> dict[str, Any]:
        """A compact JSON-able form; absent optional fields are omitted."""
        out: dict[str, Any] = {
            "id": self.job_id,
            "state": str(self.state),
            "created_at": self.created_at,
            "changed_at": self.state_changed_at,
            "type": self.type,
            "queue": self.queue,
            "max_attempts": self.max_attempts,
        }
        if self.scheduled_at is not None:
            out["scheduled_at"] = self.scheduled_at
        if self.holder is not None:
            out["holder"] = dict(self.holder)
        return out

    @staticmethod
    def from_dict(raw: Mapping[str, Any]) -> Entry:
        """Read `to_dict` output back. Raises ValueError: stored state is ours, not user input."""
        try:
            return Entry(
                job_id=_typed(raw["id"], str),
                state=State(raw["state"]),
                created_at=_typed(raw["created_at"], int),
                state_changed_at=_typed(raw["changed_at"], int),
                type=_typed(raw["type"], str),
                queue=_typed(raw["queue"], str),
                scheduled_at=_optional(raw.get("scheduled_at"), int),
                max_attempts=_typed(raw.get("max_attempts", DEFAULT_MAX_ATTEMPTS), int),
                holder=_optional(raw.get("holder"), dict),
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"malformed stored entry {raw!r}: {exc!r}") from None


def effective_state(entry: Entry, now_ms: int) -> State:
    """A scheduled job whose time has come counts as available."""
    if (
        entry.state is State.SCHEDULED
        and entry.scheduled_at is not None
        and entry.scheduled_at <= now_ms
    ):
        return State.AVAILABLE
    return entry.state


def prune(
    entries: Iterable[Entry], now_ms: int, retention_ms: int = DEFAULT_RETENTION_MS
) -> tuple[Entry, ...]:
    """The entries worth keeping (see the module docstring), in their original order."""
    kept = [e for e in entries if not e.terminal or e.state_changed_at + retention_ms > now_ms]
    newest: dict[State, Entry] = {}
    for entry in kept:
        if entry.terminal and entry.holder is None:
            best = newest.get(entry.state)
            if best is None or entry.created_at >= best.created_at:
                newest[entry.state] = entry
    return tuple(e for e in kept if not e.terminal or e.holder is not None or newest[e.state] is e)


def expires_at(entries: Iterable[Entry], retention_ms: int = DEFAULT_RETENTION_MS) -> int | None:
    """When `prune` will have dropped every entry of a key, or None while one never expires.

    Live entries never expire; a key of terminal entries only is gone once the
    last of them passed its retention. The processor hands this time to the
    state store, which deletes the key then (a changelog tombstone) even if no
    request or event touches it again, so state does not grow with history.
    """
    due: int | None = None
    for entry in entries:
        if not entry.terminal:
            return None
        expiry = entry.state_changed_at + retention_ms
        due = expiry if due is None else max(due, expiry)
    return due


def dump_entries(entries: Iterable[Entry]) -> bytes:
    return orjson.dumps([e.to_dict() for e in entries])


def load_entries(data: bytes | None) -> tuple[Entry, ...]:
    """Entries from `dump_entries` bytes; None (no stored value) is no entries."""
    if not data:
        return ()
    return tuple(Entry.from_dict(item) for item in orjson.loads(data))


def _typed(value: Any, kind: type) -> Any:
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise TypeError(f"expected {kind.__name__}, got {value!r}")
    return value


def _optional(value: Any, kind: type) -> Any:
    return None if value is None else _typed(value, kind)
