"""Trailing debounce (`unique.debounce`, an OJS extension, and BullMQ's
`deduplication.replace`/`.extend`): the policy's value and its form. The rule that
moves a waiting job instead of refusing a duplicate is updates.py's (`move_waiting`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway.core.errors import invalid_request, json_type, shown
from gateway.core.periods import format_period, period_or_raise
from gateway.core.states import ALL_STATES, State

_DEBOUNCE_FIELDS = ("delay", "max_wait", "replace")


# The states in which an OJS debounce moves the job holding the key: it still waits.
WAITING_STATES = frozenset({State.SCHEDULED, State.AVAILABLE})


@dataclass(frozen=True, slots=True)
class Debounce:
    """Trailing debounce: a request whose key is held by a job in `states` (a waiting one)
    moves that job's run time to the request's run time (`delay_ms` after the decision;
    None: the request's own scheduled time, else the decision time, BullMQ's `delay`),
    capped at `max_wait_ms` after the job's creation (the burst's first request), and
    with `replace` gives it the request's args and meta. `restart_lock`: a duplicate
    the holder's lock absorbs restarts that lock (BullMQ's `extend`). Empty `states`:
    the request never moves a job (BullMQ's `extend` alone)."""

    delay_ms: int | None = None
    max_wait_ms: int | None = None
    replace: bool = False
    states: frozenset[State] = WAITING_STATES
    restart_lock: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "delay": None if self.delay_ms is None else format_period(self.delay_ms),
            "delay_ms": self.delay_ms,
            "max_wait": None if self.max_wait_ms is None else format_period(self.max_wait_ms),
            "max_wait_ms": self.max_wait_ms,
            "replace": self.replace,
            "states": [str(s) for s in ALL_STATES if s in self.states],
            "restart_lock": self.restart_lock,
        }

    @staticmethod
    def from_dict(raw: object) -> Debounce:
        """Read `to_dict` back. Raises ValueError (a record's policy, checked as stored)."""
        if not isinstance(raw, Mapping):
            raise ValueError("debounce must be an object")
        delay, max_wait = raw.get("delay_ms"), raw.get("max_wait_ms")
        for value in (delay, max_wait):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise ValueError("debounce.delay_ms and .max_wait_ms must be integers")
        states = raw.get("states", [])
        if not isinstance(states, list):
            raise ValueError("debounce.states must be a list")
        return Debounce(
            delay, max_wait, raw.get("replace") is True,
            frozenset(State(s) for s in states), raw.get("restart_lock") is True,
        )  # fmt: skip


def parse_debounce(raw: object, field: str) -> Debounce | None:
    """`unique.debounce`: {"delay" (required), "max_wait", "replace"}; durations as a
    period is given (ISO 8601 of fixed length, or whole seconds)."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise invalid_request(
            f'{field} must be an object such as {{"delay": "PT5S", "max_wait": "PT1M", '
            f'"replace": true}}, not {json_type(raw)}'
        )
    for name in raw:
        if name not in _DEBOUNCE_FIELDS:
            raise invalid_request(
                f"{field}.{name} is not a debounce field; allowed fields are delay, max_wait, "
                "replace"
            )
    if raw.get("delay") is None:
        raise invalid_request(
            f'{field}.delay is required: how long after each request the job runs, e.g. "PT5S"'
        )
    delay = period_or_raise(raw["delay"], f"{field}.delay")
    max_wait = period_or_raise(raw.get("max_wait"), f"{field}.max_wait")
    assert delay is not None
    if max_wait is not None and max_wait < delay:
        raise invalid_request(
            f"{field}.max_wait ({format_period(max_wait)}) must be at least {field}.delay "
            f"({format_period(delay)}): the burst's job could never wait its delay"
        )
    replace_args = raw.get("replace", False)
    if not isinstance(replace_args, bool):
        raise invalid_request(f"{field}.replace must be true or false, not {shown(replace_args)}")
    return Debounce(delay, max_wait, replace_args)
