"""The jobs routes: enqueue (one or a batch) through the SDK, read from the view, cancel.

A POST is answered as soon as the processor's answer arrives (before its commit, with
early answers); the answered job goes into this process's view at once as a provisional
entry, so a GET right after it finds the job (on this process; a second process sees it
once its own view has read the committed record).
"""

from __future__ import annotations

import time
from typing import Any

from starlette.requests import Request as HttpRequest

from gateway.core import (
    INVALID_REQUEST,
    GatewayError,
    Outcome,
    State,
    job_effective_state,
    parse_request,
    stored_job,
)
from gateway.core.retry import with_ojs_retry
from gateway.http import answers, transitions
from gateway.http.answers import Answer
from gateway.http.binding import Binding
from gateway.http.errors import ApiError
from gateway.http.plumbing import read_json
from gateway.sdk import ClientError, EnqueueResult, EnqueueTimeout


async def enqueue(request: HttpRequest, binding: Binding, request_id: str) -> Answer | ApiError:
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
    await _settled(binding, result)
    return answers.for_result(result)


async def enqueue_batch(
    request: HttpRequest, binding: Binding, request_id: str
) -> Answer | ApiError:
    """Validate every job first (one invalid: nothing is enqueued), then enqueue them all."""
    body = await read_json(request, binding.settings.max_body_bytes)
    if isinstance(body, ApiError):
        return body
    if not isinstance(body, dict) or not isinstance(body.get("jobs"), list) or not body["jobs"]:
        return ApiError(400, INVALID_REQUEST, 'send {"jobs": [job, ...]}, at least one')
    problems = []
    for index, job in enumerate(body["jobs"]):
        parsed = parse_request(job)
        if isinstance(parsed, GatewayError):
            problems.append({"index": index, "code": parsed.code, "message": parsed.message})
    if problems:
        first = problems[0]
        return ApiError(
            400, INVALID_REQUEST,
            f"batch validation failed: job at index {first['index']}: {first['message']}; "
            "nothing was enqueued",
            details={"errors": problems},
        )  # fmt: skip
    ids = [_item_request_id(job, request_id, i) for i, job in enumerate(body["jobs"])]
    jobs = [{**j, "request_id": r} for j, r in zip(body["jobs"], ids, strict=True)]
    try:
        outcomes: list[Any] = await binding.client.enqueue_many(
            jobs, wait=True, timeout=binding.settings.decision_timeout
        )
    except EnqueueTimeout as exc:
        outcomes = exc.results
    except ClientError as exc:
        return answers.for_client_error(exc)
    items = []
    for outcome, item_id in zip(outcomes, ids, strict=True):
        if isinstance(outcome, EnqueueResult):
            await _settled(binding, outcome)
        item = answers.batch_item(outcome, item_id)
        items.append(shown(item) if "state" in item and "error" not in item else item)
    return Answer(201, {"jobs": items, "count": len(items)})


async def get_job(request: HttpRequest, binding: Binding, _: str) -> Answer | ApiError:
    job_id = request.path_params["job_id"]
    job = await binding.job(job_id)
    if job is None:
        return transitions.not_found(job_id)
    return Answer(200, {"job": shown(job)})


async def cancel_job(request: HttpRequest, binding: Binding, _: str) -> Answer | ApiError:
    """Ask the processor to cancel; it writes the cancellation for the job's worker."""
    job_id = request.path_params["job_id"]
    job = await binding.job(job_id)
    if job is None:
        return transitions.not_found(job_id)
    ack = await transitions.ask(binding, job, "job.cancelled")
    if isinstance(ack, ApiError):
        return ack
    refused = transitions.refused(ack, job_id, "cancel")
    if refused is not None:
        return refused
    moved = ack.record["job"]
    transitions.answered(binding, moved)
    return Answer(200, {"job": {**shown(moved), "previous_state": ack.previous_state}})


INTERNAL_FIELDS = ("route", "partition")


def shown(job: dict[str, Any]) -> dict[str, Any]:
    """A job as OJS shows it, with what the client sent given back in the shape it sent:
    a due scheduled or retryable job is available; `retry` is the OJS retry object (ISO
    8601 intervals, or the `_ms` integers if the client sent those under options.retry);
    `unique` is the policy as sent (top-level or under options); `errors` lists every
    failed attempt's error kept (oldest first), else the last one; no internal fields."""
    state = str(job_effective_state(job, time.time_ns() // 1_000_000))
    out = {k: v for k, v in job.items() if k not in INTERNAL_FIELDS} | {"state": state}
    raw_options = job.get("options")
    options: dict[str, Any] = raw_options if isinstance(raw_options, dict) else {}
    out = with_ojs_retry(out)
    if out.get("unique") is None and options.get("unique") is not None:
        out["unique"] = options["unique"]
    errors_kept = job.get("errors")
    if isinstance(errors_kept, list):
        out["errors"] = errors_kept
    else:
        out["errors"] = [job["error"]] if job.get("error") else []
    return out


async def _settled(binding: Binding, result: EnqueueResult) -> None:
    """This view shows what the answer reports: a new job at once, as its record will hold
    it (the same core function builds both). A job a replace cancelled, or an update
    changed, once its record is read: the processor derives those from its stored record,
    which this process may not have seen yet."""
    # The job as the decision record holds it (the SDK's `job` is it as shown to callers).
    decided = result.record.get("job")
    if not isinstance(decided, dict):
        return
    if result.outcome in (Outcome.ACCEPTED, Outcome.REPLACED):
        partition = int(result.record["source"]["partition"])
        job = stored_job(decided, result.unique_key, partition)
        binding.view.provisional(str(job["id"]), job)
    if result.outcome is Outcome.REPLACED and result.cancelled_job_id:
        cancelled = {"id": result.cancelled_job_id, "state": str(State.CANCELLED)}
        await transitions.wait_for_view(binding, cancelled, ("state",))
    elif result.outcome is Outcome.UPDATED:
        changed = tuple(c["field"] for c in result.record.get("updated_fields") or [])
        await transitions.wait_for_view(binding, decided, changed)


def _item_request_id(job: Any, request_id: str, index: int) -> str:
    own = job.get("request_id") if isinstance(job, dict) else None
    return own if isinstance(own, str) and own else f"{request_id}.{index}"
