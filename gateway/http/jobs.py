"""The jobs routes: enqueue (one or a batch) through the SDK, read, cancel."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from gateway.core import TERMINAL_STATES, Outcome, State
from gateway.http import answers, errors, transitions
from gateway.http.answers import Answer
from gateway.http.binding import Binding
from gateway.http.errors import ApiError
from gateway.http.plumbing import read_json
from gateway.http.read_model import ReadModel
from gateway.sdk import ClientError, EnqueueResult, EnqueueTimeout

CANCELLABLE = frozenset(State) - TERMINAL_STATES


async def enqueue(request: Request, binding: Binding, request_id: str) -> Answer | ApiError:
    job = await read_json(request, binding.settings.max_body_bytes)
    if isinstance(job, ApiError):
        return job
    if isinstance(job, dict):
        job = {**job, "request_id": request_id}
    try:
        result = await binding.client.enqueue(
            job, wait=True, timeout=binding.settings.decision_timeout
        )
    except ClientError as exc:
        return answers.for_client_error(exc)
    _remember(binding.model, result)
    return answers.for_result(result)


async def enqueue_batch(request: Request, binding: Binding, request_id: str) -> Answer | ApiError:
    body = await read_json(request, binding.settings.max_body_bytes)
    if isinstance(body, ApiError):
        return body
    if not isinstance(body, dict) or not isinstance(body.get("jobs"), list):
        return ApiError(400, errors.INVALID_REQUEST, 'send {"jobs": [job, ...]}')
    # Each item gets its own request id: its own, else derived from the call's.
    ids = [_item_request_id(job, request_id, i) for i, job in enumerate(body["jobs"])]
    jobs = [
        {**j, "request_id": r} if isinstance(j, dict) else j
        for j, r in zip(body["jobs"], ids, strict=True)
    ]
    try:
        outcomes: list[Any] = await binding.client.enqueue_many(
            jobs, wait=True, timeout=binding.settings.decision_timeout
        )
    except EnqueueTimeout as exc:
        outcomes = exc.results  # what did arrive; None where the decision is missing
    except ClientError as exc:
        return answers.for_client_error(exc)
    items = []
    for outcome, item_id in zip(outcomes, ids, strict=True):
        if isinstance(outcome, EnqueueResult):
            _remember(binding.model, outcome)
            answer: Answer | ApiError = answers.for_result(outcome)
        elif isinstance(outcome, ClientError):
            answer = answers.for_client_error(outcome)
        else:
            answer = ApiError(504, errors.TIMEOUT, "no decision in time", retryable=True)
        items.append(answers.batch_item(answer, item_id))
    return Answer(200, {"results": items})


async def get_job(request: Request, binding: Binding, _: str) -> Answer | ApiError:
    job_id = request.path_params["job_id"]
    job = binding.model.get(job_id)
    if job is None:
        return ApiError(404, errors.NOT_FOUND, f"no job {job_id} is known to this gateway")
    return Answer(200, {"job": job})


async def cancel_job(request: Request, binding: Binding, _: str) -> Answer | ApiError:
    """Cancel a live job: a cancellation record for its worker, an event to release its key."""
    return await transitions.move(
        binding, request.path_params["job_id"], "job.cancelled", CANCELLABLE
    )


def _item_request_id(job: Any, request_id: str, index: int) -> str:
    own = job.get("request_id") if isinstance(job, dict) else None
    return own if isinstance(own, str) and own else f"{request_id}.{index}"


def _remember(model: ReadModel, result: EnqueueResult) -> None:
    """Put the new job in the read model now, so a GET right after the answer finds it."""
    if result.job is not None and result.outcome in (Outcome.ACCEPTED, Outcome.REPLACED):
        model.add(result.job)
        if result.cancelled_job_id:
            model.cancel(result.cancelled_job_id)
    elif result.job is not None and result.outcome is Outcome.UPDATED:
        model.update(result.job)
