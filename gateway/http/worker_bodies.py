"""The worker routes' bodies: the fields each takes, and each field's rule.

A field no route reads is refused (plumbing.unknown_fields), and a value the
processor would refuse is refused here (a 400 raised) by the processor's own rule
(core.job_events), so a fetch asked with a lease no claim could carry is a 400,
not an empty answer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.requests import Request

from gateway.core import INVALID_REQUEST
from gateway.core.envelope import QUEUE_NAME_RULE, is_valid_queue_name
from gateway.core.job_events import failure_problem, is_uuid, lease_problem
from gateway.core.limits import MAX_ID_BYTES
from gateway.core.times import parse_rfc3339
from gateway.http.binding import Binding
from gateway.http.errors import ApiError
from gateway.http.plumbing import read_json, unknown_fields

MAX_FETCH = 1000
MAX_FETCH_QUEUES = 1000
MAX_HEARTBEAT_JOBS = 1000
# The fields each route reads (`worker_id` on ack and nack: OJS's conformance suite sends
# it; checked, and otherwise unused there).
FETCH_FIELDS = ("queues", "count", "visibility_timeout_ms", "worker_id")
ACK_FIELDS = ("job_id", "result", "worker_id")
NACK_FIELDS = ("job_id", "error", "worker_id")
WORKER_STATES = ("running", "quiet", "terminate")
# The OJS worker protocol's heartbeat also describes the worker: checked, and otherwise
# unused (this gateway keeps no worker registry). Each with its type and its check.
WORKER_FIELDS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "state": ('"running", "quiet" or "terminate"', lambda v: v in WORKER_STATES),
    "started_at": ("an RFC 3339 time", lambda v: isinstance(v, str) and bool(parse_rfc3339(v))),
    "hostname": ("a string", lambda v: isinstance(v, str)),
    "pid": ("an integer", lambda v: _is_count(v)),
    "concurrency": ("an integer", lambda v: _is_count(v)),
    "queues": ("a list of strings", lambda v: _strings(v)),
    "labels": ("a list of strings", lambda v: _strings(v)),
}
HEARTBEAT_FIELDS = (
    "worker_id", "active_jobs", "active_job_ids", "job_id", "visibility_timeout_ms",
    *WORKER_FIELDS,
)  # fmt: skip


async def worker_body(
    request: Request, binding: Binding, known: tuple[str, ...], shape: str
) -> dict[str, Any]:
    """The body, a JSON object of `known` fields only."""
    body = await read_json(request, binding.settings.max_body_bytes)
    if not isinstance(body, dict):
        raise _bad(f"send a JSON object: {shape}")
    unknown_fields(body, known, "the body")
    return body


def count_of(body: dict[str, Any]) -> int:
    count = body.get("count", 1)
    if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= MAX_FETCH:
        raise _bad(f"count must be an integer from 1 to {MAX_FETCH}")
    return count


def queues_of(value: object) -> list[str]:
    """The queues to fetch from: queue names (the enqueue's rule), each once, in order."""
    if not isinstance(value, list) or not value:
        raise _bad("queues is required: a non-empty list of queue names")
    if len(value) > MAX_FETCH_QUEUES:
        raise _bad(f"queues names at most {MAX_FETCH_QUEUES} queues")
    for index, queue in enumerate(value):
        if not isinstance(queue, str) or not is_valid_queue_name(queue):
            raise _bad(f"queues[{index}] is not a queue name: a queue name is {QUEUE_NAME_RULE}")
    return list(dict.fromkeys(value))


def visibility_timeout(body: dict[str, Any]) -> int | None:
    """The lease asked for, by the processor's own rule for it (a claim would be refused)."""
    value = body.get("visibility_timeout_ms")
    if value is None:
        return None
    problem = lease_problem(value)
    if problem is not None:
        raise _bad(problem)
    return value


def worker_id_of(body: dict[str, Any], required: bool) -> str | None:
    """The worker's id, by the processor's rule for the one a claim carries."""
    value = body.get("worker_id")
    if value is None and not required:
        return None
    if not isinstance(value, str) or not 0 < len(value) <= MAX_ID_BYTES:
        need = "is required: the worker's identifier" if value is None else "must be"
        raise _bad(f"worker_id {need}, a non-empty string of at most {MAX_ID_BYTES} characters")
    return value


def check_worker_description(body: dict[str, Any]) -> None:
    """The worker protocol's description of the worker, when sent, has its types."""
    for field, (shown, valid) in WORKER_FIELDS.items():
        if field in body and not valid(body[field]):
            raise _bad(f"{field} must be {shown}")


def heartbeat_job_ids(body: dict[str, Any]) -> list[str]:
    """The jobs named: `active_jobs` (the HTTP binding's list), `active_job_ids` (the worker
    protocol's; there `active_jobs` is a count) or `job_id`; each once, in order."""
    named: list[tuple[str, Any]] = []
    for field in ("active_jobs", "active_job_ids"):
        value = body.get(field)
        if isinstance(value, list):
            named.extend((f"{field}[{i}]", job_id) for i, job_id in enumerate(value))
        elif value is not None and not (field == "active_jobs" and _is_count(value)):
            raise _bad(f"{field} must be a list of job ids")
    if body.get("job_id") is not None:
        named.append(("job_id", body["job_id"]))
    if len(named) > MAX_HEARTBEAT_JOBS:
        raise _bad(f"at most {MAX_HEARTBEAT_JOBS} active jobs per heartbeat")
    ids = [job_id_of(value, field) for field, value in named]
    return list(dict.fromkeys(ids))


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _strings(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


async def settle_body(request: Request, binding: Binding, known: tuple[str, ...]) -> dict[str, Any]:
    """An ack's or a nack's body, its job_id in the form ids are stored in."""
    body = await worker_body(request, binding, known, "{job_id, ...}")
    if body.get("job_id") is None:
        raise _bad("job_id is required: the id of the job the worker fetched")
    job_id = job_id_of(body["job_id"], "job_id")
    worker_id_of(body, required=False)
    return {**body, "job_id": job_id}


def nack_error(body: dict[str, Any]) -> dict[str, Any]:
    """A nack's error, by the processor's rule for it (it would refuse the event)."""
    error = body.get("error")
    if error is None:
        return {"code": "handler_error", "message": "the worker reported a failure"}
    problem = failure_problem(error)
    if problem is not None:
        raise _bad(problem)
    return error


def job_id_of(value: object, field: str) -> str:
    """A job id as a worker sends it back: a UUID, in lowercase as ids are stored (and as the
    processor reads an event's), so an id in capitals names its job too. Any other string
    can name no job. A UUID that names none is the route's not_found."""
    if isinstance(value, str) and is_uuid(value):
        return value.lower()
    raise _bad(f"{field} must be a job's id, a UUID such as 019078a3-b5c7-7def-8a12-3456789abcde")


def _bad(message: str) -> ApiError:
    return ApiError(400, INVALID_REQUEST, message)
