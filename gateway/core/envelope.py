"""The OJS job envelope of an enqueue request, validated.

Two shapes are read: the OJS envelope (top-level fields) and the HTTP form
(`options.*`). Read from either place: queue, unique, priority, max_attempts,
retry, scheduled_at (`options.delay_until` is its HTTP name), expires_at,
timeout_ms (how long one attempt may run), visibility_timeout_ms (its claims'
lease), tags and rate_limit (core/rate_policy.py); a field given in both places must agree.
Every other field, known or not, is kept in `raw` and carried into the accepted
job unchanged. scheduled_at and expires_at are RFC 3339 times, or, an extension the
OJS conformance suite uses, "+" and an ISO 8601 duration counted from the decision
("+PT5S"), which `resolved` turns into the time when the request is decided.

Validation follows OJS: a type is dot-separated `[a-z][a-z0-9_-]*` segments of
at most 255 characters in all, as OJS's OpenAPI document and its conformance
suite have it (the core text leaves `-` out; see the README); a client-supplied
id is a lowercase UUIDv7 (refused, never rewritten). `args` may also be an
object, as the OJS unique-jobs page shows: an extension of this gateway (OJS
core wants an array). Priority is any
integer: OJS sets no range, only that -100..100 be supported.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from gateway.core.errors import invalid_request
from gateway.core.limits import duration_problem, instant_problem
from gateway.core.periods import period_or_raise
from gateway.core.rate_policy import RateLimit, parse_rate_limit
from gateway.core.retry import DEFAULT_MAX_ATTEMPTS, RetryPolicy, retry_or_raise
from gateway.core.times import format_rfc3339, parse_rfc3339

DEFAULT_QUEUE = "default"
NO_RETRY_POLICY = RetryPolicy()  # the envelope's retry when it gives none
QUEUE_NAME_RULE = (
    '1 to 255 characters of a-z, 0-9, ".", "_" and "-", starting with a letter or digit'
)
_QUEUE_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,254}")
_UUID7 = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")
_TYPE = re.compile(r"[a-z][a-z0-9_-]*(\.[a-z][a-z0-9_-]*)*")
# A relative time: "+", then P and weeks, or days and a time part (a T with at least one
# of hours, minutes, seconds; a fraction of at most milliseconds on the seconds). Stricter
# than isodate, which also takes a sign, a bare T, a trailing newline and any digits.
_RELATIVE = re.compile(
    r"\+P(?:[0-9]+W|(?=[0-9T])(?:[0-9]+D)?(?:T(?=[0-9])(?:[0-9]+H)?(?:[0-9]+M)?"
    r"(?:[0-9]+(?:[.,][0-9]{1,3})?S)?)?)"
)
TYPE_RULE = (
    'dot-separated segments of a-z, 0-9, "_" and "-", each starting with a letter, '
    "255 characters at most"
)


# Not frozen: built for every record, and a frozen dataclass sets each field through
# object.__setattr__ (seven times the cost). Treated as a value all the same: never assigned.
@dataclass(slots=True, init=False)
class Envelope:
    raw: Mapping[str, Any]
    type: str
    queue: str
    args: list[Any] | dict[str, Any]
    id: str | None = None
    meta: dict[str, Any] | None = None
    scheduled_at: int | None = None
    # After this the job is never handed out: discarded, if no worker took it (leases.py).
    expires_at: int | None = None
    # A time sent relative ("+PT5S"): so long after the decision (`resolved` makes it absolute).
    scheduled_in: int | None = None
    expires_in: int | None = None
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    priority: int | None = None
    retry: RetryPolicy = NO_RETRY_POLICY
    tags: list[str] | None = None
    timeout_ms: int | None = None
    # The lease a worker's claim gets unless the fetch names one (see leases.py).
    visibility_timeout_ms: int | None = None
    # The raw unique policy and where it was found ("unique" or "options.unique").
    unique: Any = None
    unique_field: str | None = None
    # `rate_limit` or `options.rate_limit`, validated (core/rate_policy.py).
    rate_limit: RateLimit | None = None

    def __init__(
        self,
        raw: Mapping[str, Any],
        type: str,
        queue: str,
        args: list[Any] | dict[str, Any],
        id: str | None = None,
        meta: dict[str, Any] | None = None,
        scheduled_at: int | None = None,
        expires_at: int | None = None,
        scheduled_in: int | None = None,
        expires_in: int | None = None,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        priority: int | None = None,
        retry: RetryPolicy = NO_RETRY_POLICY,
        tags: list[str] | None = None,
        timeout_ms: int | None = None,
        visibility_timeout_ms: int | None = None,
        unique: Any = None,
        unique_field: str | None = None,
        rate_limit: RateLimit | None = None,
    ) -> None:
        self.raw = raw
        self.type = type
        self.queue = queue
        self.args = args
        self.id = id
        self.meta = meta
        self.scheduled_at = scheduled_at
        self.expires_at = expires_at
        self.scheduled_in = scheduled_in
        self.expires_in = expires_in
        self.max_attempts = max_attempts
        self.priority = priority
        self.retry = retry
        self.tags = tags
        self.timeout_ms = timeout_ms
        self.visibility_timeout_ms = visibility_timeout_ms
        self.unique = unique
        self.unique_field = unique_field
        self.rate_limit = rate_limit


def envelope_or_raise(raw: object) -> Envelope:
    if not isinstance(raw, Mapping):
        raise invalid_request("the job must be a JSON object")
    options = raw.get("options")
    if options is not None and not isinstance(options, Mapping):
        raise invalid_request("options must be an object")
    options = options or {}

    job_type = raw.get("type")
    if not isinstance(job_type, str) or not job_type:
        raise invalid_request('type is required: a non-empty string such as "email.send"')
    if len(job_type) > 255 or not _TYPE.fullmatch(job_type):
        raise invalid_request(f'type "{job_type}" is not a valid job type: use {TYPE_RULE}')

    queue = _queue(raw, options)

    if "args" not in raw:
        raise invalid_request("args is required: a JSON array (or object) of job arguments")
    args = raw["args"]
    if not isinstance(args, list | dict):
        raise invalid_request("args must be a JSON array or object")

    meta = raw.get("meta")
    if meta is not None and not isinstance(meta, dict):
        raise invalid_request("meta must be an object")

    top_unique, nested_unique = raw.get("unique"), options.get("unique")
    if top_unique is not None and nested_unique is not None:
        raise invalid_request("give the unique policy either as unique or as options.unique")
    unique_field = None
    if top_unique is not None:
        unique_field = "unique"
    elif nested_unique is not None:
        unique_field = "options.unique"

    # Most requests have no options: then each field is one lookup.
    pick = partial(_option, raw, options) if options else raw.get
    max_attempts = _max_attempts(pick("max_attempts"))
    retry = retry_or_raise(pick("retry"), "retry", max_attempts)
    scheduled_at = pick("scheduled_at")
    delay_until = options.get("delay_until") if options else None
    if scheduled_at is not None and delay_until is not None and scheduled_at != delay_until:
        raise invalid_request("scheduled_at and options.delay_until differ; give the time once")
    scheduled = _time(scheduled_at if scheduled_at is not None else delay_until, "scheduled_at")
    expires = _time(pick("expires_at"), "expires_at")
    tags = pick("tags")
    if tags is not None and (
        not isinstance(tags, list) or not all(isinstance(t, str) for t in tags)
    ):
        raise invalid_request("tags must be a list of strings")
    # Positional: a slotted dataclass's __init__ takes them faster than keywords.
    return Envelope(
        raw,
        job_type,
        queue,
        args,
        job_id_or_raise(raw.get("id")),
        meta,
        scheduled[0],
        expires[0],
        scheduled[1],
        expires[1],
        retry.max_attempts,
        _priority(pick("priority")),
        retry,
        tags,
        _duration_option(pick("timeout_ms"), "timeout_ms"),
        _duration_option(pick("visibility_timeout_ms"), "visibility_timeout_ms"),
        top_unique if top_unique is not None else nested_unique,
        unique_field,
        _rate_limit(raw, options, queue),
    )


def _rate_limit(raw: Mapping[str, Any], options: Mapping[str, Any], queue: str) -> RateLimit | None:
    top, nested = raw.get("rate_limit"), options.get("rate_limit") if options else None
    if top is not None and nested is not None and top != nested:
        raise invalid_request("rate_limit and options.rate_limit differ; give it once")
    field = "rate_limit" if top is not None else "options.rate_limit"
    return parse_rate_limit(top if top is not None else nested, queue, field)


def is_valid_queue_name(name: str) -> bool:
    return _QUEUE_NAME.fullmatch(name) is not None


def _queue(raw: Mapping[str, Any], options: Mapping[str, Any]) -> str:
    top, nested = raw.get("queue"), options.get("queue")
    if top is not None and nested is not None and top != nested:
        raise invalid_request(
            f"queue ({top!r}) and options.queue ({nested!r}) differ; give the queue once"
        )
    field = "queue" if top is not None else "options.queue"
    queue = top if top is not None else nested
    if queue is None:
        return DEFAULT_QUEUE
    if not isinstance(queue, str) or not is_valid_queue_name(queue):
        shown = f'"{queue}"' if isinstance(queue, str) else "a non-string value"
        raise invalid_request(f"{field} {shown} is not a valid queue name: use {QUEUE_NAME_RULE}")
    return queue


def _option(raw: Mapping[str, Any], options: Mapping[str, Any], name: str) -> Any:
    """A field given top-level or under options; both is fine only if they agree."""
    top, nested = raw.get(name), options.get(name)
    if top is not None and nested is not None and top != nested:
        raise invalid_request(f"{name} and options.{name} differ; give {name} once")
    return top if top is not None else nested


def is_uuid7(value: str) -> bool:
    """Whether `value` is a lowercase UUIDv7, the form of every job id."""
    return _UUID7.fullmatch(value) is not None


def job_id_or_raise(value: object) -> str | None:
    """A client-supplied job id, in every dialect: the gateway's ids are lowercase UUIDv7."""
    if value is None:
        return None
    if isinstance(value, str) and is_uuid7(value):
        return value
    raise invalid_request(
        "id must be a lowercase UUIDv7 such as 019078a3-b5c7-7def-8a12-3456789abcde, "
        "or omitted so the gateway assigns one"
    )


def _time(value: object, name: str) -> tuple[int | None, int | None]:
    """(the instant, None) for an RFC 3339 time; (None, the ms) for one relative to the
    decision: "+" and a positive ISO 8601 duration of fixed length ("+PT5S", "+P1D")."""
    if isinstance(value, str) and value.startswith("+"):
        if not _RELATIVE.fullmatch(value):
            raise invalid_request(
                f'{name} {value[:64]!r} is not a time from the decision: use "+" and an ISO '
                "duration in weeks, days, hours, minutes and seconds (ASCII digits, whole "
                'milliseconds), e.g. "+PT5S", "+PT0.5S" or "+P1DT2H"'
            )
        return None, period_or_raise(value[1:], name)
    return _instant(value, name), None


def resolved(envelope: Envelope, now_ms: int) -> Envelope:
    """The envelope with its relative times made absolute at `now_ms` (its decision's
    time), in its fields and in `raw` where they were sent, so the job shows instants."""
    if envelope.scheduled_in is None and envelope.expires_in is None:
        return envelope
    raw = {k: dict(v) if k == "options" and isinstance(v, Mapping) else v
           for k, v in envelope.raw.items()}  # fmt: skip
    changes: dict[str, Any] = {}
    for field, names, offset in (
        ("scheduled_at", ("scheduled_at", "delay_until"), envelope.scheduled_in),
        ("expires_at", ("expires_at",), envelope.expires_in),
    ):
        if offset is None:
            continue
        at = now_ms + offset
        changes[field] = at
        for where in (raw, raw.get("options")):
            for name in names:
                if isinstance(where, dict) and isinstance(where.get(name), str):
                    where[name] = format_rfc3339(at)
    return replace(envelope, raw=raw, scheduled_in=None, expires_in=None, **changes)


def _instant(value: object, name: str) -> int | None:
    if value is None:
        return None
    ms = parse_rfc3339(value) if isinstance(value, str) else None
    if ms is None:
        raise invalid_request(
            f'{name} must be an RFC 3339 date-time with a time zone, e.g. "2026-02-12T10:00:00Z",'
            ' or "+" and an ISO 8601 duration from the decision, e.g. "+PT5S"'
        )
    problem = instant_problem(ms, name)
    if problem is not None:
        raise invalid_request(problem)
    return ms


def _max_attempts(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise invalid_request("max_attempts must be an integer of at least 1")
    return value


def _duration_option(value: object, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise invalid_request(f"{name} must be an integer of at least 1 (milliseconds)")
    problem = duration_problem(value, name)
    if problem is not None:
        raise invalid_request(problem)
    return value


def _priority(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid_request("priority must be an integer")
    return value
