"""The worker routes: fetch hands out jobs (active), ack completes, nack fails one attempt."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from gateway.core import State
from gateway.http import errors, transitions
from gateway.http.answers import Answer
from gateway.http.binding import Binding
from gateway.http.errors import ApiError
from gateway.http.plumbing import read_json

MAX_FETCH = 1000
_ACTIVE = frozenset({State.ACTIVE})


async def fetch(request: Request, binding: Binding, _: str) -> Answer | ApiError:
    body = await read_json(request, binding.settings.max_body_bytes)
    if isinstance(body, ApiError):
        return body
    queues = body.get("queues") if isinstance(body, dict) else None
    count = body.get("count", 1) if isinstance(body, dict) else None
    if not isinstance(queues, list) or not queues or not all(isinstance(q, str) for q in queues):
        return _bad("queues is required: a non-empty list of queue names")
    if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= MAX_FETCH:
        return _bad(f"count must be an integer from 1 to {MAX_FETCH}")
    jobs = binding.model.claim(queues, count, transitions.now_ms())
    failure = await transitions.publish(binding, jobs, "job.started")
    return failure or Answer(200, {"jobs": jobs})


async def ack(request: Request, binding: Binding, _: str) -> Answer | ApiError:
    return await _finish(request, binding, "job.completed")


async def nack(request: Request, binding: Binding, _: str) -> Answer | ApiError:
    """One failed attempt: retryable while attempts remain, else discarded (the core decides)."""
    return await _finish(request, binding, "job.failed")


async def _finish(request: Request, binding: Binding, event_type: str) -> Answer | ApiError:
    body = await read_json(request, binding.settings.max_body_bytes)
    if isinstance(body, ApiError):
        return body
    job_id: Any = body.get("job_id") if isinstance(body, dict) else None
    if not isinstance(job_id, str) or not job_id:
        return _bad("job_id is required: the id of the job the worker fetched")
    return await transitions.move(binding, job_id, event_type, _ACTIVE)


def _bad(message: str) -> ApiError:
    return ApiError(400, errors.INVALID_REQUEST, message)
