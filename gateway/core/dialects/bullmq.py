"""BullMQ's unique options (`"bullmq"`): `Queue.add(name, data, opts)`.

Job: `queue` (the Queue's name), `name` (the job's type), `data` (an object or
array; the job's args) and `opts`: `delay` (ms from the decision; a scheduled
job), `priority` (0 to 2^21 - 1), `attempts` (default 1: max_attempts), and
the two ways BullMQ keeps a job single, each within the queue:

- `jobId`: a job with that id is never added twice while BullMQ still has it
  (all states but removed; `removeOnComplete: true` / `removeOnFail: true`
  remove it when it completes / finally fails). A duplicate returns the
  existing job.
- `deduplication: {id, ttl}`: Simple mode (no ttl) holds the id until the job
  completes or finally fails (a retrying job keeps it) or is removed; Throttle
  mode (`ttl` ms) holds it for ttl from the add, whatever the job does,
  unless it is removed. A duplicate is ignored and returns the existing job.

The job that holds the id decides (BullMQ's Redis key belongs to the first
job), so a request's own ttl never shortens or lengthens another job's.
Debounce mode maps onto the core's debounce (debounce.Debounce), after BullMQ's
`deduplicateJob` script: `deduplication.replace` moves a holder that is still
delayed (scheduled) to the request's delay from now and gives it the request's
data (updated, where BullMQ removes the delayed job and adds the new one); a
holder that no longer waits is a duplicate as before. `deduplication.extend`
restarts the holder's ttl when a replace moves it, and, without replace,
whenever the holder absorbs a duplicate (BullMQ's sliding throttle).
`deduplication.keepLastIfActive` maps onto the core's successor rule
(core/successor.py): a duplicate while the holder is active is kept as its
pending successor, the newest one winning, and enqueued when the holder
finishes; the ttl is ignored then, as BullMQ ignores it.
Refused as not supported yet: `jobId` with `deduplication` (two keys at once), and with `jobId` a
`removeOnComplete`/`removeOnFail` that keeps jobs by count or age. BullMQ's
own refusals are kept: `debounce` (removed in BullMQ), `deduplication` with
`parent`, integer or `:` job ids. Other opts travel with the job unread.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from gateway.core.debounce import Debounce
from gateway.core.dialects import fields as f
from gateway.core.envelope import Envelope, job_id_or_raise
from gateway.core.errors import invalid_request, unsupported
from gateway.core.holder import StatesKind, StatesRule
from gateway.core.limits import duration_problem
from gateway.core.policy import Dimension, Judge, OnConflict, UniquePolicy
from gateway.core.request import Request
from gateway.core.states import ALL_STATES, TERMINAL_STATES, State

BULLMQ = "bullmq"
NAMESPACE = "bullmq"
PRIORITY_LIMIT = 2**21 - 1
DEFAULT_ATTEMPTS = 1
DEDUPLICATION_OPTIONS = ("id", "ttl", "extend", "replace", "keepLastIfActive")
# Simple mode: until the job completes, finally fails or is removed.
SIMPLE_STATES = frozenset(ALL_STATES) - TERMINAL_STATES
# Throttle mode and jobId: whatever the job does, until it is removed.
KEPT_STATES = frozenset(ALL_STATES) - {State.CANCELLED}
_INTEGER = re.compile(r"-?(0|[1-9][0-9]*)")
_SAFE_INTEGER = 2**53


def parse(raw: Mapping[str, Any]) -> Request:
    name = f.name(raw, "name", '"house"')
    data = raw.get("data", {})
    if not isinstance(data, dict | list):
        raise invalid_request("data must be a JSON object or array")
    opts = f.optional_object(raw, "opts") or {}
    if "debounce" in opts:
        raise invalid_request(
            "opts.debounce has been removed from BullMQ; use opts.deduplication instead"
        )
    if opts.get("keepLastIfActive") is not None:
        raise invalid_request(
            "opts.keepLastIfActive is a BullMQ deduplication option: give it as "
            "opts.deduplication.keepLastIfActive"
        )
    attempts = f.optional_int({"opts.attempts": opts.get("attempts")}, "opts.attempts", 0)
    envelope = Envelope(
        raw=f.job_fields(raw, ("name", "data"), type=name, args=data),
        type=name,
        queue=f.queue(raw),
        args=data,
        id=job_id_or_raise(raw.get("id")),
        scheduled_in=_delay(opts.get("delay")),
        max_attempts=max(1, DEFAULT_ATTEMPTS if attempts is None else attempts),
        priority=_priority(opts.get("priority")),
    )
    job_id, dedup = _job_id(opts.get("jobId")), _deduplication(opts)
    if job_id is not None and dedup is not None:
        raise unsupported(
            "opts.jobId with opts.deduplication",
            "each is a key of its own and the gateway checks one key per job; use one",
        )
    debounce, keep_last = None, False
    if job_id is not None:
        rule = StatesRule(StatesKind.BULLMQ, "jobId", _kept_states(opts))
        key_fields: dict[str, Any] = {"queue": envelope.queue, "job_id": job_id}
    elif dedup is not None:
        dedup_id, ttl, debounce, keep_last = dedup
        rule = (
            StatesRule(StatesKind.BULLMQ, "deduplication", SIMPLE_STATES)
            if ttl is None
            else StatesRule(StatesKind.BULLMQ, "deduplication", KEPT_STATES, lock_ms=ttl)
        )
        key_fields = {"queue": envelope.queue, "deduplication_id": dedup_id}
    else:
        return Request(envelope, None, None, BULLMQ)
    policy = UniquePolicy(
        keys=(Dimension.QUEUE,),
        period_ms=rule.lock_ms,
        states=rule.states,
        on_conflict=OnConflict.IGNORE,
        judge=Judge.HOLDER,
        debounce=debounce,
        keep_last=keep_last,
    )
    key = f.namespaced_key(NAMESPACE, key_fields, "opts")
    return Request(envelope, policy, key, BULLMQ, holder_rule=rule)


def _delay(raw: Any) -> int | None:
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
        raise invalid_request("opts.delay must be a whole number of milliseconds, 0 or more")
    problem = duration_problem(raw, "opts.delay")
    if problem is not None:
        raise invalid_request(problem)
    return raw or None


def _priority(raw: Any) -> int | None:
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise invalid_request(f"opts.priority must be an integer from 0 to {PRIORITY_LIMIT}")
    if int(raw) != raw:
        raise invalid_request("opts.priority should not be float")
    if not 0 <= raw <= PRIORITY_LIMIT:
        raise invalid_request(f"opts.priority should be between 0 and {PRIORITY_LIMIT}")
    return int(raw)


def _job_id(raw: Any) -> str | None:
    if raw is None:
        return None
    if not isinstance(raw, str) or not raw:
        raise invalid_request('opts.jobId must be a non-empty string, e.g. "house-42"')
    if _INTEGER.fullmatch(raw) and abs(int(raw)) < _SAFE_INTEGER and raw != "-0":
        raise invalid_request("opts.jobId: custom id cannot be integers (BullMQ's rule)")
    if ":" in raw and len(raw.split(":")) != 3:
        raise invalid_request("opts.jobId: custom id cannot contain : (BullMQ's rule)")
    return raw


def _kept_states(opts: Mapping[str, Any]) -> frozenset[State]:
    """While BullMQ keeps a job with a custom id: removed with the remove options."""
    states = KEPT_STATES
    for option, state in (("removeOnComplete", State.COMPLETED),
                          ("removeOnFail", State.DISCARDED)):  # fmt: skip
        value = opts.get(option)
        if value is True:
            states -= {state}
        elif value is not None and value is not False:
            raise unsupported(
                f"opts.{option} other than true or false with opts.jobId",
                "BullMQ then frees the id when the job is trimmed by count or age, "
                "which the gateway does not follow; use true or false",
            )
    return states


def _deduplication(
    opts: Mapping[str, Any],
) -> tuple[str, int | None, Debounce | None, bool] | None:
    dedup = opts.get("deduplication")
    if dedup is None:
        return None
    if not isinstance(dedup, Mapping):
        raise invalid_request('opts.deduplication must be an object such as {"id": "house"}')
    for option in dedup:
        if option not in DEDUPLICATION_OPTIONS:
            raise invalid_request(
                f"opts.deduplication.{option} is not a BullMQ deduplication option; "
                f"use {', '.join(DEDUPLICATION_OPTIONS)}"
            )
    dedup_id = dedup.get("id")
    if not isinstance(dedup_id, str) or not dedup_id:
        raise invalid_request("opts.deduplication.id must be provided: a non-empty string")
    if opts.get("parent") is not None:
        raise invalid_request("opts.deduplication and opts.parent cannot be used together")
    for option in ("extend", "replace", "keepLastIfActive"):
        value = dedup.get(option)
        if value is not None and not isinstance(value, bool):
            raise invalid_request(f"opts.deduplication.{option} must be true or false")
    keep_last = dedup.get("keepLastIfActive") is True
    # BullMQ ignores the ttl then: the id is held while the job exists, whatever its age.
    ttl = None if keep_last else _ttl(dedup.get("ttl"))
    extend = bool(dedup.get("extend")) and ttl is not None  # BullMQ extends a ttl only
    if dedup.get("replace"):
        # Debounce: a delayed holder moves to this request's delay, with its data.
        debounce = Debounce(replace=True, states=frozenset({State.SCHEDULED}),
                            restart_lock=extend)  # fmt: skip
    elif extend:
        debounce = Debounce(states=frozenset(), restart_lock=True)
    else:
        debounce = None
    return dedup_id, ttl, debounce, keep_last


def _ttl(ttl: Any) -> int | None:
    if f.none_or_zero(ttl):
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, int) or ttl < 0:
        raise invalid_request(
            "opts.deduplication.ttl must be a whole number of milliseconds; 0 or none "
            "holds the id until the job completes or fails"
        )
    problem = duration_problem(ttl, "opts.deduplication.ttl")
    if problem is not None:
        raise invalid_request(problem)
    return ttl
