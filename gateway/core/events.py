"""Job-state events from job runners, applied to the entries of a key.

An event message is a JSON object with `job_id`, `unique_key` and either
`state` (an OJS state) or `type` (an OJS lifecycle event type):

    job.enqueued -> available     job.completed -> completed
    job.scheduled -> scheduled    job.retrying  -> retryable
    job.started  -> active        job.discarded -> discarded
    job.cancelled -> cancelled    job.failed    -> retryable, or discarded
                                                   when attempts are exhausted

job.failed means discarded when the event's `attempt` is at least its
`max_attempts` (or, if the event omits it, the job's max_attempts as
accepted); without `attempt` the job is taken to be retrying, which keeps the
key held until a later job.discarded releases it. Optional fields: `attempt`,
`max_attempts`, `scheduled_at` (RFC 3339, for a scheduled job's new time).
Other fields are allowed and ignored.

Applying an event never fails: an unknown job, a job already terminal (no
event resurrects it) or an event that changes nothing is reported as ignored,
with the reason.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

import orjson

from gateway.core.entries import DEFAULT_RETENTION_MS, Entry, prune
from gateway.core.errors import INVALID_EVENT, GatewayError
from gateway.core.states import State
from gateway.core.times import parse_rfc3339

EVENT_TYPES: dict[str, State | None] = {
    "job.enqueued": State.AVAILABLE,
    "job.scheduled": State.SCHEDULED,
    "job.started": State.ACTIVE,
    "job.completed": State.COMPLETED,
    "job.retrying": State.RETRYABLE,
    "job.failed": None,  # retryable or discarded, see target_state
    "job.discarded": State.DISCARDED,
    "job.cancelled": State.CANCELLED,
}
_STATE_NAMES = frozenset(s.value for s in State)
_KEY = re.compile(r"[0-9a-f]{64}")
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class JobEvent:
    job_id: str
    unique_key: str
    state: State | None  # None only for job.failed
    event_type: str | None = None
    attempt: int | None = None
    max_attempts: int | None = None
    scheduled_at: int | None = None

    def target_state(self, entry: Entry) -> State:
        if self.state is not None:
            return self.state
        limit = self.max_attempts if self.max_attempts is not None else entry.max_attempts
        if self.attempt is not None and self.attempt >= limit:
            return State.DISCARDED
        return State.RETRYABLE


class EventOutcome(StrEnum):
    APPLIED = "applied"
    IGNORED = "ignored"
    INVALID = "invalid"


class IgnoredReason(StrEnum):
    UNKNOWN_JOB = "unknown_job"
    ALREADY_TERMINAL = "already_terminal"
    UNCHANGED = "unchanged"


@dataclass(frozen=True, slots=True)
class EventResult:
    outcome: EventOutcome
    # The entries to store under the key afterwards, pruned.
    entries: tuple[Entry, ...]
    job_id: str | None = None
    previous_state: State | None = None
    state: State | None = None
    reason: IgnoredReason | None = None
    error: GatewayError | None = None


def parse_event(raw: object) -> JobEvent | GatewayError:
    if not isinstance(raw, Mapping):
        return _bad("the event must be a JSON object")
    job_id = raw.get("job_id")
    if not isinstance(job_id, str) or not job_id:
        return _bad("job_id is required: the id of the job the event is about")
    if _UUID.fullmatch(job_id):
        job_id = job_id.lower()  # ids are stored in lowercase
    key = raw.get("unique_key")
    if not isinstance(key, str) or not _KEY.fullmatch(key):
        return _bad("unique_key is required: the job's key, 64 lowercase hex digits")

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
    if attempt is not None and not _is_int(attempt, minimum=0):
        return _bad("attempt must be an integer of at least 0")
    if max_attempts is not None and not _is_int(max_attempts, minimum=1):
        return _bad("max_attempts must be an integer of at least 1")
    scheduled_at = raw.get("scheduled_at")
    scheduled_ms = None
    if scheduled_at is not None:
        scheduled_ms = parse_rfc3339(scheduled_at) if isinstance(scheduled_at, str) else None
        if scheduled_ms is None:
            return _bad("scheduled_at must be an RFC 3339 date-time with a time zone")
    return JobEvent(job_id, key, state, event_type, attempt, max_attempts, scheduled_ms)


def parse_event_json(data: bytes | str) -> JobEvent | GatewayError:
    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        return _bad(f"the event is not valid JSON: {exc}")
    return parse_event(raw)


def apply_event(
    entries: Iterable[Entry],
    event: JobEvent | GatewayError,
    now_ms: int,
    retention_ms: int = DEFAULT_RETENTION_MS,
) -> EventResult:
    """Move the event's job to its new state; `now_ms` is the event record's timestamp."""
    kept = prune(entries, now_ms, retention_ms)
    if isinstance(event, GatewayError):
        return EventResult(EventOutcome.INVALID, kept, error=event)
    entry = next((e for e in kept if e.job_id == event.job_id), None)
    if entry is None:
        return EventResult(
            EventOutcome.IGNORED, kept, event.job_id, reason=IgnoredReason.UNKNOWN_JOB
        )
    target = event.target_state(entry)
    unchanged = target is entry.state and event.scheduled_at in (None, entry.scheduled_at)
    if unchanged or entry.terminal:
        reason = IgnoredReason.UNCHANGED if unchanged else IgnoredReason.ALREADY_TERMINAL
        return EventResult(
            EventOutcome.IGNORED, kept, entry.job_id, entry.state, entry.state, reason
        )
    moved = entry.moved_to(target, now_ms, event.scheduled_at)
    after = prune((moved if e is entry else e for e in kept), now_ms, retention_ms)
    return EventResult(EventOutcome.APPLIED, after, entry.job_id, entry.state, target)


def _is_int(value: object, minimum: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def _bad(message: str) -> GatewayError:
    return GatewayError(INVALID_EVENT, message)
