"""Moving a job on the binding's own authority (cancel, fetch, ack, nack), then publishing it.

The read model moves first, under its lock, so the next GET or fetch sees the
new state and no job is moved twice. The event then goes through the SDK,
which waits until the processor has applied it and committed, so the caller is
answered only once the next dedup decision on the key sees the transition. A
job without a unique key gets no event (the processor has nothing to release
and would refuse an event without a key).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Collection
from typing import Any

from gateway.core import State
from gateway.core.times import format_rfc3339
from gateway.http import errors
from gateway.http.answers import Answer
from gateway.http.binding import Binding
from gateway.http.errors import ApiError
from gateway.http.publisher import cancellation, job_event
from gateway.sdk import ClientError

INVALID_STATE = "invalid_state"
PUBLISH_TIMEOUT_S = 10.0


def now_ms() -> int:
    return time.time_ns() // 1_000_000


async def move(
    binding: Binding, job_id: str, event_type: str, expected: Collection[State]
) -> Answer | ApiError:
    at = now_ms()
    moved = binding.model.move(job_id, event_type, at, expected)
    if moved.refused == "not_found" or moved.job is None:
        return ApiError(404, errors.NOT_FOUND, f"no job {job_id} is known to this gateway")
    if moved.refused is not None:
        state = moved.job.get("state")
        return ApiError(
            409, INVALID_STATE,
            f"job {job_id} is {state}; {event_type} needs one of {', '.join(sorted(expected))}",
            details={"job_id": job_id, "state": state},
        )  # fmt: skip
    records: list[tuple[str, dict[str, Any]]] = []
    if event_type == "job.cancelled":
        key = moved.job.get("unique_key")
        record = cancellation(moved.job["id"], key, str(moved.previous), format_rfc3339(at))
        records.append(("cancellations", record))
    failure = await publish(binding, [moved.job], event_type, records)
    return failure or Answer(200, {"job": moved.job})


async def publish(
    binding: Binding,
    jobs: list[dict[str, Any]],
    event_type: str,
    extra: list[tuple[str, dict[str, Any]]] | None = None,
) -> ApiError | None:
    events = [job_event(j, event_type) for j in jobs if j.get("unique_key")]
    try:
        if extra:
            failure = await asyncio.to_thread(binding.publisher.send, extra, PUBLISH_TIMEOUT_S)
            if failure is not None:
                raise ClientError(errors.UNAVAILABLE, failure)
        await asyncio.gather(
            *(binding.client.publish_event(e, wait=True, timeout=PUBLISH_TIMEOUT_S) for e in events)
        )
    except ClientError as exc:
        return ApiError(
            503, errors.UNAVAILABLE,
            f"the {event_type} event may not be recorded: {exc.message}", retryable=True,
        )  # fmt: skip
    return None
