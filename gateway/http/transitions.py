"""Asking the processor to move a job: a job event with a reply, answered from the reply.

The binding never decides a transition. It sends the event (keyed by the
job's route, as every record about the job) and waits for the processor's
answer, which may come before its commit (early answers); the reply says
whether the job moved and carries the job as it then stands, which this
process's view shows at once (a provisional entry, see view/provisional.py).
Refusals become 409 with the core's code.
"""

from __future__ import annotations

from typing import Any

from gateway.core import INVALID_REQUEST, PAYLOAD_TOO_LARGE, EventOutcome, IgnoredReason
from gateway.core.actor import Actor
from gateway.http import access, errors
from gateway.http.binding import Binding
from gateway.http.errors import ApiError
from gateway.sdk import ClientError, EnqueueTimeout, EventAck, InvalidEvent

PUBLISH_TIMEOUT_S = 10.0


def not_found(job_id: str) -> ApiError:
    return errors.not_found("job", job_id, f"no job {job_id} is known to this gateway")


async def known_job(binding: Binding, job_id: str) -> dict[str, Any]:
    """The job as the view holds it (Binding.job); 404 if no job has that id, or the
    caller does not see its queue or its tenant (access.scope): the same answer, so the
    caller learns nothing of a job it may not reach."""
    job = await binding.job(job_id, access.scope().sees_job)
    if job is None:
        raise not_found(job_id)
    return job


def timed_out(error: ApiError) -> bool:
    """The event was sent but no answer came in time: it may yet be applied."""
    return bool(error.details.get("sent"))


async def ask(
    binding: Binding, actor: Actor, job: dict[str, Any], event_type: str, **fields: Any
) -> EventAck:
    """Send the event for `job`, for `actor` (caller.py), and wait for the processor's answer;
    raises the 400 (413) of an event the core refuses, or the 503 of no answer."""
    event = {"job_id": job["id"], "type": event_type, **fields}
    if job.get("unique_key"):
        event["unique_key"] = job["unique_key"]
    try:
        ack = await binding.client.publish_event(
            event, wait=True, timeout=PUBLISH_TIMEOUT_S, actor=actor
        )
    except InvalidEvent as exc:  # the core refused the event itself: nothing was sent
        raise ApiError(
            413 if exc.code == PAYLOAD_TOO_LARGE else 400, exc.code,
            f"the {event_type} event is refused: {exc.message}",
            details={"job_id": job["id"], "event_type": event_type},
        ) from None  # fmt: skip
    except EnqueueTimeout as exc:  # sent, maybe applied: the caller may have to undo it
        raise ApiError(
            503, errors.UNAVAILABLE,
            f"no answer to the {event_type} event in time ({exc.message}); it may still apply",
            retryable=True, details={"job_id": job["id"], "event_type": event_type, "sent": True},
        ) from None  # fmt: skip
    except ClientError as exc:
        raise ApiError(
            503, errors.UNAVAILABLE,
            f"the {event_type} event may not be recorded: {exc.message}", retryable=True,
        ) from None  # fmt: skip
    assert isinstance(ack, EventAck)
    return ack


async def try_ask(
    binding: Binding, actor: Actor, job: dict[str, Any], event_type: str, **fields: Any
) -> EventAck | ApiError:
    """`ask`, its error as a value: for an answer about several jobs, each with its own."""
    try:
        return await ask(binding, actor, job, event_type, **fields)
    except ApiError as error:
        return error


def refused(ack: EventAck, job_id: str, operation: str) -> ApiError | None:
    """None if the job moved; else the 409 (or 404) the processor's answer amounts to."""
    if ack.outcome is EventOutcome.APPLIED:
        return None
    if ack.reason == IgnoredReason.UNKNOWN_JOB:
        return not_found(job_id)
    state = ack.state
    if ack.error is not None:
        code, message = ack.error.code, ack.error.message
    else:  # unchanged: the job is already where the operation would take it
        code, message = INVALID_REQUEST, f"job {job_id} is already {state}"
    return ApiError(
        409, code, f"cannot {operation}: {message}",
        details={"job_id": job_id, "current_state": state},
    )  # fmt: skip


def moved(binding: Binding, ack: EventAck, job_id: str, operation: str) -> dict[str, Any]:
    """The job as the processor moved it, which this process's view shows from now on;
    raises the 409 (or 404) of an answer that did not move it."""
    refusal = refused(ack, job_id, operation)
    if refusal is not None:
        raise refusal
    job: dict[str, Any] = ack.record["job"]
    answered(binding, job)
    return job


def answered(binding: Binding, job: dict[str, Any]) -> None:
    """The job as the processor's answer left it: this process's view shows it from now on,
    so a GET right after the answer agrees with it."""
    binding.view.provisional(str(job["id"]), job)
