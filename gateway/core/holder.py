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

- BullMQ `deduplication` / `jobId`, sidekiq-unique-jobs `lock`, River
  `unique_opts` (StatesRule): the key is held while the job is in the
  rule's states and, with a lock time, until the lock expires; River's
  `by_period` also keys by the period bucket the job was inserted in
  (`bucket_start`, Go's `time.Truncate`). sidekiq re-takes an expired lock
  when a worker starts the job (until_executed, until_expired) and re-takes
  its until_executing lock, afresh, when the job fails into a retry.

A holder changes only through `after_transition` (job-state events), so the
rule and its state travel together in the stored entry.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any, assert_never

from gateway.core.states import ALL_STATES, TERMINAL_STATES, State
from gateway.core.times import format_rfc3339


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


class StatesKind(StrEnum):
    """Whose lock a StatesRule is, which fixes how its clock runs (see holder_for)."""

    BULLMQ = "bullmq"
    SIDEKIQ = "sidekiq"
    RIVER = "river"


class Relock(StrEnum):
    """When a sidekiq-unique-jobs lock is taken again after it was let go or expired."""

    NEVER = "never"
    # until_executed, until_expired: the worker's execute locks again if the lock expired.
    ON_START = "on_start"
    # until_executing: unlocked at start, locked afresh when the job fails into a retry.
    ON_RETRY = "on_retry"


@dataclass(frozen=True, slots=True)
class StatesRule:
    """Held while the job is in `states` and, with `lock_ms`, until `since + lock_ms`.

    `name` is the option in the dialect's words ("deduplication", "jobId",
    "until_executed", "unique_opts"), for the reasons. `period_ms`: River's
    by_period, whose bucket is `since`.
    """

    kind: StatesKind
    name: str
    states: frozenset[State]
    lock_ms: int | None = None
    period_ms: int | None = None
    relock: Relock = Relock.NEVER


HolderRule = ZizqRule | FaktoryRule | StatesRule

# Zizq's "scheduled" and "ready" statuses; OJS pending waits in the queue too.
QUEUED_STATES = frozenset({State.SCHEDULED, State.AVAILABLE, State.PENDING})
# States a job reaches only once a worker has taken it.
_TAKEN_STATES = frozenset({State.ACTIVE, State.RETRYABLE})
# Go's zero time (0001-01-01T00:00:00Z) in Unix milliseconds: time.Truncate counts from it.
GO_ZERO_TIME_MS = -62_135_596_800_000


def bucket_start(at_ms: int, period_ms: int) -> int:
    """River's ByPeriod bucket: `at_ms` rounded down to a multiple of the period since
    Go's zero time (time.Truncate), which is the Unix epoch's multiple whenever the
    period divides a day."""
    return at_ms - (at_ms - GO_ZERO_TIME_MS) % period_ms


def bucket_of(rule: HolderRule | None, now_ms: int, scheduled_at: int | None) -> int | None:
    """The period bucket a request with `rule` keys by (River's by_period), else None."""
    if isinstance(rule, StatesRule) and rule.period_ms is not None:
        return bucket_start(scheduled_at if scheduled_at is not None else now_ms, rule.period_ms)
    return None


@dataclass(slots=True, unsafe_hash=True, init=False)
class Holder:
    """A rule as held by one stored job."""

    rule: HolderRule
    # When the rule's clock starts: Faktory's later of enqueue and scheduled time.
    since: int
    # When a transition released the key for good (Zizq queued or Faktory start
    # once a worker took the job); None while no transition has.
    released_at: int | None = None

    def __init__(self, rule: HolderRule, since: int, released_at: int | None = None) -> None:
        self.rule = rule
        self.since = since
        self.released_at = released_at

    @property
    def expires_at(self) -> int | None:
        """When the rule lets go by time alone (Faktory's lock), else None."""
        match self.rule:
            case FaktoryRule(lock_ms=lock_ms):
                return self.since + lock_ms
            case StatesRule(lock_ms=lock_ms):
                return None if lock_ms is None else self.since + lock_ms
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
            case StatesRule():
                out = _states_rule_dict(self.rule)
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
            elif kind in {k.value for k in StatesKind}:
                rule = _states_rule(raw)
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
        case StatesRule(kind=StatesKind.SIDEKIQ, lock_ms=int(lock_ms)) if scheduled_at is not None:
            # sidekiq-unique-jobs' LockTTL: lock_ttl plus the whole seconds until `at`,
            # from the time the lock is taken.
            delay_s = max(0, scheduled_at // 1000 - now_ms // 1000)
            return Holder(replace(rule, lock_ms=lock_ms + delay_s * 1000), now_ms)
        case StatesRule(period_ms=int()):
            bucket = bucket_of(rule, now_ms, scheduled_at)
            assert bucket is not None
            return Holder(rule, bucket)
        case StatesRule():
            return Holder(rule, now_ms)
        case _:
            assert_never(rule)


def holds_by_rule(
    holder: Holder, state: State, now_ms: int, explain: bool = True, bucket: int | None = None
) -> tuple[bool, str]:
    """Whether the holder keeps its key in `state` at `now_ms`, and why (when `explain`;
    else the reason is "": deciding needs only the answer). `bucket`: the period bucket
    of the request asking (River's by_period), which must be the holder's."""
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
        case StatesRule():
            return _holds_by_states(holder, rule, state, now_ms, explain, bucket)
        case _:
            raise AssertionError(f"unhandled holder rule {rule!r}")


def _holds_by_states(
    holder: Holder, rule: StatesRule, state: State, now_ms: int, explain: bool, bucket: int | None
) -> tuple[bool, str]:
    lock = f"its {_SYSTEM[rule.kind]} {rule.name}" if explain else ""
    if rule.lock_ms is not None and now_ms >= holder.since + rule.lock_ms:
        return False, f"{lock} lock ({rule.lock_ms / 1000:g} s) expired" if explain else ""
    if state not in rule.states:
        return False, f"it is `{state}`, which releases {lock}" if explain else ""
    if rule.period_ms is not None and bucket is not None and bucket != holder.since:
        return False, (
            f"it is in the by_period bucket from {format_rfc3339(holder.since)}, this request's is "
            f"from {format_rfc3339(bucket)}"
            if explain else ""
        )  # fmt: skip
    if not explain:
        return True, ""
    until = "" if rule.lock_ms is None else (
        f" for {(holder.since + rule.lock_ms - now_ms) / 1000:g} s more"
    )  # fmt: skip
    period = "" if rule.period_ms is None else (
        f", in the by_period bucket from {format_rfc3339(holder.since)}"
    )  # fmt: skip
    return True, f"it is `{state}`, which {lock} holds in{until}{period}"


_SYSTEM = {StatesKind.BULLMQ: "BullMQ", StatesKind.SIDEKIQ: "sidekiq-unique-jobs",
           StatesKind.RIVER: "River"}  # fmt: skip


def _states_rule_dict(rule: StatesRule) -> dict[str, Any]:
    out: dict[str, Any] = {
        "kind": str(rule.kind),
        "name": rule.name,
        "states": [str(s) for s in ALL_STATES if s in rule.states],
    }
    if rule.lock_ms is not None:
        out["lock_ms"] = rule.lock_ms
    if rule.period_ms is not None:
        out["period_ms"] = rule.period_ms
    if rule.relock is not Relock.NEVER:
        out["relock"] = str(rule.relock)
    return out


def _states_rule(raw: Mapping[str, Any]) -> StatesRule:
    states = raw["states"]
    if not isinstance(states, list):
        raise TypeError(f"expected a list of states, got {states!r}")
    lock_ms, period_ms = raw.get("lock_ms"), raw.get("period_ms")
    return StatesRule(
        StatesKind(raw["kind"]),
        str(raw["name"]),
        frozenset(State(s) for s in states),
        None if lock_ms is None else _int(lock_ms),
        None if period_ms is None else _int(period_ms),
        Relock(raw.get("relock", Relock.NEVER)),
    )


def _let_go(rule: HolderRule) -> str:
    match rule:
        case ZizqRule():
            return (
                f"its Zizq scope `{rule.scope}` ended when a worker took it; "
                "a retry does not re-take the key"
            )
        case FaktoryRule():
            return "it started, which releases its Faktory lock (unique_until start)"
        case StatesRule():
            return f"its {_SYSTEM[rule.kind]} {rule.name} let go"
        case _:
            assert_never(rule)


def after_transition(holder: Holder, target: State, now_ms: int) -> Holder:
    """The holder once its job moved to `target`: a rule that ends when a worker
    takes the job records that, so a later retry does not re-take the key; a
    sidekiq lock taken again restarts its clock."""
    if holder.released_at is not None or target not in _TAKEN_STATES:
        return holder
    match holder.rule:
        case ZizqRule(scope=ZizqScope.QUEUED) | FaktoryRule(until=UniqueUntil.START):
            return replace(holder, released_at=now_ms)
        case StatesRule(relock=Relock.ON_RETRY) if target is State.RETRYABLE:
            return replace(holder, since=now_ms)
        case StatesRule(relock=Relock.ON_START, lock_ms=int(lock_ms)) if (
            target is State.ACTIVE and now_ms >= holder.since + lock_ms
        ):
            return replace(holder, since=now_ms)
        case ZizqRule() | FaktoryRule() | StatesRule():
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
        case StatesRule():
            # A live job may take its key again (a retry, a sidekiq relock); a finished
            # one lets go when its state does not hold, or its lock expires.
            if state not in TERMINAL_STATES:
                return None
            if state not in rule.states:
                times.append(state_changed_at)
            if rule.lock_ms is not None:
                times.append(holder.since + rule.lock_ms)
        case _:
            raise AssertionError(f"unhandled holder rule {rule!r}")
    return min(times) if times else None


def _int(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"expected int, got {value!r}")
    return value
