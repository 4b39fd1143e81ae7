"""Asking the processor to move a job: a job event with a reply, answered from the reply.

The binding never decides a transition. It sends the event (keyed by the
job's route, as every record about the job) and waits for the processor's
answer, which may come before its commit (early answers); the reply says
whether the job moved and carries the job as it then stands, which this
process's view shows at once (a provisional entry, see view.py). Refusals
become 409 with the core's code.
"""

from __future__ import annotations

from typing import Any

from gateway.core import INVALID_REQUEST, PAYLOAD_TOO_LARGE, EventOutcome, IgnoredReason
from gateway.http import errors
from gateway.http.binding import Binding
from gateway.http.errors import ApiError
from gateway.sdk import ClientError, EnqueueTimeout, EventAck, InvalidEvent

PUBLISH_TIMEOUT_S = 10.0


def not_found(job_id: str) -> ApiError:
    return ApiError(
        404, errors.NOT_FOUND, f"no job {job_id} is known to this gateway",
        details={"resource_type": "job", "resource_id": job_id},
    )  # fmt: skip


def timed_out(answer: EventAck | ApiError) -> bool:
    """The event was sent but no answer came in time: it may yet be applied."""
    return isinstance(answer, ApiError) and bool(answer.details.get("sent"))


async def ask(
    binding: Binding, job: dict[str, Any], event_type: str, **fields: Any
) -> EventAck | ApiError:
    """Send the event for `job` and wait for the processor's answer."""
    event = {"job_id": job["id"], "type": event_type, **fields}
    if job.get("unique_key"):
        event["unique_key"] = job["unique_key"]
    try:
        ack = await binding.client.publish_event(event, wait=True, timeout=PUBLISH_TIMEOUT_S)
    except InvalidEvent as exc:  # the core refused the event itself: nothing was sent
        return ApiError(
            413 if exc.code == PAYLOAD_TOO_LARGE else 400, exc.code,
            f"the {event_type} event is refused: {exc.message}",
            details={"job_id": job["id"], "event_type": event_type},
        )  # fmt: skip
    except EnqueueTimeout as exc:  # sent, maybe applied: the caller may have to undo it
        return ApiError(
            503, errors.UNAVAILABLE,
            f"no answer to the {event_type} event in time ({exc.message}); it may still apply",
            retryable=True, details={"job_id": job["id"], "event_type": event_type, "sent": True},
        )  # fmt: skip
    except ClientError as exc:
        return ApiError(
            503, errors.UNAVAILABLE,
            f"the {event_type} event may not be recorded: {exc.message}", retryable=True,
        )  # fmt: skip
    assert isinstance(ack, EventAck)
    return ack


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


def answered(binding: Binding, job: dict[str, Any]) -> None:
    """The job as the processor's answer left it: this process's view shows it from now on,
    so a GET right after the answer agrees with it."""
    binding.view.provisional(str(job["id"]), job)
