"""The worker routes: fetch claims jobs, ack completes one, nack reports a failure,
heartbeat extends the leases of a worker's active jobs.

Fetch proposes candidates from the view (queues left to right, each in
priority then ready-time order) and claims each with a job.started event
(carrying the request's `visibility_timeout_ms`, the lease the processor
sets); a job is handed out only once the processor has confirmed available →
active for it, so any number of serve processes never hand out one job twice.
Fetch never leaves a job active that it did not hand out: it answers with
every job it claimed, even when another claim failed, and a claim whose answer
did not come in time is followed, on the same key, by a requeue (job.enqueued,
active → available), which undoes it if it was applied; the lease is the
second safety net. Ack, nack and heartbeat ask the processor likewise and
answer in the OJS shapes.

A job of a key with a concurrency limit is proposed only while the view counts a
free slot for it (core/concurrency.py's rule); a key whose claim the processor
refuses as full (the view has not read a start yet) is asked no more in this fetch.
Likewise a rate-limited job (core/rates.py) is proposed only while the view of its rate
key's state shows a permit, at this server's clock; its claim goes to the key's home,
which decides; one it refuses (`rate_limited`) stops that rate key for this fetch, and
the fetch goes on to the next eligible job (none: `jobs: []`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from starlette.requests import Request

from gateway.core import INVALID_REQUEST, EventOutcome, State, job_effective_state, past_expiry
from gateway.core.actor import Actor
from gateway.core.concurrency import CONCURRENCY_LIMIT, limit_of, slot_free
from gateway.core.queues import QUEUE_PAUSED
from gateway.core.rate_policy import JOB_FIELD as RATE_FIELD
from gateway.core.rates import RATE_LIMITED
from gateway.core.tenants import tenant_of
from gateway.core.times import format_rfc3339
from gateway.http import access, transitions
from gateway.http.access import EVERYTHING, Scope
from gateway.http.answers import Answer
from gateway.http.binding import Binding
from gateway.http.caller import caller
from gateway.http.errors import ApiError
from gateway.http.fetch_rates import FULL_SEP, rate_keys, rate_permit, rate_slot
from gateway.http.shared import paused_queues, shown
from gateway.http.worker_bodies import (
    ACK_FIELDS,
    FETCH_FIELDS,
    HEARTBEAT_FIELDS,
    NACK_FIELDS,
    check_worker_description,
    count_of,
    heartbeat_job_ids,
    nack_error,
    queues_of,
    settle_body,
    visibility_timeout,
    worker_body,
    worker_id_of,
)
from gateway.randomness import random_hex
from gateway.sdk import ClientError

log = logging.getLogger("gateway.http.workers")

# A claim this process has in flight: other local fetches skip it meanwhile (at most this long).
CLAIM_MEMORY_S = 5.0
PAUSED = object()  # a claim's answer: the job's queue is paused


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Full(str):
    """A claim's answer: the keys named (a unique key, or rate keys as `rate_slot`, apart by
    FULL_SEP) run or start as many jobs as their limits allow now."""


async def fetch(request: Request, binding: Binding, request_id: str) -> Answer:
    body = await worker_body(
        request, binding, FETCH_FIELDS, "{queues, count, visibility_timeout_ms}"
    )
    queues = queues_of(body.get("queues"))
    for queue in queues:
        access.permit(queue)
    count = count_of(body)
    lease = visibility_timeout(body)
    fields: dict[str, Any] = {} if lease is None else {"visibility_timeout_ms": lease}
    worker_id = worker_id_of(body, required=False)
    if worker_id is not None:
        fields["worker_id"] = worker_id  # kept on each job it takes: who runs it
    claimed: list[dict[str, Any]] = []
    problems: list[ApiError] = []
    tried: set[str] = set()
    full: set[str] = set()  # keys the processor said are full
    # Queues this view shows paused are not asked; one whose claim the processor refuses
    # as paused (this view has not read the pause yet) is asked no more.
    wanted = [q for q in queues if q not in paused_queues(binding)]
    actor, scope = caller(request, request_id), access.scope()
    while len(claimed) < count and not problems:
        # Never more claims than jobs wanted: a claimed job is active, it must be handed out.
        candidates = _candidates(binding, wanted, count - len(claimed), tried, full, scope)
        if not candidates:
            break
        tried.update(j["id"] for j in candidates)
        answers = await asyncio.gather(*(_claim(binding, actor, j, fields) for j in candidates))
        for job, answer in zip(candidates, answers, strict=True):
            if isinstance(answer, ApiError):
                problems.append(answer)
            elif answer is PAUSED:
                wanted = [q for q in wanted if q != job.get("queue")]
            elif isinstance(answer, Full):
                full.update(answer.split(FULL_SEP))
            elif isinstance(answer, dict):
                claimed.append(shown(answer))
    if problems and not claimed:
        raise problems[0]
    out: dict[str, Any] = {"jobs": claimed}
    if claimed:
        out["job"] = claimed[0]
    return Answer(200, out)


def _candidates(
    binding: Binding, queues: list[str], wanted: int, tried: set[str], full: set[str],
    scope: Scope = EVERYTHING,
) -> list[dict[str, Any]]:  # fmt: skip
    """Due jobs of the queues, left to right, not claimed by this process just now, none
    beyond a free slot of its key (`full`: keys known to have none), of the caller's
    tenants (`scope`) if it names some."""
    at, found = now_ms(), list[dict[str, Any]]()
    taken: dict[str, int] = {}  # slots this proposal takes, per key
    recent = binding.claims
    for job_id, until in list(recent.items()):
        if until < time.monotonic():
            del recent[job_id]
    for queue in queues:
        for job_id in binding.view.waiting(queue, scope.tenants):
            if len(found) == wanted:
                return found
            if job_id in tried or job_id in recent:
                continue
            job = binding.view.get(job_id)
            if (
                job is not None
                and job_effective_state(job, at) is State.AVAILABLE
                and not past_expiry(job, at)
                and scope.sees_tenant(tenant_of(job))
                and _slot(binding, job, taken, full, at)
            ):
                found.append(job)
    return found


def _slot(
    binding: Binding, job: dict[str, Any], taken: dict[str, int], full: set[str], at: int
) -> bool:
    """Whether the job's key has a slot for it beside the jobs proposed already (taken), and
    its rate key a permit."""
    if not rate_permit(binding, job, taken, full, at):
        return False
    limit, key = limit_of(job), job.get("unique_key")
    if limit is None or not isinstance(key, str):
        return True
    if key in full:
        return False
    if key not in taken:  # running, and being claimed by this process's other fetches
        claiming = (binding.view.get(i) for i in list(binding.claims))
        taken[key] = binding.view.active_under(key) + sum(
            1
            for j in claiming
            if j is not None and j.get("unique_key") == key and j.get("state") != State.ACTIVE
        )
    if not slot_free(limit, taken[key]):
        return False
    taken[key] += 1
    return True


async def _claim(
    binding: Binding, actor: Actor, job: dict[str, Any], fields: dict[str, Any]
) -> dict[str, Any] | ApiError | object | None:
    """The job, active, if the processor gave it to us; PAUSED if its queue is paused;
    Full if its key runs as many jobs as its limit, or its rate key has no permit now; None
    if it went elsewhere."""
    binding.claims[job["id"]] = time.monotonic() + CLAIM_MEMORY_S
    # The claim's own name: a requeue undoes this claim, never another fetch's.
    claim_id = random_hex()
    if isinstance(job.get(RATE_FIELD), dict):
        fields = {**fields, RATE_FIELD: job[RATE_FIELD]}  # sent to its rate key's home
    try:
        try:
            ack = await transitions.ask(
                binding, actor, job, "job.started", claim_id=claim_id, **fields
            )
        except ApiError as error:
            if transitions.timed_out(error):
                await _requeue(binding, actor, job, claim_id)
            return error
        moved = ack.record.get("job")
        if ack.error is not None and ack.error.code == QUEUE_PAUSED:
            return PAUSED
        if ack.error is not None and ack.error.code == CONCURRENCY_LIMIT:
            return Full(job["unique_key"])
        if ack.error is not None and ack.error.code == RATE_LIMITED:
            # Which of its keys refused, the answer does not say: each is full for this fetch.
            needed = rate_keys(binding, job)
            return Full(FULL_SEP.join(rate_slot(p.key) for p in needed)) if needed else None
        if ack.outcome != EventOutcome.APPLIED or not isinstance(moved, dict):
            return None
        transitions.answered(binding, moved)
        # Past its expires_at the claim discarded the job instead (core.apply_job_event).
        return moved if moved.get("state") == State.ACTIVE else None
    finally:
        binding.claims.pop(job["id"], None)


async def _requeue(binding: Binding, actor: Actor, job: dict[str, Any], claim_id: str) -> None:
    """After a claim with no answer: job.enqueued on the same key, so it comes after the
    claim in the key's log and undoes it if it was applied (an available job ignores it,
    and the core refuses it for a job another fetch claimed). A rate-limited job's claim
    went to its rate key's home: so does the requeue, which the home sends on after it."""
    event = {"job_id": job["id"], "type": "job.enqueued", "claim_id": claim_id}
    if job.get("unique_key"):
        event["unique_key"] = job["unique_key"]
    if isinstance(job.get(RATE_FIELD), dict):
        event[RATE_FIELD] = job[RATE_FIELD]
    try:
        await binding.client.publish_event(event, wait=False, actor=actor)
    except ClientError as exc:  # the lease is the second safety net
        log.warning(
            "could not requeue a claim with no answer; its lease will return it",
            extra={"job_id": job["id"], "error": str(exc)},
        )


async def heartbeat(request: Request, binding: Binding, request_id: str) -> Answer:
    """OJS BEAT: extend the lease of each active job named (one job.heartbeat each).

    Answers `state` (always `running`: this gateway sends no directive), `directive`,
    `jobs_extended` (the jobs whose lease the processor extended), `server_time` and,
    per job, what the processor said (`jobs`: job_id, extended, state,
    lease_expires_at, or the error)."""
    body = await worker_body(
        request, binding, HEARTBEAT_FIELDS, "{worker_id, active_jobs, visibility_timeout_ms}"
    )
    worker_id_of(body, required=True)
    check_worker_description(body)
    ids = heartbeat_job_ids(body)
    lease = visibility_timeout(body)
    fields = {} if lease is None else {"visibility_timeout_ms": lease}
    actor, sees = caller(request, request_id), access.scope().sees_job
    results = await asyncio.gather(*(_beat(binding, actor, sees, job_id, fields) for job_id in ids))
    return Answer(
        200,
        {
            "state": "running", "directive": "",
            "jobs_extended": [r["job_id"] for r in results if r["extended"]],
            "server_time": format_rfc3339(now_ms()), "jobs": list(results),
        },
    )  # fmt: skip


async def _beat(
    binding: Binding, actor: Actor, sees: Callable[[Mapping[str, Any]], bool], job_id: str,
    fields: dict[str, Any],
) -> dict[str, Any]:  # fmt: skip
    # Not found, or of a queue or tenant the caller does not reach (the same): said for that
    # job alone.
    job = await binding.job(job_id, sees)
    if job is None:
        error = _error_of(transitions.not_found(job_id))
        return {"job_id": job_id, "extended": False, "error": error}
    answer = await transitions.try_ask(binding, actor, job, "job.heartbeat", **fields)
    if isinstance(answer, ApiError):
        return {"job_id": job_id, "extended": False, "error": _error_of(answer)}
    moved = answer.record.get("job")
    if answer.outcome is EventOutcome.APPLIED and isinstance(moved, dict):
        transitions.answered(binding, moved)
        return {
            "job_id": job_id, "extended": True, "state": moved.get("state"),
            "lease_expires_at": moved.get("lease_expires_at"),
        }  # fmt: skip
    refused = transitions.refused(answer, job_id, "heartbeat") or ApiError(
        409, INVALID_REQUEST, f"cannot heartbeat: job {job_id} is {answer.state}"
    )
    return {
        "job_id": job_id, "extended": False, "state": answer.state,
        "error": _error_of(refused),
    }  # fmt: skip


def _error_of(error: ApiError) -> dict[str, Any]:
    return {
        "code": error.code, "message": error.message, "retryable": error.retryable,
        "details": error.details,
    }  # fmt: skip


async def ack(request: Request, binding: Binding, request_id: str) -> Answer:
    body = await settle_body(request, binding, ACK_FIELDS)
    fields = {"result": body["result"]} if body.get("result") is not None else {}
    actor = caller(request, request_id)
    moved = await _settle(binding, actor, body["job_id"], "job.completed", "ack", fields)
    return Answer(
        200,
        {
            "acknowledged": True, "job_id": moved["id"], "id": moved["id"],
            "state": moved["state"], "completed_at": moved.get("completed_at"),
            "attempt": moved.get("attempt"), "job": shown(moved),
        },
    )  # fmt: skip


async def nack(request: Request, binding: Binding, request_id: str) -> Answer:
    """One failed attempt: the processor retries it (with backoff) or discards it."""
    body = await settle_body(request, binding, NACK_FIELDS)
    error = nack_error(body)
    actor = caller(request, request_id)
    moved = await _settle(binding, actor, body["job_id"], "job.failed", "nack", {"error": error})
    out = {
        "job_id": moved["id"], "id": moved["id"], "state": moved["state"],
        "attempt": moved.get("attempt"), "max_attempts": moved.get("max_attempts"),
    }  # fmt: skip
    # retry_delay_ms beside next_attempt_at: what OJS clients and the conformance suite read.
    for stamp in ("next_attempt_at", "retry_delay_ms", "discarded_at", "completed_at"):
        if moved.get(stamp) is not None and (stamp != "retry_delay_ms" or "next_attempt_at" in out):
            out[stamp] = moved[stamp]
    out["job"] = shown(moved)
    return Answer(200, out)


async def _settle(
    binding: Binding, actor: Actor, job_id: str, event_type: str, action: str,
    fields: dict[str, Any],
) -> dict[str, Any]:  # fmt: skip
    """Ask the processor, for `actor`, to end an attempt; the job as it moved (this view
    shows it so)."""
    job = await transitions.known_job(binding, job_id)
    answer = await transitions.ask(binding, actor, job, event_type, **fields)
    return transitions.moved(binding, answer, job["id"], action)
