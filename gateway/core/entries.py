"""What the processor stores per key: one entry per job that held or holds the key.

Several entries coexist under one key (a completed job and a newer available
one, say); each request's states and period decide which of them count.

Pruning bound. An entry is dropped only when no valid request could match it
and its job's lifecycle no longer needs it (see `entry_expires_at`):
- an entry without a holder rule (OJS, Oban) that is live is always kept;
- one that is terminal is kept for `retention_ms` after it became terminal
  (default 7 days), so a request listing completed/cancelled/discarded in its
  states sees terminal jobs for that long and no longer, whatever its period;
- of those terminal entries in one state, only the newest-created is kept: a
  request that matches an older one (state listed, period not elapsed since
  its created_at or scheduled time) matches the newer one as well;
- an entry with a holder rule (Zizq, Faktory) matches only while its rule
  holds (holder.py). Once the rule has let go for good (a Faktory lock that
  expired, a job that finished or left its Zizq scope), a terminal entry is
  dropped at once and a live one `retention_ms` later, so job events about a
  running job still find it for that long and a key whose only holder expired
  is eventually deleted. A Zizq `exists` entry is kept as a terminal one is.
Hence a key holds at most its live jobs, three terminal entries without a
holder rule, and the holder entries whose rules may still hold.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.core.envelope import DEFAULT_MAX_ATTEMPTS
from gateway.core.holder import Holder, after_transition, released_since
from gateway.core.states import TERMINAL_STATES, State

DEFAULT_RETENTION_MS = 7 * 86_400_000


# Not frozen: built for every record, and a frozen dataclass sets each field through
# object.__setattr__ (seven times the cost). Treated as a value all the same: never assigned.
@dataclass(slots=True, init=False)
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
    # (Zizq's scope, Faktory's lock); None for OJS and Oban, where only the
    # newcomer's policy decides.
    holder: Holder | None = None
    # The job as published, kept where a conflict may update it (Oban's replace).
    job: Mapping[str, Any] | None = None
    # A pending successor, kept while the key's job runs (successor.py), and its run time
    # counted from its release when its request gave a relative one.
    successor: bool = False
    delay_ms: int | None = None

    def __init__(
        self,
        job_id: str,
        state: State,
        created_at: int,
        state_changed_at: int,
        type: str,
        queue: str,
        scheduled_at: int | None = None,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        holder: Holder | None = None,
        job: Mapping[str, Any] | None = None,
        successor: bool = False,
        delay_ms: int | None = None,
    ) -> None:
        self.job_id = job_id
        self.state = state
        self.created_at = created_at
        self.state_changed_at = state_changed_at
        self.type = type
        self.queue = queue
        self.scheduled_at = scheduled_at
        self.max_attempts = max_attempts
        self.holder = holder
        self.job = job
        self.successor = successor
        self.delay_ms = delay_ms

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    def with_job(self, job: Mapping[str, Any]) -> Entry:
        """The entry with its job as published: dataclasses.replace without its cost."""
        return Entry(
            self.job_id, self.state, self.created_at, self.state_changed_at, self.type,
            self.queue, self.scheduled_at, self.max_attempts, self.holder, job, self.successor,
            self.delay_ms,
        )  # fmt: skip

    def moved_to(self, state: State, at_ms: int, scheduled_at: int | None = None) -> Entry:
        """The entry after a transition; a holder rule records what the move means to it."""
        return Entry(
            self.job_id, state, self.created_at, at_ms, self.type, self.queue,
            self.scheduled_at if scheduled_at is None else scheduled_at, self.max_attempts,
            None if self.holder is None else after_transition(self.holder, state, at_ms),
            self.job, self.successor, self.delay_ms,
        )  # fmt: skip

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
            out["holder"] = self.holder.to_dict()
        if self.job is not None:
            out["job"] = dict(self.job)
        if self.successor:
            out["successor"] = True
        if self.delay_ms is not None:
            out["delay_ms"] = self.delay_ms
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
                holder=_holder(raw.get("holder")),
                job=_optional(raw.get("job"), dict),
                successor=raw.get("successor") is True,
                delay_ms=_optional(raw.get("delay_ms"), int),
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


def entry_expires_at(entry: Entry, retention_ms: int = DEFAULT_RETENTION_MS) -> int | None:
    """From when the entry is no longer needed (see the module docstring); None: not yet known."""
    if entry.holder is None:
        return entry.state_changed_at + retention_ms if entry.terminal else None
    released = released_since(entry.holder, entry.state, entry.state_changed_at)
    if entry.terminal:
        return entry.state_changed_at + retention_ms if released is None else released
    return None if released is None else released + retention_ms


def prune(
    entries: Iterable[Entry], now_ms: int, retention_ms: int = DEFAULT_RETENTION_MS
) -> tuple[Entry, ...]:
    """The entries worth keeping (see the module docstring), in their original order."""
    kept = [
        e for e in entries if (until := entry_expires_at(e, retention_ms)) is None or until > now_ms
    ]
    newest: dict[State, Entry] = {}
    for entry in kept:
        if entry.terminal and entry.holder is None:
            best = newest.get(entry.state)
            if best is None or entry.created_at >= best.created_at:
                newest[entry.state] = entry
    return tuple(e for e in kept if not e.terminal or e.holder is not None or newest[e.state] is e)


def expires_at(entries: Iterable[Entry], retention_ms: int = DEFAULT_RETENTION_MS) -> int | None:
    """When `prune` will have dropped every entry of a key, or None while one never expires.

    Each entry is gone at `entry_expires_at`: a live entry without a holder rule
    never, a terminal one at the end of its retention, a holder entry once its
    rule let go (see the module docstring). The processor hands this time to
    the state store, which deletes the key then (a changelog tombstone) even if
    no request or event touches it again, so state does not grow with history.
    """
    due: int | None = None
    for entry in entries:
        expiry = entry_expires_at(entry, retention_ms)
        if expiry is None:
            return None
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


def _holder(value: Any) -> Holder | None:
    # Entries stored before holder rules existed have none.
    return None if value is None else Holder.from_dict(_typed(value, dict))


def _optional(value: Any, kind: type) -> Any:
    return None if value is None else _typed(value, kind)
