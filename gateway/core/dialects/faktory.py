"""Faktory's unique options (`"faktory"`).

Job: `jobtype`, `args` (an array), `queue`, `at` (the scheduled time),
`retry` (retries after the first attempt; default 25, as Faktory), `custom`.
Only with `custom.unique_for` (seconds, a number) is the job unique, by
(jobtype, args, queue): the key of OJS keys ["type", "queue", "args"], so it
shares OJS's fingerprint space. The job then holds a lock for unique_for
seconds from the later of enqueue time and `at`, released early on success
(`custom.unique_until: "success"`, the default) or when the job starts
(`"start"`). A duplicate is rejected with NOTUNIQUE.

Against a job that holds no Faktory lock (an OJS job), the canonical policy
decides: the default OJS states within unique_for of that job's creation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.core.dialects import fields as f
from gateway.core.envelope import Envelope, job_id_or_raise
from gateway.core.errors import invalid_request
from gateway.core.fingerprint import fingerprint_or_raise
from gateway.core.holder import FaktoryRule, UniqueUntil
from gateway.core.limits import MAX_DURATION_DAYS, MAX_DURATION_MS
from gateway.core.policy import Dimension, Judge, OnConflict, UniquePolicy
from gateway.core.request import Request

FAKTORY = "faktory"
NOTUNIQUE = "NOTUNIQUE"
DEFAULT_RETRY = 25
KEYS = (Dimension.TYPE, Dimension.QUEUE, Dimension.ARGS)


def parse(raw: Mapping[str, Any]) -> Request:
    jobtype = f.name(raw, "jobtype", '"SomeJob"')
    args = raw.get("args", [])
    if not isinstance(args, list):
        raise invalid_request("args must be an array (Faktory job arguments)")
    retry = f.optional_int(raw, "retry", 0)
    envelope = Envelope(
        raw=f.job_fields(raw, ("jobtype", "at"), type=jobtype),
        type=jobtype,
        queue=f.queue(raw),
        args=args,
        id=job_id_or_raise(raw.get("id")),
        scheduled_at=f.optional_time(raw, "at"),
        max_attempts=(DEFAULT_RETRY if retry is None else retry) + 1,
    )
    custom = f.optional_object(raw, "custom") or {}
    lock_ms = _unique_for(custom.get("unique_for"))
    if lock_ms is None:
        return Request(envelope, None, None, FAKTORY)  # no unique_for: no check at all
    policy = UniquePolicy(
        keys=KEYS, period_ms=lock_ms, on_conflict=OnConflict.REJECT, judge=Judge.HOLDER
    )
    key = fingerprint_or_raise(policy, jobtype, envelope.queue, args, None, "custom")
    rule = FaktoryRule(lock_ms, _until(custom.get("unique_until")))
    return Request(envelope, policy, key, FAKTORY, holder_rule=rule, duplicate_code=NOTUNIQUE)


def _unique_for(raw: Any) -> int | None:
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not raw > 0:
        raise invalid_request("custom.unique_for must be a positive number of seconds, e.g. 600")
    # Finite (parse_request refused NaN and the infinities) but a double may be as
    # large as 1.8e308: bounded before it is scaled, so it cannot overflow.
    ms = round(raw * 1000) if raw <= MAX_DURATION_MS else MAX_DURATION_MS + 1
    if ms < 1 or ms > MAX_DURATION_MS:
        raise invalid_request(
            f"custom.unique_for must be from 0.001 s to {MAX_DURATION_DAYS} days (100 years)"
        )
    return ms


def _until(raw: Any) -> UniqueUntil:
    if raw is None:
        return UniqueUntil.SUCCESS
    if not isinstance(raw, str) or raw not in {u.value for u in UniqueUntil}:
        raise invalid_request('custom.unique_until must be "success" or "start"')
    return UniqueUntil(raw)
