"""sidekiq-unique-jobs' options (`"sidekiq"`): the Sidekiq job hash.

Job: `class` (the job's type), `args` (an array), `queue`, `at` (epoch seconds:
the scheduled time), `retry` (true: 25 retries, the default; false: none; or a
number of retries; max_attempts = retries + 1), `jid` and other fields travel
with the job. Only with `lock` is the job unique, by its digest: `class`,
`queue` and `lock_args` under `lock_prefix` (default "uniquejobs"), less the
queue with `unique_across_queues` and the class with `unique_across_workers`.

- `lock` (the holder's rule; aliases as sidekiq-unique-jobs' own):
  `until_executed` (until_completed, until_performed, until_processed,
  until_successfully_completed) holds from the push until the job succeeds,
  a retrying job keeping it; `until_executing` (while_enqueued) holds until a
  worker starts the job and again, afresh, when it fails into a retry;
  `until_expired` holds for lock_ttl whatever the job does (lock_ttl is
  required). A dead or deleted job lets go of every lock (the death handler,
  the API's delete).
- Runtime locks, per-key concurrency (core/concurrency.py): `while_executing`
  (around_perform, while_busy, while_working) lets `lock_limit` jobs of the
  digest run at once and any number wait; the gem suffixes its digest with
  `:RUN`, so its key is apart (`run` in the digest). `until_and_while_executing`
  holds the digest as until_executing does while the job waits and lets one
  job of it run at once. A job that finds no free slot waits in its queue and
  runs when one frees, whatever the server strategy says (the gem drops it
  under `log`, errs it into a retry under `raise`, pushes it again under
  `reschedule`); `reject` (the dead set), `replace` and `while_executing_reject`
  are refused.
- `lock_ttl` (seconds; 0 or none: no expiry; `lock_expiration` is its old
  name): the lock expires lock_ttl plus the whole seconds until `at` after the
  push; an expired until_executed or until_expired lock is taken again, afresh,
  when a worker starts the job.
- `lock_args`: the arguments that count, as `lock_args_method` returned them
  (default: all of args). `lock_args_method` itself is Ruby code, which the
  gateway cannot run: send its result as lock_args.
- `lock_timeout`: 0 or none (decide at once); waiting for a lock is not
  supported yet (sidekiq-unique-jobs 9 does not wait either).
- `lock_limit`: 1 or none, but for while_executing (the runs at once); more
  jobs waiting with one digest is not supported yet.
- `on_conflict` (or `{client, server}`: the client's applies at the push, the
  server's only to runtime locks): `log` (the default) drops the duplicate,
  answered with a null jid and the existing job; `raise` refuses it with
  `SidekiqUniqueJobs::Conflict`; `replace` with `until_executing` deletes the
  waiting job and pushes the new one (OJS replace: the holder of such a lock is
  always waiting); `reject` answers as `log` does and sends the duplicate to the
  dead set: a job of its own, discarded (a dead letter job); `reschedule` answers
  as `log` does and pushes the duplicate again `schedule_in` seconds later
  (default 5), as a job whose uniqueness is decided again then: it takes the lock
  if it is free, else waits `schedule_in` more (core/kept_duplicates.py). Not
  supported: `replace` with other locks (it deletes only a waiting job and drops
  the newcomer when the holder runs or has run).
- `schedule_in` (seconds, 1 or more; the gem's sidekiq option): the wait of a
  rescheduled duplicate.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.core.concurrency import MAX_CONCURRENCY
from gateway.core.dialects import fields as f
from gateway.core.envelope import Envelope, job_id_or_raise
from gateway.core.errors import invalid_request, unsupported
from gateway.core.holder import Relock, StatesKind, StatesRule
from gateway.core.limits import duration_problem, instant_problem
from gateway.core.policy import Dimension, Judge, OnConflict, UniquePolicy
from gateway.core.request import Fate, KeepDuplicate, Request
from gateway.core.states import State

SIDEKIQ = "sidekiq"
NAMESPACE = "sidekiq"
CONFLICT = "SidekiqUniqueJobs::Conflict"
DEFAULT_RETRIES = 25
DEFAULT_PREFIX = "uniquejobs"
DEFAULT_SCHEDULE_IN_MS = 5_000  # the gem's OnConflict::Reschedule#schedule_in
_WAITING = frozenset({State.SCHEDULED, State.AVAILABLE, State.PENDING, State.RETRYABLE})
# The states each lock holds in, and when it is taken again.
LOCKS = {
    "until_executed": (_WAITING | {State.ACTIVE}, Relock.ON_START),
    "until_executing": (_WAITING, Relock.ON_RETRY),
    "until_expired": (_WAITING | {State.ACTIVE, State.COMPLETED}, Relock.ON_START),
}
ALIASES = {
    "until_completed": "until_executed",
    "until_performed": "until_executed",
    "until_processed": "until_executed",
    "until_successfully_completed": "until_executed",
    "while_enqueued": "until_executing",
}
WHILE_EXECUTING = "while_executing"
BOTH = "until_and_while_executing"
RUNTIME_ALIASES = {"around_perform": WHILE_EXECUTING, "while_busy": WHILE_EXECUTING,
                   "while_working": WHILE_EXECUTING}  # fmt: skip
REFUSED_LOCKS = ("while_executing_reject",)
STRATEGIES = ("log", "raise", "reject", "replace", "reschedule")


def parse(raw: Mapping[str, Any]) -> Request:
    job_class = f.name(raw, "class", '"HardWorker"')
    args = raw.get("args", [])
    if not isinstance(args, list):
        raise invalid_request("args must be an array (Sidekiq job arguments)")
    envelope = Envelope(
        raw=f.job_fields(raw, ("class", "at"), type=job_class),
        type=job_class,
        queue=f.queue(raw),
        args=args,
        id=job_id_or_raise(raw.get("id")),
        scheduled_at=_at(raw.get("at")),
        max_attempts=_retries(raw.get("retry")) + 1,
    )
    name = raw.get("lock")
    if name is None or name is False:
        return Request(envelope, None, None, SIDEKIQ)
    lock = _lock(name)
    ttl_ms = _ttl(raw)
    if lock == "until_expired" and ttl_ms is None:
        raise invalid_request("lock until_expired needs lock_ttl: the seconds the lock lasts")
    limit = _no_wait(raw, lock)
    across_queues = _flag(raw, "unique_across_queues")
    across_workers = _flag(raw, "unique_across_workers")
    dimensions = ((Dimension.TYPE, across_workers), (Dimension.QUEUE, across_queues),
                  (Dimension.ARGS, False))  # fmt: skip
    keys = tuple(d for d, left_out in dimensions if not left_out)
    digest: dict[str, Any] = {"prefix": _prefix(raw), "lock_args": _lock_args(raw, args)}
    if not across_workers:
        digest["class"] = job_class
    if not across_queues:
        digest["queue"] = envelope.queue
    if lock == WHILE_EXECUTING:
        _server_strategy(raw.get("on_conflict"), lock)
        _schedule_in(raw.get("schedule_in"))  # checked though unused: nothing waits to push
        if ttl_ms is not None:
            raise unsupported(
                "lock_ttl with lock while_executing",
                "a running job holds its slot until it ends (its lease frees the slot of a "
                "job whose worker died); the slot does not expire while the job runs",
            )
        digest["run"] = True  # the gem's digest + ":RUN": a lock of its own
        # Nothing holds the key at the push: every job is accepted and waits for a slot.
        policy = UniquePolicy(keys=keys, states=frozenset(), on_conflict=OnConflict.IGNORE,
                              concurrency=limit)  # fmt: skip
        key = f.namespaced_key(NAMESPACE, digest, "lock_args")
        return Request(envelope, policy, key, SIDEKIQ, duplicate_code=CONFLICT)
    if lock == BOTH:
        _server_strategy(raw.get("on_conflict"), lock)
    until = "until_executing" if lock == BOTH else lock
    on_conflict = _on_conflict(raw.get("on_conflict"), until)
    states, relock = LOCKS[until]
    rule = StatesRule(StatesKind.SIDEKIQ, lock, states, lock_ms=ttl_ms, relock=relock)
    policy = UniquePolicy(keys=keys, states=states, on_conflict=on_conflict, judge=Judge.HOLDER,
                          concurrency=limit)  # fmt: skip
    key = f.namespaced_key(NAMESPACE, digest, "lock_args")
    return Request(envelope, policy, key, SIDEKIQ, holder_rule=rule, duplicate_code=CONFLICT,
                   keep_duplicate=_kept(raw))  # fmt: skip


def _at(raw: Any) -> int | None:
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise invalid_request("at must be a number: the epoch seconds the job is scheduled for")
    ms = round(raw * 1000) if abs(raw) < 1e15 else -1
    problem = instant_problem(ms, "at")
    if problem is not None:
        raise invalid_request(problem)
    return ms


def _retries(raw: Any) -> int:
    if raw is None or raw is True:
        return DEFAULT_RETRIES
    if raw is False:
        return 0
    if isinstance(raw, int) and 0 <= raw <= 10_000:
        return raw
    raise invalid_request("retry must be true, false or a number of retries from 0 to 10000")


def _lock(raw: Any) -> str:
    if not isinstance(raw, str):
        raise invalid_request('lock must be a lock type, e.g. "until_executed"')
    if raw in REFUSED_LOCKS:
        raise unsupported(
            f"lock {raw}",
            "the gem sends a job that finds its digest running to the dead set; here it "
            "waits for a free slot (use while_executing)",
        )
    lock = ALIASES.get(raw) or RUNTIME_ALIASES.get(raw, raw)
    if lock not in (*LOCKS, WHILE_EXECUTING, BOTH):
        names = ", ".join([*LOCKS, *ALIASES, WHILE_EXECUTING, *RUNTIME_ALIASES, BOTH,
                           *REFUSED_LOCKS])  # fmt: skip
        raise invalid_request(f'lock "{raw}" has no implementation; use one of {names}')
    return lock


def _ttl(raw: Mapping[str, Any]) -> int | None:
    field = "lock_ttl" if raw.get("lock_ttl") is not None else "lock_expiration"
    value = raw.get(field)
    if f.none_or_zero(value):
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise invalid_request(f"{field} must be a whole number of seconds; 0 or none: no expiry")
    problem = duration_problem(value * 1000, field)
    if problem is not None:
        raise invalid_request(problem)
    return value * 1000


def _no_wait(raw: Mapping[str, Any], lock: str) -> int | None:
    """Check lock_timeout, lock_limit and lock_args_method; the runtime lock's limit (the jobs
    that run at once: lock_limit for while_executing, 1 for until_and_while_executing)."""
    timeout, limit = raw.get("lock_timeout"), raw.get("lock_limit")
    if not f.none_or_zero(timeout):
        if isinstance(timeout, bool) or not isinstance(timeout, int) or timeout < 0:
            raise invalid_request("lock_timeout must be a whole number of seconds, 0 or more")
        raise unsupported(
            "lock_timeout above 0",
            "the gateway decides a push at once, as with lock_timeout 0, and never waits "
            "for a lock (sidekiq-unique-jobs 9 ignores the wait as well)",
        )
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise invalid_request("lock_limit must be a whole number, at least 1")
        if limit > MAX_CONCURRENCY:
            raise invalid_request(f"lock_limit must be at most {MAX_CONCURRENCY}")
    if limit is not None and limit != 1 and lock != WHILE_EXECUTING:
        raise unsupported(
            "lock_limit above 1" + (f" with lock {lock}" if lock == BOTH else ""),
            "more than one job waiting with one digest is not something the gateway does; "
            "lock_limit counts the jobs that run at once with lock while_executing only",
        )
    method = raw.get("lock_args_method")
    if method is not None and method is not False:
        raise invalid_request(
            "lock_args_method is Ruby code the gateway cannot run; send what it returns as "
            "lock_args, e.g. [42]"
        )
    if lock == WHILE_EXECUTING:
        return limit or 1
    return 1 if lock == BOTH else None


def _on_conflict(raw: Any, lock: str) -> OnConflict:
    client = raw
    if isinstance(raw, Mapping):
        for side in raw:
            if side not in ("client", "server"):
                raise invalid_request(f'on_conflict.{side}: use "client" and "server"')
        _strategy(raw.get("server"), "on_conflict.server")
        client = raw.get("client")
    name = _strategy(client, "on_conflict" if client is raw else "on_conflict.client")
    match name:
        case "raise":
            return OnConflict.REJECT
        case "replace" if lock == "until_executing":
            return OnConflict.REPLACE
        case "replace":
            raise unsupported(
                f"on_conflict replace with lock {lock}",
                "sidekiq-unique-jobs deletes the job holding the lock only while it waits and "
                "drops the newcomer when it runs or has run; the gateway would cancel a "
                "running job (replace works with until_executing)",
            )
        case _:  # log; reject and reschedule answer as log does and keep the duplicate
            return OnConflict.IGNORE


def _kept(raw: Mapping[str, Any]) -> KeepDuplicate | None:
    """The client strategy's keeping of a duplicate: reject (dead), reschedule, or none."""
    on_conflict = raw.get("on_conflict")
    client = on_conflict.get("client") if isinstance(on_conflict, Mapping) else on_conflict
    delay_ms = _schedule_in(raw.get("schedule_in"))
    if client == "reject":
        return KeepDuplicate(Fate.DEAD)
    if client == "reschedule":
        return KeepDuplicate(Fate.RESCHEDULE, delay_ms)
    return None


def _schedule_in(raw: Any) -> int:
    if raw is None:
        return DEFAULT_SCHEDULE_IN_MS
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not 1 <= raw <= 86_400:
        raise invalid_request(
            "schedule_in must be a number of seconds from 1 to 86400: the wait of a duplicate "
            "rescheduled under on_conflict reschedule"
        )
    return round(raw * 1000)


def _server_strategy(raw: Any, lock: str) -> None:
    """A runtime lock's conflict is at the run: the server's strategy (the whole of a plain
    `on_conflict`). The job waits for a slot under log, raise and reschedule alike."""
    field = "on_conflict.server" if isinstance(raw, Mapping) else "on_conflict"
    name = _strategy(raw.get("server") if isinstance(raw, Mapping) else raw, field)
    if name in ("reject", "replace"):
        raise unsupported(
            f"{field} {name} with lock {lock}",
            "at the run, the gem would send the job that finds its digest running to the "
            "dead set, or replace it; here a job waits in its queue for a free slot (use "
            "log, raise or reschedule as the server's strategy, which all wait here; "
            "on_conflict.client may still be reject)",
        )


def _strategy(raw: Any, field: str) -> str | None:
    if raw is None:
        return None
    if not isinstance(raw, str) or raw not in STRATEGIES:
        raise invalid_request(f"{field} must be one of {', '.join(STRATEGIES)}")
    return raw


def _flag(raw: Mapping[str, Any], name: str) -> bool:
    value = raw.get(name)
    if value is not None and not isinstance(value, bool):
        raise invalid_request(f"{name} must be true or false")
    return bool(value)


def _prefix(raw: Mapping[str, Any]) -> str:
    value = raw.get("lock_prefix")
    if value is None:
        return DEFAULT_PREFIX
    if not isinstance(value, str) or not value:
        raise invalid_request('lock_prefix must be a non-empty string, e.g. "uniquejobs"')
    return value


def _lock_args(raw: Mapping[str, Any], args: list[Any]) -> list[Any]:
    value = raw.get("lock_args")
    if value is None:
        return args
    if not isinstance(value, list):
        raise invalid_request("lock_args must be an array: the arguments that count")
    return value
