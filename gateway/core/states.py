"""The eight OJS job states."""

from __future__ import annotations

from enum import StrEnum


class State(StrEnum):
    SCHEDULED = "scheduled"
    AVAILABLE = "available"
    PENDING = "pending"
    ACTIVE = "active"
    COMPLETED = "completed"
    RETRYABLE = "retryable"
    CANCELLED = "cancelled"
    DISCARDED = "discarded"


# Declaration order is the canonical order of states in a serialised policy.
ALL_STATES: tuple[State, ...] = tuple(State)
TERMINAL_STATES = frozenset({State.COMPLETED, State.CANCELLED, State.DISCARDED})
DEFAULT_UNIQUE_STATES = frozenset(
    {State.AVAILABLE, State.ACTIVE, State.SCHEDULED, State.RETRYABLE, State.PENDING}
)
