"""The jobs routes: enqueue (one or a batch) through the SDK, read from the view, cancel.

A POST is answered as soon as the processor's answer arrives (before its commit, with
early answers); the answered job goes into this process's view at once as a provisional
entry, so a GET right after it finds the job (on this process; a second process sees it
once its own view has read the committed record).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from typing import Any

from starlette.requests import Request as HttpRequest

from gateway import wire
from gateway.core import (
    INVALID_REQUEST,
    Envelope,
    GatewayError,
    Outcome,
    State,
    parse_request,
    stored_job,
)
from gateway.core.idempotency import IDEMPOTENCY_KEY_REUSED, key_problem
from gateway.core.times import parse_rfc3339
from gateway.http import access, answers, caught_up, job_types, transitions
from gateway.http.answers import Answer
from gateway.http.binding import Binding
from gateway.http.caller import caller
from gateway.http.enqueue_rate import identity
from gateway.http.errors import ApiError
from gateway.http.plumbing import read_json
from gateway.http.security import privileged
from gateway.http.shared import shown
from gateway.sdk import ClientError, EnqueueResult, EnqueueTimeout


async def enqueue(request: HttpRequest, binding: Binding, request_id: str) -> Answer:
    """Under an `Idempotency-Key`, a retry gets the first answer again (the decision record
    the processor kept for the key), so the same body: see docs/http.md. A job is read
    here only to refuse it (a queue the caller does not reach, a type not allowed, another
    tenant) and to give it the caller's tenant; else the processor alone reads it."""
    idem = _header_key(request)
    job = access.acting_for(await read_json(request, binding.settings.max_body_bytes))
    if isinstance(job, dict):
        job = {**job, "request_id": request_id}
    allowed = binding.settings.job_types
    if access.restricted() or allowed is not None:
        envelope = _envelope_of(job)
        access.permit(envelope.queue)
        job_types.permit(allowed, envelope.type)
    rated = binding.enqueue_rate.take(identity(), 1)
    sent = time.monotonic()
    try:
        result = await binding.client.enqueue(
            job, wait=True, timeout=binding.settings.decision_timeout, idempotency_key=idem,
            actor=caller(request, request_id),
        )  # fmt: skip
    except ClientError as exc:
        raise answers.for_client_error(exc) from None
    await _settled(binding, result, sent)
    answer = answers.for_result(result)
    answer.headers.update(rated)
    if isinstance(answer, ApiError):
        raise answer if idem is None else _as_first(answer, result, idem)
    return answer


async def enqueue_batch(request: HttpRequest, binding: Binding, request_id: str) -> Answer:
    """Validate every job first (one invalid, one the caller may not enqueue, or one of a
    type not allowed: nothing is enqueued), then enqueue them all, each of the caller's
    tenant (access.acting_for).
    Under an idempotency key (the `Idempotency-Key` header, or OJS's `idempotency_key` in
    the body), the whole batch's first answers, or 422 if the key named another batch."""
    header = _header_key(request)
    body = await read_json(request, binding.settings.max_body_bytes)
    if not isinstance(body, dict) or not isinstance(body.get("jobs"), list) or not body["jobs"]:
        raise ApiError(400, INVALID_REQUEST, 'send {"jobs": [job, ...]}, at least one')
    idem = _batch_key(header, body)
    body["jobs"] = [access.acting_for(job) for job in body["jobs"]]
    problems, refusals, unregistered = [], [], []
    for index, job in enumerate(body["jobs"]):
        parsed = parse_request(job)
        if isinstance(parsed, GatewayError):
            problems.append({"index": index, "code": parsed.code, "message": parsed.message})
        elif (refused := access.refusal(parsed.envelope.queue)) is not None:
            refusals.append(refused)
        elif job_types.refusal(binding.settings.job_types, parsed.envelope.type) is not None:
            unregistered.append((index, parsed.envelope.type))
    if problems:
        first = problems[0]
        raise ApiError(
            400, INVALID_REQUEST,
            f"batch validation failed: job at index {first['index']}: {first['message']}; "
            "nothing was enqueued",
            details={"errors": problems},
        )  # fmt: skip
    if refusals:
        raise refusals[0]  # one job the caller may not enqueue: nothing is enqueued
    if unregistered:
        raise job_types.batch_refusal(unregistered)  # nothing is enqueued
    rated = binding.enqueue_rate.take(identity(), len(body["jobs"]))
    ids = [_item_request_id(job, request_id, i) for i, job in enumerate(body["jobs"])]
    jobs = [{**j, "request_id": r} for j, r in zip(body["jobs"], ids, strict=True)]
    sent = time.monotonic()
    try:
        outcomes: list[Any] = await binding.client.enqueue_many(
            jobs, wait=True, timeout=binding.settings.decision_timeout, idempotency_key=idem,
            actor=caller(request, request_id),
        )  # fmt: skip
    except EnqueueTimeout as exc:
        outcomes = exc.results
    except ClientError as exc:
        raise answers.for_client_error(exc) from None
    if idem is not None:
        _refuse_reused(outcomes, idem)
    # At once, not in turn: the view may bring every item's record in one read.
    decided = [o for o in outcomes if isinstance(o, EnqueueResult)]
    await asyncio.gather(*(_settled(binding, outcome, sent) for outcome in decided))
    items = []
    for outcome, item_id in zip(outcomes, ids, strict=True):
        kept = idem is not None and isinstance(outcome, EnqueueResult)
        item = answers.batch_item(outcome, outcome.request_id if kept else item_id)
        # Under a key, a job's state as it was when decided: the same answer every time.
        at = _decided_ms(outcome) if kept else None
        items.append(shown(item, at) if "state" in item and "error" not in item else item)
    return Answer(201, {"jobs": items, "count": len(items)}, rated)


def _envelope_of(job: Any) -> Envelope:
    """A job to enqueue as the core reads it (its queue, its type); 400 for an invalid job."""
    parsed = parse_request(job)
    if isinstance(parsed, GatewayError):
        raise ApiError(400, parsed.code, parsed.message)
    return parsed.envelope


async def get_job(request: HttpRequest, binding: Binding, _: str) -> Answer:
    job = await transitions.known_job(binding, request.path_params["job_id"])
    return Answer(200, {"job": shown(job)})


@privileged
async def cancel_job(request: HttpRequest, binding: Binding, request_id: str) -> Answer:
    """Ask the processor to cancel; it writes the cancellation for the job's worker."""
    job_id = request.path_params["job_id"]
    job = await transitions.known_job(binding, job_id)
    ack = await transitions.ask(binding, caller(request, request_id), job, "job.cancelled")
    moved = transitions.moved(binding, ack, job_id, "cancel")
    return Answer(200, {"job": {**shown(moved), "previous_state": ack.previous_state}})


async def _settled(binding: Binding, result: EnqueueResult, sent: float) -> None:
    """This view shows what the answer reports: a new job at once, as its record will hold
    it (the same core function builds both). A job a replace cancelled, or an update
    changed, once its record is read (or a later one), waiting for it since `sent`, when
    the request was sent: the processor derives those from its stored record, which this
    process may not have seen yet (caught_up.py)."""
    # The job as the decision record holds it (the SDK's `job` is it as shown to callers).
    decided = result.record.get("job")
    if not isinstance(decided, dict):
        return
    if result.outcome in (Outcome.ACCEPTED, Outcome.REPLACED):
        partition = int(result.record["source"]["partition"])
        job = stored_job(decided, result.unique_key, partition)
        binding.view.provisional(str(job["id"]), job)
    if result.outcome is Outcome.REPLACED and result.cancelled_job_id:
        cancelled = {"state": str(State.CANCELLED)}
        await caught_up.wait(binding.view.versions, result.cancelled_job_id, cancelled, sent)
    elif result.outcome is Outcome.UPDATED:
        changed = {c["field"]: c["to"] for c in result.record.get("updated_fields") or []}
        await caught_up.wait(binding.view.versions, str(decided["id"]), changed, sent)


def _header_key(request: HttpRequest) -> str | None:
    """The `Idempotency-Key` header, if sent; a bad one is 400 naming it. Blanks around it are
    no part of the value (RFC 9110 §5.5), whichever of them the HTTP parser left."""
    key = request.headers.get(wire.HTTP_IDEMPOTENCY_KEY)
    if key is None:
        return None
    key = key.strip(" \t")
    problem = key_problem(key, f"the {wire.HTTP_IDEMPOTENCY_KEY} header")
    if problem is not None:
        raise ApiError(400, problem.code, problem.message)
    return key


def _batch_key(header: str | None, body: dict[str, Any]) -> str | None:
    """A batch's idempotency key: the header's or the body's (OJS bulk `idempotency_key`),
    which must agree when both are sent."""
    if "idempotency_key" not in body:
        return header
    key = body["idempotency_key"]
    problem = key_problem(key, "idempotency_key")
    if problem is not None:
        raise ApiError(400, problem.code, problem.message)
    if header is not None and header != key:
        raise ApiError(
            400, INVALID_REQUEST,
            f"the {wire.HTTP_IDEMPOTENCY_KEY} header and the body's idempotency_key differ; "
            "send one key",
        )  # fmt: skip
    return str(key)


def _as_first(answer: ApiError, result: EnqueueResult, key: str) -> ApiError:
    """A refusal under an idempotency key names the request it answers (the first one, for
    an answer given again), and a reused key names the key."""
    details = {"idempotency_key": key} if answer.code == IDEMPOTENCY_KEY_REUSED else None
    return replace(answer, request_id=result.request_id, details=details or answer.details)


def _refuse_reused(outcomes: list[Any], key: str) -> None:
    """A batch under a key that named another batch: 422, naming the key and the items."""
    items = [
        {"index": index, "code": o.error.code, "message": o.error.message}
        for index, o in enumerate(outcomes)
        if isinstance(o, EnqueueResult) and o.error is not None
        and o.error.code == IDEMPOTENCY_KEY_REUSED
    ]  # fmt: skip
    if not items:
        return
    raise ApiError(
        422, IDEMPOTENCY_KEY_REUSED,
        f"idempotency key {key!r} was used with another batch within its window (items "
        f"{', '.join(str(i['index']) for i in items)} differ, or the number of jobs does); "
        "send the same batch to get its answers, or use a new key",
        details={"idempotency_key": key, "errors": items},
    )  # fmt: skip


def _decided_ms(outcome: EnqueueResult) -> int | None:
    decided = outcome.record.get("decided_at")
    return parse_rfc3339(decided) if isinstance(decided, str) else None


def _item_request_id(job: Any, request_id: str, index: int) -> str:
    own = job.get("request_id") if isinstance(job, dict) else None
    return own if isinstance(own, str) and own else f"{request_id}.{index}"
