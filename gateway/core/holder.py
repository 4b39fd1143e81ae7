"""Holder rules: the terms under which a stored job keeps its key, whoever asks.

OJS and Oban let the newcomer decide (its states and period). Zizq and Faktory
let the job that holds the key keep it by its own rule, fixed when it was
accepted and stored with its entry:

- Zizq `uniqueWhile` (a scope): `queued` holds while the job is scheduled or
  ready and has never been taken by a worker (a retry does not re-take the
  key); `active` holds until the job finishes (completed, dead or cancelled);
  `exists` holds as long as the entry is retained.
- Faktory `unique_for` / `unique_until`: a lock of `lock_ms`, counted from the
  later of enqueue time and the scheduled time. `success` releases it on
  success or expiry (a retrying or dead job keeps it); `start` releases it when
  the job is first taken by a worker, for good.

A holder changes only through `after_transition` (job-state events), so the
rule and its state travel together in the stored entry.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any, assert_never

from gateway.core.states import TERMINAL_STATES, State


class ZizqScope(StrEnum):
    QUEUED = "queued"
    ACTIVE = "active"
    EXISTS = "exists"


class UniqueUntil(StrEnum):
    SUCCESS = "success"
    START = "start"


# Not frozen (see core/envelope.py): a value all the same, hashed by its fields.
@dataclass(slots=True, unsafe_hash=True)
class ZizqRule:
    scope: ZizqScope


@dataclass(slots=True, unsafe_hash=True)
class FaktoryRule:
    lock_ms: int
    until: UniqueUntil


HolderRule = ZizqRule | FaktoryRule

# Zizq's "scheduled" and "ready" statuses; OJS pending waits in the queue too.
QUEUED_STATES = frozenset({State.SCHEDULED, State.AVAILABLE, State.PENDING})
# States a job reaches only once a worker has taken it.
_TAKEN_STATES = frozenset({State.ACTIVE, State.RETRYABLE})


@dataclass(slots=True, unsafe_hash=True)
class Holder:
    """A rule as held by one stored job."""

    rule: HolderRule
    # When the rule's clock starts: Faktory's later of enqueue and scheduled time.
    since: int
    # When a transition released the key for good (Zizq queued or Faktory start
    # once a worker took the job); None while no transition has.
    released_at: int | None = None

    @property
    def expires_at(self) -> int | None:
        """When the rule lets go by time alone (Faktory's lock), else None."""
        match self.rule:
            case FaktoryRule(lock_ms=lock_ms):
                return self.since + lock_ms
            case ZizqRule():
                return None
            case _:
                assert_never(self.rule)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any]
        match self.rule:
            case ZizqRule(scope=scope):
                out = {"kind": "zizq", "scope": str(scope)}
            case FaktoryRule(lock_ms=lock_ms, until=until):
                out = {"kind": "faktory", "lock_ms": lock_ms, "until": str(until)}
            case _:
                assert_never(self.rule)
        out["since"] = self.since
        if self.released_at is not None:
            out["released_at"] = self.released_at
        return out

    @staticmethod
    def from_dict(raw: Mapping[str, Any]) -> Holder:
        """Read `to_dict` back. Raises ValueError (stored state is ours, not user input)."""
        try:
            kind = raw["kind"]
            rule: HolderRule
            if kind == "zizq":
                rule = ZizqRule(ZizqScope(raw["scope"]))
            elif kind == "faktory":
                rule = FaktoryRule(_int(raw["lock_ms"]), UniqueUntil(raw["until"]))
            else:
                raise ValueError(f"unknown holder kind {kind!r}")
            released = raw.get("released_at")
            return Holder(rule, _int(raw["since"]), None if released is None else _int(released))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"malformed holder {raw!r}: {exc!r}") from None


def holder_for(rule: HolderRule, now_ms: int, scheduled_at: int | None) -> Holder:
    """The holder a job accepted at `now_ms` (scheduled at `scheduled_at`) starts with."""
    match rule:
        case FaktoryRule():
            # A scheduled delay extends the lock: it counts from the later time.
            return Holder(rule, max(now_ms, scheduled_at or now_ms))
        case ZizqRule():
            return Holder(rule, now_ms)
        case _:
            assert_never(rule)


def holds_by_rule(
    holder: Holder, state: State, now_ms: int, explain: bool = True
) -> tuple[bool, str]:
    """Whether the holder keeps its key in `state` at `now_ms`, and why (when `explain`;
    else the reason is "": deciding needs only the answer)."""
    rule = holder.rule
    if holder.released_at is not None:
        return False, _let_go(rule) if explain else ""
    match rule:
        case ZizqRule(scope=ZizqScope.QUEUED):
            if state in QUEUED_STATES:
                return True, f"it is `{state}`, within its Zizq scope `queued`" if explain else ""
            return False, f"it is `{state}`, outside its Zizq scope `queued`" if explain else ""
        case ZizqRule(scope=ZizqScope.ACTIVE):
            if state in TERMINAL_STATES:
                return False, f"it is `{state}`, outside its Zizq scope `active`" if explain else ""
            return True, f"it is `{state}`, within its Zizq scope `active`" if explain else ""
        case ZizqRule(scope=ZizqScope.EXISTS):
            return True, (
                f"it is `{state}` and still retained, within its Zizq scope `exists`"
                if explain else ""
            )  # fmt: skip
        case FaktoryRule(until=until):
            expires = holder.since + rule.lock_ms
            if now_ms >= expires:
                return False, (
                    f"its Faktory lock (unique_for {rule.lock_ms / 1000:g} s) expired"
                    if explain else ""
                )  # fmt: skip
            if state is State.COMPLETED:
                return False, "it succeeded, which releases its Faktory lock"
            if until is UniqueUntil.START and state in _TAKEN_STATES:
                return False, _let_go(rule) if explain else ""
            return True, (
                f"it is `{state}` and its Faktory lock (unique_until {until}) holds "
                f"for {(expires - now_ms) / 1000:g} s more"
                if explain else ""
            )  # fmt: skip
        case _:
            raise AssertionError(f"unhandled holder rule {rule!r}")


def _let_go(rule: HolderRule) -> str:
    match rule:
        case ZizqRule():
            return (
                f"its Zizq scope `{rule.scope}` ended when a worker took it; "
                "a retry does not re-take the key"
            )
        case FaktoryRule():
            return "it started, which releases its Faktory lock (unique_until start)"
        case _:
            assert_never(rule)


def after_transition(holder: Holder, target: State, now_ms: int) -> Holder:
    """The holder once its job moved to `target`: a rule that ends when a worker
    takes the job records that, so a later retry does not re-take the key."""
    if holder.released_at is not None or target not in _TAKEN_STATES:
        return holder
    match holder.rule:
        case ZizqRule(scope=ZizqScope.QUEUED) | FaktoryRule(until=UniqueUntil.START):
            return replace(holder, released_at=now_ms)
        case ZizqRule() | FaktoryRule():
            return holder
        case _:
            assert_never(holder.rule)


def released_since(holder: Holder, state: State, state_changed_at: int) -> int | None:
    """From when the holder can never hold its key again, if that is known.

    Known once a transition released it, once its job is finished under a rule
    that ends there, or ahead of time by a Faktory lock's expiry. `exists`
    never lets go while retained.
    """
    rule = holder.rule
    times = [] if holder.released_at is None else [holder.released_at]
    match rule:
        case ZizqRule(scope=ZizqScope.QUEUED | ZizqScope.ACTIVE):
            if state in TERMINAL_STATES or (
                rule.scope is ZizqScope.QUEUED and state not in QUEUED_STATES
            ):
                times.append(state_changed_at)
        case ZizqRule(scope=ZizqScope.EXISTS):
            return None
        case FaktoryRule():
            times.append(holder.since + rule.lock_ms)
            if state is State.COMPLETED or (
                rule.until is UniqueUntil.START and state in _TAKEN_STATES
            ):
                times.append(state_changed_at)
        case _:
            raise AssertionError(f"unhandled holder rule {rule!r}")
    return min(times) if times else None


def _int(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"expected int, got {value!r}")
    return value
