"""The worker routes: fetch claims jobs, ack completes one, nack reports a failure.

Fetch proposes candidates from the view (queues left to right, each in
priority then ready-time order) and claims each with a job.started event; a
job is handed out only once the processor has confirmed available → active
for it, so any number of serve processes never hand out one job twice. Ack
and nack ask the processor likewise and answer in the OJS shapes.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from starlette.requests import Request

from gateway.core import State, job_effective_state
from gateway.http import errors, transitions
from gateway.http.answers import Answer
from gateway.http.binding import Binding
from gateway.http.errors import ApiError
from gateway.http.plumbing import read_json

MAX_FETCH = 1000
# A claim this process has in flight: other local fetches skip it meanwhile (at most this long).
CLAIM_MEMORY_S = 5.0


def now_ms() -> int:
    return time.time_ns() // 1_000_000


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
    claimed: list[dict[str, Any]] = []
    tried: set[str] = set()
    while len(claimed) < count:
        # Never more claims than jobs wanted: a claimed job is active, it must be handed out.
        candidates = _candidates(binding, queues, count - len(claimed), tried)
        if not candidates:
            break
        tried.update(j["id"] for j in candidates)
        answers = await asyncio.gather(*(_claim(binding, j) for j in candidates))
        for answer in answers:
            if isinstance(answer, ApiError):
                return answer
            if answer is not None:
                claimed.append(answer)
    return Answer(200, {"jobs": claimed})


def _candidates(
    binding: Binding, queues: list[str], wanted: int, tried: set[str]
) -> list[dict[str, Any]]:
    """Due jobs of the queues, left to right, not claimed by this process just now."""
    at, found = now_ms(), list[dict[str, Any]]()
    recent = binding.claims
    for job_id, until in list(recent.items()):
        if until < time.monotonic():
            del recent[job_id]
    for queue in queues:
        for job_id in binding.view.waiting(queue):
            if len(found) == wanted:
                return found
            if job_id in tried or job_id in recent:
                continue
            job = binding.view.get(job_id)
            if job is not None and job_effective_state(job, at) is State.AVAILABLE:
                found.append(job)
    return found


async def _claim(binding: Binding, job: dict[str, Any]) -> dict[str, Any] | ApiError | None:
    """The job, active, if the processor gave it to us; None if it went elsewhere."""
    binding.claims[job["id"]] = time.monotonic() + CLAIM_MEMORY_S
    try:
        ack = await transitions.ask(binding, job, "job.started")
        if isinstance(ack, ApiError):
            return ack
        moved = ack.record.get("job")
        if ack.outcome != "applied" or not isinstance(moved, dict):
            return None
        await transitions.wait_for_view(binding, moved)
        return moved
    finally:
        binding.claims.pop(job["id"], None)


async def ack(request: Request, binding: Binding, _: str) -> Answer | ApiError:
    body = await _body(request, binding)
    if isinstance(body, ApiError):
        return body
    fields = {"result": body["result"]} if body.get("result") is not None else {}
    moved = await _settle(binding, body["job_id"], "job.completed", "ack", fields)
    if isinstance(moved, ApiError):
        return moved
    return Answer(
        200,
        {
            "acknowledged": True, "job_id": moved["id"], "id": moved["id"],
            "state": moved["state"], "completed_at": moved.get("completed_at"),
            "attempt": moved.get("attempt"), "job": moved,
        },
    )  # fmt: skip


async def nack(request: Request, binding: Binding, _: str) -> Answer | ApiError:
    """One failed attempt: the processor retries it (with backoff) or discards it."""
    body = await _body(request, binding)
    if isinstance(body, ApiError):
        return body
    error = body.get("error")
    if error is None:
        error = {"code": "handler_error", "message": "the worker reported a failure"}
    if not isinstance(error, dict) or not isinstance(error.get("message", ""), str):
        return _bad("error must be an object with code and message")
    moved = await _settle(binding, body["job_id"], "job.failed", "nack", {"error": error})
    if isinstance(moved, ApiError):
        return moved
    out = {
        "job_id": moved["id"], "id": moved["id"], "state": moved["state"],
        "attempt": moved.get("attempt"), "max_attempts": moved.get("max_attempts"),
    }  # fmt: skip
    for stamp in ("next_attempt_at", "discarded_at", "completed_at"):
        if moved.get(stamp):
            out[stamp] = moved[stamp]
    out["job"] = moved
    return Answer(200, out)


async def _settle(
    binding: Binding, job_id: str, event_type: str, action: str, fields: dict[str, Any]
) -> dict[str, Any] | ApiError:
    """Ask the processor to end an attempt; the job as it moved, once this view shows it."""
    job = binding.view.get(job_id)
    if job is None:
        return transitions.not_found(job_id)
    answer = await transitions.ask(binding, job, event_type, **fields)
    if isinstance(answer, ApiError):
        return answer
    refused = transitions.refused(answer, job["id"], action)
    if refused is not None:
        return refused
    moved: dict[str, Any] = answer.record["job"]
    await transitions.wait_for_view(binding, moved)
    return moved


async def _body(request: Request, binding: Binding) -> dict[str, Any] | ApiError:
    body = await read_json(request, binding.settings.max_body_bytes)
    if isinstance(body, ApiError):
        return body
    job_id: Any = body.get("job_id") if isinstance(body, dict) else None
    if not isinstance(job_id, str) or not job_id:
        return _bad("job_id is required: the id of the job the worker fetched")
    return body  # type: ignore[no-any-return]


def _bad(message: str) -> ApiError:
    return ApiError(400, errors.INVALID_REQUEST, message)
