"""River's unique options (`"river"`): `InsertOpts.UniqueOpts`.

Job: `kind` (the job's type), `args` (an object), `queue`, `priority` (1 to 4,
default 1), `max_attempts` (default 25), `scheduled_at`, `tags`, `metadata`
(the job's meta), `pending` (refused: a job inserted pending waits for an
outside update the gateway has no way to make), and `unique_opts`:

- `by_args`: true, all of args counts (its keys sorted, as River sorts them);
  or the names of the args fields tagged `river:"unique"` (dotted for a field
  of a sub-object, as River's tag paths), those present counting.
- `by_period` (whole seconds, at least 1): the key includes the start of the
  period bucket of the job's scheduled time, else its insert time: the time
  rounded down to a multiple of the period since Go's zero time
  (`time.Truncate`), as River computes it.
- `by_queue`: the queue counts.
- `by_state`: the states in which the job holds its key (River names; `running`
  is OJS `active`), default all but cancelled and discarded. River requires
  available, pending, running and scheduled. A list without retryable is
  refused: River then discards a retried job whose key another job took
  meanwhile, which the gateway does not do.
- `exclude_kind`: the kind does not count.

Without any of by_args, by_period, by_queue and by_state the job is not
unique (River's `isEmpty`; exclude_kind alone does not count). The key is
River's: kind, args, period and queue, in River's own space. The job that
holds the key decides by its own states and bucket (River's unique index is
over each row's own `unique_states`); a duplicate returns the existing job
(`unique_skipped_as_duplicate`), never an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.core.dialects import fields as f
from gateway.core.envelope import Envelope, job_id_or_raise
from gateway.core.errors import invalid_request, unsupported
from gateway.core.holder import StatesKind, StatesRule
from gateway.core.limits import duration_problem
from gateway.core.policy import Dimension, Judge, OnConflict, UniquePolicy
from gateway.core.request import Request
from gateway.core.states import State

RIVER = "river"
NAMESPACE = "river"
DEFAULT_MAX_ATTEMPTS = 25
DEFAULT_PRIORITY = 1
# River's job states by name; `running` is OJS `active`.
STATES = {
    "available": State.AVAILABLE,
    "cancelled": State.CANCELLED,
    "completed": State.COMPLETED,
    "discarded": State.DISCARDED,
    "pending": State.PENDING,
    "retryable": State.RETRYABLE,
    "running": State.ACTIVE,
    "scheduled": State.SCHEDULED,
}
DEFAULT_STATES = frozenset(STATES.values()) - {State.CANCELLED, State.DISCARDED}
REQUIRED_STATES = ("available", "pending", "running", "scheduled")
OPTIONS = ("by_args", "by_period", "by_queue", "by_state", "exclude_kind")


def parse(raw: Mapping[str, Any]) -> Request:
    kind = f.name(raw, "kind", '"sort_args"')
    args = raw.get("args", {})
    if not isinstance(args, dict):
        raise invalid_request("args must be an object (River job args encode to a JSON object)")
    tags = raw.get("tags")
    if tags is not None:
        f.string_list(tags, "tags", '["billing"]')
    if raw.get("pending") not in (None, False):
        raise unsupported(
            "pending",
            "a pending River job waits for an outside update to make it available, "
            "which the gateway has no way to make; insert it available or scheduled",
        )
    max_attempts = f.optional_int(raw, "max_attempts", 1)
    priority = f.optional_int(raw, "priority", 1, 4)
    envelope = Envelope(
        raw=f.job_fields(raw, ("kind", "metadata"), type=kind, args=args,
                         meta=raw.get("metadata")),
        type=kind,
        queue=f.queue(raw),
        args=args,
        id=job_id_or_raise(raw.get("id")),
        meta=f.optional_object(raw, "metadata"),
        scheduled_at=f.optional_time(raw, "scheduled_at"),
        max_attempts=DEFAULT_MAX_ATTEMPTS if max_attempts is None else max_attempts,
        priority=DEFAULT_PRIORITY if priority is None else priority,
        tags=tags,
    )  # fmt: skip
    opts = f.optional_object(raw, "unique_opts")
    if opts is None:
        return Request(envelope, None, None, RIVER)
    for option in opts:
        if option not in OPTIONS:
            raise invalid_request(
                f"unique_opts.{option} is not a River unique option; use {', '.join(OPTIONS)}"
            )
    by_args = _by_args(opts.get("by_args"))
    period_ms = _by_period(opts.get("by_period"))
    by_queue = _flag(opts, "by_queue")
    exclude_kind = _flag(opts, "exclude_kind")
    states = _by_state(opts.get("by_state"))
    if by_args is None and period_ms is None and not by_queue and states is None:
        return Request(envelope, None, None, RIVER)  # River's isEmpty: not unique
    rule = StatesRule(
        StatesKind.RIVER, "unique_opts", DEFAULT_STATES if states is None else states,
        period_ms=period_ms,
    )  # fmt: skip
    keys = (
        *(() if exclude_kind else (Dimension.TYPE,)),
        *((Dimension.QUEUE,) if by_queue else ()),
        *((Dimension.ARGS,) if by_args is not None else ()),
    )
    policy = UniquePolicy(
        keys=keys,
        args_keys=by_args or None,
        states=rule.states,
        on_conflict=OnConflict.IGNORE,
        judge=Judge.HOLDER,
    )
    obj: dict[str, Any] = {}
    if not exclude_kind:
        obj["kind"] = kind
    if by_args is not None:
        obj["args"] = _take(args, by_args) if by_args else args
    if period_ms is not None:
        obj["period"] = True  # the bucket itself is the holder's (holder.bucket_of)
    if by_queue:
        obj["queue"] = envelope.queue
    key = f.namespaced_key(NAMESPACE, obj, "unique_opts")
    return Request(envelope, policy, key, RIVER, holder_rule=rule)


def _flag(opts: Mapping[str, Any], name: str) -> bool:
    value = opts.get(name)
    if value is not None and not isinstance(value, bool):
        raise invalid_request(f"unique_opts.{name} must be true or false")
    return bool(value)


def _by_args(raw: Any) -> tuple[str, ...] | None:
    """None: args do not count; (): all of args; else the tagged fields' paths."""
    if raw is None or raw is False:
        return None
    if raw is True:
        return ()
    if not isinstance(raw, list):
        raise invalid_request(
            "unique_opts.by_args must be true, false or the names of the args fields tagged "
            'river:"unique", e.g. ["customer_id"]'
        )
    names = f.string_list(raw, "unique_opts.by_args", '["customer_id"]')
    if not names or any(not part for name in names for part in name.split(".")):
        raise invalid_request(
            "unique_opts.by_args must name at least one field, each a non-empty name or "
            'dotted path, e.g. ["customer.id"]; use true for all of args'
        )
    return tuple(sorted(names))


def _by_period(raw: Any) -> int | None:
    if f.none_or_zero(raw):
        return None
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 1:
        raise invalid_request(
            "unique_opts.by_period must be a whole number of seconds, at least 1 "
            "(River refuses a period under a second)"
        )
    problem = duration_problem(raw * 1000, "unique_opts.by_period")
    if problem is not None:
        raise invalid_request(problem)
    return raw * 1000


def _by_state(raw: Any) -> frozenset[State] | None:
    if raw is None:
        return None
    names = f.string_list(raw, "unique_opts.by_state", '["available", "pending", ...]')
    for name in names:
        if name not in STATES:
            hint = ' (River calls it "running")' if name == "active" else ""
            raise invalid_request(
                f'unique_opts.by_state has "{name}"{hint}; use {", ".join(STATES)}'
            )
    missing = [s for s in REQUIRED_STATES if s not in names]
    if missing:
        raise invalid_request(
            "unique_opts.by_state must contain all required states, missing: " + ", ".join(missing)
        )
    if "retryable" not in names:
        raise unsupported(
            "unique_opts.by_state without retryable",
            "River then discards a retried job whose key another job took meanwhile, "
            "which the gateway does not do; keep retryable in by_state",
        )
    return frozenset(STATES[n] for n in names)


def _take(args: Mapping[str, Any], paths: tuple[str, ...]) -> dict[str, Any]:
    """The tagged fields `args` has, at their paths (River's ExtractValues then sjson)."""
    out: dict[str, Any] = {}
    for path in paths:
        parts = path.split(".")
        value: Any = args
        for part in parts:
            if not isinstance(value, Mapping) or part not in value:
                break
            value = value[part]
        else:
            where = out
            for part in parts[:-1]:
                inner = where.get(part)
                where[part] = dict(inner) if isinstance(inner, dict) else {}
                where = where[part]
            where[parts[-1]] = value
    return out
