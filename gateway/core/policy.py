"""The canonical unique policy, and the OJS UniquePolicy validated into it.

Canonical means behaviour-equal policies are equal values: dimensions and
states in a fixed order, args_keys/meta_keys NFC-normalised and sorted, and
dropped when their dimension is not selected, the period in milliseconds.

Every dialect maps onto this value (see core/dialects); beyond OJS it adds:
- `period_from`: whether a period counts from the existing job's creation
  (OJS, Oban's default) or from its scheduled time (Oban `timestamp:
  scheduled_at`, Oban for Python);
- `judge`: who decides whether an existing job holds the key: the newcomer's
  states and period (OJS, Oban), or the holder's own rule (Zizq, Faktory;
  see holder.py);
- on_conflict `update` with `update_fields`: Oban's `replace`, which updates
  named fields of the existing job when it is in a named state;
- `bucket_start`: River's by_period, the start of the period bucket the
  request falls in (its scheduled time, else its decision time), set by the
  engine at decision time: a holder meets only a request of its own bucket;
- `debounce` (an OJS extension, `unique.debounce`, and BullMQ's
  `deduplication.replace`/`.extend`): a request whose key a waiting job holds
  moves that job's run time instead of being refused (see `Debounce`);
- `keep_last` (an OJS extension, `unique.keep_last_if_active`, and BullMQ's
  `deduplication.keepLastIfActive`): a request whose key a running job holds
  becomes the key's one pending successor (see core/successor.py).
- `concurrency` (an OJS extension, `unique.concurrency`, and sidekiq's runtime
  locks): at most that many of the key's jobs run at once (core/concurrency.py).
  A running job then holds a slot, not the key: `active` is never among the
  states, and without `states` no state holds the key (every request waits).
A dialect may leave `type` out of `keys` (Oban without `worker` in fields);
an OJS policy never does.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from gateway.core.concurrency import parse_concurrency
from gateway.core.debounce import Debounce, parse_debounce
from gateway.core.errors import (
    INVALID_REQUEST,
    GatewayError,
    Invalid,
    invalid_request,
    json_type,
    shown,
)
from gateway.core.periods import format_period, period_or_raise
from gateway.core.states import ALL_STATES, DEFAULT_UNIQUE_STATES, State


class Dimension(StrEnum):
    TYPE = "type"
    QUEUE = "queue"
    ARGS = "args"
    META = "meta"


class OnConflict(StrEnum):
    REJECT = "reject"
    REPLACE = "replace"
    REPLACE_EXCEPT_SCHEDULE = "replace_except_schedule"
    IGNORE = "ignore"
    # Not an OJS strategy: Oban's `replace` (the existing job is updated in place).
    UPDATE = "update"


class PeriodFrom(StrEnum):
    CREATED_AT = "created_at"
    SCHEDULED_AT = "scheduled_at"


class Judge(StrEnum):
    NEWCOMER = "newcomer"
    HOLDER = "holder"


# The job fields an `update` may change, by their canonical (OJS) names.
UPDATABLE_FIELDS = (
    "args", "max_attempts", "meta", "priority", "queue", "scheduled_at", "tags", "type",
)  # fmt: skip


_DIMENSION_ORDER: tuple[Dimension, ...] = tuple(Dimension)
_STATE_NAMES = frozenset(s.value for s in State)
_OJS_ON_CONFLICT = tuple(c for c in OnConflict if c is not OnConflict.UPDATE)
_ON_CONFLICT_NAMES = frozenset(c.value for c in _OJS_ON_CONFLICT)
_FIELDS = (
    "keys", "key", "args_keys", "meta_keys", "period", "states", "on_conflict", "debounce",
    "keep_last_if_active", "concurrency",
)  # fmt: skip
# As a refusal names them: `key` is the alias of `keys`.
_FIELDS_SHOWN = ", ".join(name for name in _FIELDS if name != "key")


# Not frozen (see core/envelope.py): a value all the same, hashed by its fields.
@dataclass(slots=True, unsafe_hash=True, init=False)
class UniquePolicy:
    keys: tuple[Dimension, ...] = (Dimension.TYPE,)
    args_keys: tuple[str, ...] | None = None
    meta_keys: tuple[str, ...] | None = None
    period_ms: int | None = None
    states: frozenset[State] = DEFAULT_UNIQUE_STATES
    on_conflict: OnConflict = OnConflict.REJECT
    period_from: PeriodFrom = PeriodFrom.CREATED_AT
    judge: Judge = Judge.NEWCOMER
    # For on_conflict update: per state of the existing job, the fields to update.
    update_fields: tuple[tuple[State, tuple[str, ...]], ...] = ()
    # River's by_period: the request's bucket, resolved at decision time (holder.bucket_of).
    bucket_start: int | None = None
    # Trailing debounce of a waiting holder (see Debounce); None: none.
    debounce: Debounce | None = None
    # Keep the newest request while the key's job runs, as its successor (successor.py).
    keep_last: bool = False
    # At most this many of the key's jobs run at once (core/concurrency.py); None: no limit.
    concurrency: int | None = None

    def __init__(
        self,
        keys: tuple[Dimension, ...] = (Dimension.TYPE,),
        args_keys: tuple[str, ...] | None = None,
        meta_keys: tuple[str, ...] | None = None,
        period_ms: int | None = None,
        states: frozenset[State] = DEFAULT_UNIQUE_STATES,
        on_conflict: OnConflict = OnConflict.REJECT,
        period_from: PeriodFrom = PeriodFrom.CREATED_AT,
        judge: Judge = Judge.NEWCOMER,
        update_fields: tuple[tuple[State, tuple[str, ...]], ...] = (),
        bucket_start: int | None = None,
        debounce: Debounce | None = None,
        keep_last: bool = False,
        concurrency: int | None = None,
    ) -> None:
        self.keys = keys
        self.args_keys = args_keys
        self.meta_keys = meta_keys
        self.period_ms = period_ms
        self.states = states
        self.on_conflict = on_conflict
        self.period_from = period_from
        self.judge = judge
        self.update_fields = update_fields
        self.bucket_start = bucket_start
        self.debounce = debounce
        self.keep_last = keep_last
        self.concurrency = concurrency

    def fields_to_update(self, state: State) -> tuple[str, ...]:
        return next((fields for s, fields in self.update_fields if s is state), ())

    def to_dict(self) -> dict[str, Any]:
        """The policy as applied, for the audit record; `from_dict` reads it back.

        The fields beyond OJS appear only when they differ from OJS's behaviour.
        """
        out: dict[str, Any] = {
            "keys": [str(k) for k in self.keys],
            "args_keys": None if self.args_keys is None else list(self.args_keys),
            "meta_keys": None if self.meta_keys is None else list(self.meta_keys),
            "period": None if self.period_ms is None else format_period(self.period_ms),
            "period_ms": self.period_ms,
            "states": [str(s) for s in ALL_STATES if s in self.states],
            "on_conflict": str(self.on_conflict),
        }
        if self.period_from is not PeriodFrom.CREATED_AT:
            out["period_from"] = str(self.period_from)
        if self.judge is not Judge.NEWCOMER:
            out["judge"] = str(self.judge)
        if self.update_fields:
            out["update_fields"] = {str(s): list(f) for s, f in self.update_fields}
        if self.bucket_start is not None:
            out["bucket_start"] = self.bucket_start
        if self.debounce is not None:
            out["debounce"] = self.debounce.to_dict()
        if self.keep_last:
            out["keep_last_if_active"] = True
        if self.concurrency is not None:
            out["concurrency"] = self.concurrency
        return out

    @staticmethod
    def from_dict(raw: Mapping[str, Any]) -> UniquePolicy | GatewayError:
        """Read a `to_dict` value back; `period_ms` must agree with `period`."""
        if not isinstance(raw, Mapping):
            return GatewayError(INVALID_REQUEST, "policy must be an object")
        fields = dict(raw)
        period_ms = fields.pop("period_ms", None)
        try:
            extra = _canonical_extras(fields)
            ojs_fields = {k: v for k, v in fields.items() if k not in ("on_conflict", "debounce")}
            policy = policy_or_raise(ojs_fields, "policy", ojs=False)
            on_conflict = fields.get("on_conflict", "reject")
            if on_conflict not in {c.value for c in OnConflict}:
                raise invalid_request(f"policy.on_conflict {shown(on_conflict)} is unknown")
        except Invalid as exc:
            return exc.error
        if policy.period_ms != period_ms:
            return GatewayError(
                INVALID_REQUEST,
                f"policy.period_ms ({period_ms!r}) does not match policy.period "
                f"({fields.get('period')!r})",
            )
        return replace(policy, on_conflict=OnConflict(on_conflict), **extra)


def _canonical_extras(fields: dict[str, Any]) -> dict[str, Any]:
    """Pop and read the canonical fields beyond OJS (see `to_dict`)."""
    extra: dict[str, Any] = {}
    try:
        if "period_from" in fields:
            extra["period_from"] = PeriodFrom(fields.pop("period_from"))
        if "judge" in fields:
            extra["judge"] = Judge(fields.pop("judge"))
        if "update_fields" in fields:
            raw = fields.pop("update_fields")
            if not isinstance(raw, Mapping):
                raise ValueError("update_fields must be an object")
            extra["update_fields"] = tuple(
                (State(s), tuple(str(f) for f in raw[s])) for s in ALL_STATES if s in raw
            )
        if "bucket_start" in fields:
            bucket = fields.pop("bucket_start")
            if isinstance(bucket, bool) or not isinstance(bucket, int):
                raise ValueError("bucket_start must be an integer")
            extra["bucket_start"] = bucket
        if fields.get("debounce") is not None:
            extra["debounce"] = Debounce.from_dict(fields.pop("debounce"))
        if "keep_last_if_active" in fields:
            extra["keep_last"] = fields.pop("keep_last_if_active") is True
    except ValueError as exc:
        raise invalid_request(f"policy: {exc}") from None
    return extra


def parse_policy(raw: object, field: str = "unique") -> UniquePolicy | GatewayError:
    """Validate one OJS UniquePolicy object. `field` names it in error messages."""
    try:
        return policy_or_raise(raw, field)
    except Invalid as exc:
        return exc.error


def policy_or_raise(raw: object, field: str, ojs: bool = True) -> UniquePolicy:
    """`ojs` applies OJS's own rules (type always a dimension, meta_keys required with
    meta); without it, a canonical policy a dialect produced is read as it is."""
    if not isinstance(raw, Mapping):
        raise invalid_request(
            f'{field} must be an object such as {{"keys": ["type", "args"]}}, not {json_type(raw)}'
        )
    for name in raw:
        if name not in _FIELDS:
            raise invalid_request(
                f"{field}.{name} is not a unique policy field; allowed fields are {_FIELDS_SHOWN}"
            )
    if "keys" in raw and "key" in raw:
        raise invalid_request(f"give either {field}.keys or its alias {field}.key, not both")
    keys_field = "key" if "key" in raw else "keys"

    keys = _parse_keys(raw.get(keys_field), f"{field}.{keys_field}", ojs)
    concurrency = parse_concurrency(raw.get("concurrency"), f"{field}.concurrency")
    if concurrency is not None and raw.get("debounce") is not None and raw.get("states") is None:
        raise invalid_request(
            f"{field}.debounce with {field}.concurrency needs {field}.states: without states "
            'no job holds the key, so no request joins a burst; e.g. ["scheduled", "available"]'
        )
    if concurrency is not None and raw.get("keep_last_if_active") is True:
        raise invalid_request(
            f"{field}.keep_last_if_active with {field}.concurrency: a running job holds a "
            "slot, not the key, so no request is ever kept behind it; use one of them"
        )
    args_keys = _parse_field_names(raw.get("args_keys"), f"{field}.args_keys")
    meta_keys = _parse_field_names(raw.get("meta_keys"), f"{field}.meta_keys")
    if Dimension.ARGS in keys:
        if args_keys == ():
            raise invalid_request(
                f"{field}.args_keys must not be empty; omit it to include all of args, "
                'or list the args fields that define uniqueness, e.g. ["user_id"]'
            )
    elif args_keys is not None and ojs:
        raise invalid_request(
            f'{field}.args_keys is given but {field}.{keys_field} does not contain "args"; '
            f'add "args" to {field}.{keys_field}, or drop {field}.args_keys'
        )
    else:
        args_keys = None
    if Dimension.META not in keys:
        # An empty list selects nothing either way: the OJS spec's own example sends
        # meta_keys [] without "meta", so only a list that names fields is refused.
        if meta_keys and ojs:
            raise invalid_request(
                f'{field}.meta_keys is given but {field}.{keys_field} does not contain "meta"; '
                f'add "meta" to {field}.{keys_field}, or drop {field}.meta_keys'
            )
        meta_keys = None
    elif ojs:
        if meta_keys is None:
            raise invalid_request(
                f'{field}.meta_keys is required when {field}.{keys_field} contains "meta"'
            )
        if not meta_keys:
            raise invalid_request(
                f"{field}.meta_keys must not be empty when {field}.{keys_field} contains "
                '"meta"; list the meta fields that define uniqueness, e.g. ["tenant_id"]'
            )

    return UniquePolicy(
        keys=keys,
        args_keys=args_keys,
        meta_keys=meta_keys,
        period_ms=period_or_raise(raw.get("period"), f"{field}.period"),
        states=_parse_states(raw.get("states"), f"{field}.states", concurrency is not None),
        on_conflict=_parse_on_conflict(raw.get("on_conflict"), f"{field}.on_conflict"),
        debounce=parse_debounce(raw.get("debounce"), f"{field}.debounce") if ojs else None,
        keep_last=_flag(raw.get("keep_last_if_active"), f"{field}.keep_last_if_active"),
        concurrency=concurrency,
    )


def _flag(raw: object, field: str) -> bool:
    if raw is None:
        return False
    if not isinstance(raw, bool):
        raise invalid_request(f"{field} must be true or false, not {shown(raw)}")
    return raw


def _parse_keys(raw: object, field: str, always_type: bool = True) -> tuple[Dimension, ...]:
    if raw is None:
        return (Dimension.TYPE,)
    names = _string_list(raw, field, 'e.g. ["type", "args"]')
    allowed = ", ".join(f'"{d}"' for d in _DIMENSION_ORDER)
    for name in names:
        if name not in _DIMENSION_ORDER:
            raise invalid_request(f'{field} contains unknown dimension "{name}"; use {allowed}')
    # type is always part of an OJS key, so jobs of different types never collide.
    chosen = set(names) | ({Dimension.TYPE} if always_type else set())
    return tuple(d for d in _DIMENSION_ORDER if d in chosen)


def _parse_field_names(raw: object, field: str) -> tuple[str, ...] | None:
    if raw is None:
        return None
    names = _string_list(raw, field, 'e.g. ["user_id"]')
    normalised = [unicodedata.normalize("NFC", n) for n in names]
    if len(set(normalised)) != len(normalised):
        raise invalid_request(f"{field} lists names that are equal after Unicode NFC normalisation")
    return tuple(sorted(normalised))


def _parse_states(raw: object, field: str, slots: bool = False) -> frozenset[State]:
    """`slots`: the policy has a concurrency limit, under which a running job holds a slot,
    not the key: no state by default (every request waits), and never `active`."""
    if raw is None:
        return frozenset() if slots else DEFAULT_UNIQUE_STATES
    names = _string_list(raw, field, 'e.g. ["available", "active"]')
    allowed = ", ".join(ALL_STATES)
    for name in names:
        if name not in _STATE_NAMES:
            raise invalid_request(f'{field} contains unknown state "{name}"; use {allowed}')
    if slots and State.ACTIVE in names:
        parent = field.rpartition(".")[0]
        raise invalid_request(
            f'{field} must not list "active" with {parent}.concurrency: a running job holds '
            f"one of the key's slots, not the key; list the waiting states to deduplicate, "
            "or omit states to let every job wait"
        )
    if not names and not slots:
        raise invalid_request(
            f"{field} must not be empty: no existing job could ever count as a duplicate; "
            "omit it for the default states"
        )
    return frozenset(State(n) for n in names)


def _parse_on_conflict(raw: object, field: str) -> OnConflict:
    if raw is None:
        return OnConflict.REJECT
    allowed = ", ".join(f'"{c}"' for c in _OJS_ON_CONFLICT)
    if not isinstance(raw, str) or raw not in _ON_CONFLICT_NAMES:
        raise invalid_request(f"{field} must be one of {allowed}, not {shown(raw)}")
    return OnConflict(raw)


def _string_list(raw: object, field: str, example: str) -> list[str]:
    if not isinstance(raw, list) or not all(isinstance(x, str) for x in raw):
        raise invalid_request(f"{field} must be an array of strings ({example}), not {shown(raw)}")
    seen: set[str] = set()
    for name in raw:
        if name in seen:
            raise invalid_request(f'{field} lists "{name}" twice; list each item once')
        seen.add(name)
    return list(raw)
