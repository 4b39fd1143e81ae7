"""Job-state events: the message a job runner (or the HTTP binding) sends, and its validation.

An event message is a JSON object with `job_id` and either `state` (an OJS
state) or `type` (an OJS lifecycle event type):

    job.enqueued -> available     job.completed -> completed
    job.scheduled -> scheduled    job.retrying  -> retryable
    job.started  -> active        job.discarded -> discarded
    job.cancelled -> cancelled    job.failed    -> retryable, or discarded
    job.heartbeat: an active job's lease is extended, its state unchanged
    job.deleted: a terminal job is removed for good (its key is released)

`unique_key` (the job's key) is optional; the event's record key is the
job's route: its unique_key, else its id (see `jobs.route_key`). Optional fields:
`attempt`, `max_attempts`, `scheduled_at` (RFC 3339), `result` (any JSON, kept
by job.completed), `error` (an object, kept by job.failed: its `code`, `type` and
`message` strings, `retryable` a bool, `details` an object, when given;
`retryable: false` discards at once), `visibility_timeout_ms` (job.started,
job.heartbeat: the lease, see leases.py), `claim_id` and `worker_id` (see
lifecycle.py). An event carrying its job's `rate_limit` (as the job holds it) is sent to
the rate key's home first (core/rates.py). Other fields are allowed and ignored.

Sizes, nesting and numbers are held to limits.py. What an event does to a job
is lifecycle.py's rule.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.core.errors import INVALID_EVENT, GatewayError
from gateway.core.jobs import route_key
from gateway.core.limits import (
    MAX_ERROR_BYTES,
    MAX_EVENT_BYTES,
    MAX_ID_BYTES,
    MAX_RESULT_BYTES,
    duration_problem,
    instant_problem,
    json_problem,
    rounded_integer_problem,
    too_large,
)
from gateway.core.states import State
from gateway.core.times import parse_rfc3339

EVENT_TYPES: dict[str, State | None] = {
    "job.enqueued": State.AVAILABLE,
    "job.scheduled": State.SCHEDULED,
    "job.started": State.ACTIVE,
    "job.completed": State.COMPLETED,
    "job.retrying": State.RETRYABLE,
    "job.failed": None,  # retryable or discarded: see moves.after_failure
    "job.discarded": State.DISCARDED,
    "job.cancelled": State.CANCELLED,
    "job.heartbeat": State.ACTIVE,  # keeps the job active: no transition
    "job.deleted": None,  # no state: the job is gone
}
HEARTBEAT, DELETED, FAILED = "job.heartbeat", "job.deleted", "job.failed"
_STATE_NAMES = frozenset(s.value for s in State)
_KEY = re.compile(r"[0-9a-f]{64}")
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class JobEvent:
    job_id: str
    unique_key: str | None
    state: State | None  # None for job.failed and job.deleted
    event_type: str | None = None
    attempt: int | None = None
    max_attempts: int | None = None
    scheduled_at: int | None = None
    result: Any = None
    # The worker's error object of a failure (job.failed, job.retrying, job.discarded).
    failure: Mapping[str, Any] | None = None
    visibility_timeout_ms: int | None = None
    claim_id: str | None = None
    worker_id: str | None = None  # who took the job (job.started): kept while it is active

    @property
    def route(self) -> str:
        """The record key the event travels under: its job's route."""
        return route_key(self.unique_key, self.job_id)


def parse_event(raw: object) -> JobEvent | GatewayError:
    """Validate an event object; its size, nesting and numbers are held to limits.py."""
    if not isinstance(raw, Mapping):
        return _bad("the event must be a JSON object")
    problem = json_problem(raw)
    if problem is not None:
        return _bad(problem)
    try:
        size = len(orjson.dumps(raw))
    except orjson.JSONEncodeError as exc:
        return _bad(f"the event is not JSON: {exc}")
    if size > MAX_EVENT_BYTES:
        return too_large("the event", size, MAX_EVENT_BYTES)
    return _parse_event(raw)


def _parse_event(raw: Mapping[str, Any]) -> JobEvent | GatewayError:
    job_id = raw.get("job_id")
    if not isinstance(job_id, str) or not job_id:
        return _bad("job_id is required: the id of the job the event is about")
    if is_uuid(job_id):
        job_id = job_id.lower()  # ids are stored in lowercase
    key = raw.get("unique_key")
    if key is not None and (not isinstance(key, str) or not _KEY.fullmatch(key)):
        return _bad("unique_key, when given, must be the job's key: 64 lowercase hex digits")

    state_name, event_type = raw.get("state"), raw.get("type")
    if (state_name is None) == (event_type is None):
        return _bad("give exactly one of state (an OJS state) or type (an OJS event type)")
    state: State | None
    if state_name is not None:
        if not isinstance(state_name, str) or state_name not in _STATE_NAMES:
            return _bad(f"state must be one of {', '.join(State)}, not {state_name!r}")
        state = State(state_name)
    else:
        if not isinstance(event_type, str) or event_type not in EVENT_TYPES:
            return _bad(f"type must be one of {', '.join(EVENT_TYPES)}, not {event_type!r}")
        state = EVENT_TYPES[event_type]

    attempt, max_attempts = raw.get("attempt"), raw.get("max_attempts")
    if attempt is not None and not is_int(attempt, minimum=0):
        return _bad("attempt must be an integer of at least 0")
    if max_attempts is not None and not is_int(max_attempts, minimum=1):
        return _bad("max_attempts must be an integer of at least 1")
    scheduled_at = raw.get("scheduled_at")
    scheduled_ms = None
    if scheduled_at is not None:
        scheduled_ms = parse_rfc3339(scheduled_at) if isinstance(scheduled_at, str) else None
        if scheduled_ms is None:
            return _bad("scheduled_at must be an RFC 3339 date-time with a time zone")
        problem = instant_problem(scheduled_ms, "scheduled_at")
        if problem is not None:
            return _bad(problem)
    result = raw.get("result")
    if result is not None and (size := len(orjson.dumps(result))) > MAX_RESULT_BYTES:
        return too_large("the result", size, MAX_RESULT_BYTES)
    failure = raw.get("error")
    if failure is not None and (size := len(orjson.dumps(failure))) > MAX_ERROR_BYTES:
        return too_large("the error", size, MAX_ERROR_BYTES)
    if failure is not None and (problem := failure_problem(failure)):
        return _bad(problem)
    lease = raw.get("visibility_timeout_ms")
    if lease is not None and (problem := lease_problem(lease)):
        return _bad(problem)
    for name in ("claim_id", "worker_id"):
        value = raw.get(name)
        if value is not None and not (isinstance(value, str) and 0 < len(value) <= MAX_ID_BYTES):
            return _bad(f"{name} must be a non-empty string of at most {MAX_ID_BYTES} characters")
    return JobEvent(
        job_id, key, state, event_type, attempt, max_attempts, scheduled_ms, result, failure,
        lease, raw.get("claim_id"), raw.get("worker_id"),
    )  # fmt: skip


def parse_event_json(data: bytes | str) -> JobEvent | GatewayError:
    """`parse_event` of a JSON text; one over MAX_EVENT_BYTES is refused unparsed."""
    if len(data) > MAX_EVENT_BYTES:
        return too_large("the event", len(data), MAX_EVENT_BYTES)
    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        return _bad(f"the event is not valid JSON: {exc}")
    problem = rounded_integer_problem(raw, data)  # orjson made a float of a long integer
    if problem is not None:
        return _bad(problem)
    return parse_event(raw)


def is_uuid(value: str) -> bool:
    """Whether `value` has a UUID's form, in either case (a job's id is a lowercase UUIDv7;
    an event may name it in capitals)."""
    return _UUID.fullmatch(value) is not None


def lease_problem(value: object) -> str | None:
    """Why `value` is no lease (`visibility_timeout_ms`), else None: whole ms, at least 1,
    at most the longest duration (limits.py)."""
    if not is_int(value, minimum=1):
        return "visibility_timeout_ms must be an integer of at least 1 (milliseconds)"
    assert isinstance(value, int)
    return duration_problem(value, "visibility_timeout_ms")


# A worker's error object: these fields, when given, have these types (`retryable` and the
# type or code decide whether the job is retried: moves.after_failure); others are kept.
_FAILURE_FIELDS: dict[str, tuple[type, str]] = {
    "code": (str, "a string"), "type": (str, "a string"), "message": (str, "a string"),
    "retryable": (bool, "true or false"), "details": (Mapping, "an object"),
}  # fmt: skip


def failure_problem(failure: object) -> str | None:
    """Why `failure` is no worker's error object, else None."""
    if not isinstance(failure, Mapping):
        return "error must be an object with a message, e.g. {code, message, retryable}"
    for name, (kind, shown) in _FAILURE_FIELDS.items():
        value = failure.get(name)
        if value is not None and not isinstance(value, kind):
            return f"error.{name} must be {shown}"
    return json_problem(failure, "error")  # its depth and numbers, as for the whole event


def is_int(value: object, minimum: int) -> bool:
    """An integer (never a bool) of at least `minimum`."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def _bad(message: str) -> GatewayError:
    return GatewayError(INVALID_EVENT, message)
