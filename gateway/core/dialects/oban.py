"""Oban's unique options, Elixir (`"oban"`) and Python (`"oban-py"`) semantics.

Job: `worker` (the job's type), `queue`, `args` (an object), `meta`,
`scheduled_at`, `max_attempts` (default 20, as Oban), `priority` (0 to 9),
`tags`, and `unique`: `true`, or an object of

- `period`: whole seconds. Elixir also takes `[n, "minutes"]` (second,
  minute, hour, day, week, singular or plural) and `"infinity"`, and defaults
  to 60 s; Python takes `null` and defaults to no period (unique while kept).
- `fields`: a subset of worker, queue, args, meta; default [worker, queue, args].
- `keys`: the keys of args and meta that count (missing ones are left out).
- Elixir `states` (Oban names; `executing` is OJS `active`), default all but
  cancelled and discarded; Python `group`: all (default), incomplete,
  scheduled or successful (see GROUPS).
- Elixir `timestamp`: `inserted_at` (default) or `scheduled_at`, where the
  period starts; Python always counts from the scheduled time.

`replace` (a job field beside `unique`, as in Oban, not a unique option):
{state: [fields]}: on a conflict with a job in that state, update
those fields of it (args, max_attempts, meta, priority, queue, scheduled_at,
tags, worker). A conflict otherwise returns the existing job; never an error.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from typing import Any

from gateway.core.dialects import fields as f
from gateway.core.envelope import Envelope, job_id_or_raise
from gateway.core.errors import invalid_request
from gateway.core.limits import duration_problem
from gateway.core.policy import (
    UPDATABLE_FIELDS,
    Dimension,
    Judge,
    OnConflict,
    PeriodFrom,
    UniquePolicy,
)
from gateway.core.request import Request
from gateway.core.states import ALL_STATES, State

ELIXIR = "oban"
PYTHON = "oban-py"
NAMESPACE = "oban"
DEFAULT_MAX_ATTEMPTS = 20
DEFAULT_ELIXIR_PERIOD_MS = 60_000

# Oban's job states by name; OJS `pending` has no Oban name but waits like `available`.
STATES = {
    "scheduled": State.SCHEDULED,
    "available": State.AVAILABLE,
    "executing": State.ACTIVE,
    "retryable": State.RETRYABLE,
    "completed": State.COMPLETED,
    "discarded": State.DISCARDED,
    "cancelled": State.CANCELLED,
}
_INCOMPLETE = frozenset(
    {State.SCHEDULED, State.AVAILABLE, State.PENDING, State.ACTIVE, State.RETRYABLE}
)
GROUPS = {
    "all": frozenset(ALL_STATES),
    "incomplete": _INCOMPLETE,
    "scheduled": frozenset({State.SCHEDULED}),
    "successful": _INCOMPLETE | {State.COMPLETED},
}
DEFAULT_ELIXIR_STATES = GROUPS["successful"]
_FIELDS = {"worker": Dimension.TYPE, "queue": Dimension.QUEUE, "args": Dimension.ARGS,
           "meta": Dimension.META}  # fmt: skip
_DEFAULT_FIELDS = ("worker", "queue", "args")
_UNITS_S = {"second": 1, "minute": 60, "hour": 3600, "day": 86_400, "week": 604_800}
# Oban's name of each updatable field, by its canonical name.
_REPLACEABLE = {("worker" if name == "type" else name): name for name in UPDATABLE_FIELDS}
_ELIXIR_OPTIONS = ("period", "fields", "keys", "states", "timestamp")
_PYTHON_OPTIONS = ("period", "fields", "keys", "group")


def parse_elixir(raw: Mapping[str, Any]) -> Request:
    return _parse(raw, ELIXIR)


def parse_python(raw: Mapping[str, Any]) -> Request:
    return _parse(raw, PYTHON)


def _parse(raw: Mapping[str, Any], dialect: str) -> Request:
    worker = f.name(raw, "worker", '"MyApp.Workers.Mailer"')
    queue = f.queue(raw)
    args = raw.get("args", {})
    if not isinstance(args, dict):
        raise invalid_request("args must be an object (Oban job args are a map)")
    meta = f.optional_object(raw, "meta")
    tags = raw.get("tags")
    if tags is not None:
        f.string_list(tags, "tags", '["billing"]')
    max_attempts = f.optional_int(raw, "max_attempts", 1)
    envelope = Envelope(
        raw=f.job_fields(raw, ("worker",), type=worker, args=args),
        type=worker,
        queue=queue,
        args=args,
        id=job_id_or_raise(raw.get("id")),
        meta=meta,
        scheduled_at=f.optional_time(raw, "scheduled_at"),
        max_attempts=DEFAULT_MAX_ATTEMPTS if max_attempts is None else max_attempts,
        priority=f.optional_int(raw, "priority", 0, 9),
    )
    unique = raw.get("unique")
    if unique is None or unique is False:
        if raw.get("replace") is not None:
            raise invalid_request("replace applies to unique jobs only; add unique")
        return Request(envelope, None, None, dialect)
    policy = _policy(unique, raw.get("replace"), dialect)
    return Request(envelope, policy, _key(policy, envelope), dialect, stores_job=True)


def _policy(unique: Any, replace: Any, dialect: str) -> UniquePolicy:
    if unique is True:
        unique = {}
    if not isinstance(unique, Mapping):
        raise invalid_request("unique must be true, false or an object of unique options")
    allowed = _ELIXIR_OPTIONS if dialect == ELIXIR else _PYTHON_OPTIONS
    for option in unique:
        if option == "replace":
            # Oban takes `replace` as a job option (Oban.Job.new(args, unique: ..., replace:
            # ...)), so the request carries it at the top level, beside `unique`.
            raise invalid_request(
                "replace is a job field in Oban, not a unique option: send it beside unique, "
                'e.g. {"unique": {"period": 60}, "replace": {"scheduled": ["scheduled_at"]}}'
            )
        if option not in allowed:
            raise invalid_request(
                f"unique.{option} is not an option of {dialect}; use {', '.join(allowed)}"
            )
    names = f.string_list(unique.get("fields", list(_DEFAULT_FIELDS)), "unique.fields",
                          '["worker", "args"]')  # fmt: skip
    for name in names:
        if name not in _FIELDS:
            raise invalid_request(f'unique.fields has "{name}"; use worker, queue, args, meta')
    if not names:
        raise invalid_request("unique.fields must not be empty")
    keys = _keys(unique.get("keys"), names)
    dims = tuple(d for d in Dimension if d in {_FIELDS[n] for n in names})
    if dialect == ELIXIR:
        period_ms = _elixir_period(unique.get("period", DEFAULT_ELIXIR_PERIOD_MS // 1000))
        states = _elixir_states(unique.get("states"))
        period_from = _timestamp(unique.get("timestamp"))
    else:
        period_ms = _seconds(unique.get("period"), "unique.period")
        states = _group(unique.get("group"))
        period_from = PeriodFrom.SCHEDULED_AT
    update = _replace(replace)
    return UniquePolicy(
        keys=dims,
        args_keys=keys if Dimension.ARGS in dims else None,
        meta_keys=keys if Dimension.META in dims else None,
        period_ms=period_ms,
        states=states,
        on_conflict=OnConflict.UPDATE if update else OnConflict.IGNORE,
        period_from=period_from,
        judge=Judge.NEWCOMER,
        update_fields=update,
    )


def _keys(raw: Any, names: list[str]) -> tuple[str, ...] | None:
    if raw is None:
        return None
    keys = f.string_list(raw, "unique.keys", '["url"]')
    if keys and "args" not in names and "meta" not in names:
        raise invalid_request("unique.keys picks keys of args or meta; add one to unique.fields")
    normalised = sorted({unicodedata.normalize("NFC", k) for k in keys})
    return tuple(normalised) or None  # no keys: the whole of args and meta


def _elixir_period(raw: Any) -> int | None:
    if raw == "infinity":
        return None
    if isinstance(raw, list) and len(raw) == 2 and isinstance(raw[1], str):
        amount, unit = raw
        scale = _UNITS_S.get(unit.removesuffix("s"))
        if scale is None:
            raise invalid_request(
                'unique.period unit must be second, minute, hour, day or week, e.g. [2, "minutes"]'
            )
        ms = _seconds(amount, "unique.period")
        assert ms is not None
        return _bounded(ms * scale)
    if raw is None:
        raise invalid_request('unique.period must be seconds, [n, "minutes"] or "infinity"')
    return _seconds(raw, "unique.period")


def _seconds(raw: Any, field: str) -> int | None:
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int) or raw <= 0:
        raise invalid_request(f"{field} must be a positive whole number of seconds")
    return _bounded(raw * 1000)


def _bounded(ms: int) -> int:
    problem = duration_problem(ms, "unique.period")
    if problem is not None:
        raise invalid_request(problem)
    return ms


def _elixir_states(raw: Any) -> frozenset[State]:
    if raw is None:
        return DEFAULT_ELIXIR_STATES
    names = f.string_list(raw, "unique.states", '["available", "scheduled", "executing"]')
    if not names:
        raise invalid_request("unique.states must not be empty; omit it for the default")
    return frozenset(_state(n, "unique.states") for n in names)


def _state(name: str, field: str) -> State:
    if name not in STATES:
        hint = ' (Oban calls it "executing")' if name == "active" else ""
        raise invalid_request(f'{field} has "{name}"{hint}; use {", ".join(STATES)}')
    return STATES[name]


def _group(raw: Any) -> frozenset[State]:
    if raw is None:
        return GROUPS["all"]
    if not isinstance(raw, str) or raw not in GROUPS:
        raise invalid_request(f"unique.group must be one of {', '.join(GROUPS)}")
    return GROUPS[raw]


def _timestamp(raw: Any) -> PeriodFrom:
    if raw is None or raw == "inserted_at":
        return PeriodFrom.CREATED_AT
    if raw == "scheduled_at":
        return PeriodFrom.SCHEDULED_AT
    raise invalid_request('unique.timestamp must be "inserted_at" or "scheduled_at"')


def _replace(raw: Any) -> tuple[tuple[State, tuple[str, ...]], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, Mapping) or not raw:
        raise invalid_request('replace must be an object such as {"scheduled": ["priority"]}')
    by_state: dict[State, tuple[str, ...]] = {}
    for name, field_names in raw.items():
        state = _state(name, "replace")
        listed = f.string_list(field_names, f"replace.{name}", '["max_attempts", "priority"]')
        for field in listed:
            if field not in _REPLACEABLE:
                raise invalid_request(
                    f'replace.{name} has "{field}"; use {", ".join(sorted(_REPLACEABLE))}'
                )
        chosen = {_REPLACEABLE[n] for n in listed}
        by_state[state] = tuple(n for n in UPDATABLE_FIELDS if n in chosen)
    return tuple((s, by_state[s]) for s in ALL_STATES if s in by_state and by_state[s])


def _key(policy: UniquePolicy, envelope: Envelope) -> str:
    obj: dict[str, Any] = {}
    if Dimension.TYPE in policy.keys:
        obj["type"] = envelope.type
    if Dimension.QUEUE in policy.keys:
        obj["queue"] = envelope.queue
    if Dimension.ARGS in policy.keys:
        obj["args"] = _take(envelope.args, policy.args_keys)
    if Dimension.META in policy.keys:
        obj["meta"] = _take(envelope.meta or {}, policy.meta_keys)
    return f.namespaced_key(NAMESPACE, obj, "unique")


def _take(source: Any, keys: tuple[str, ...] | None) -> Any:
    """The named keys of `source` that it has (Oban's Map.take), or all of it."""
    if keys is None:
        return source
    by_nfc = {unicodedata.normalize("NFC", k): k for k in source}
    return {k: source[by_nfc[k]] for k in keys if k in by_nfc}
