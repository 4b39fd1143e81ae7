"""A queue's paused state: the command that sets it and the rule that follows from it.

A paused queue hands out nothing: a claim (job.started) of one of its jobs is
refused with `queue_paused`, while its enqueues are still decided and stored.
The processor holds the state per partition, set by a command written to every
partition of `requests` (each partition applies it in its own log order, so a
claim after the pause in a partition's log is refused there, and replay and
explain refuse it too); the edges only send commands and show what the
processor published.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.core.envelope import QUEUE_NAME_RULE, is_valid_queue_name
from gateway.core.errors import INVALID_REQUEST, GatewayError
from gateway.core.times import format_rfc3339

QUEUE_PAUSED = "queue_paused"


@dataclass(frozen=True, slots=True)
class QueueCommand:
    queue: str
    paused: bool


def parse_queue_command(data: bytes | str) -> QueueCommand | GatewayError:
    """`{"queue": name, "paused": true|false}`, or why not."""
    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        return GatewayError(INVALID_REQUEST, f"the queue command is not valid JSON: {exc}")
    if not isinstance(raw, Mapping) or set(raw) != {"queue", "paused"}:
        return GatewayError(
            INVALID_REQUEST, 'a queue command is {"queue": <name>, "paused": true|false}'
        )
    queue, paused = raw["queue"], raw["paused"]
    if not isinstance(queue, str) or not is_valid_queue_name(queue):
        return GatewayError(INVALID_REQUEST, f"a queue name is {QUEUE_NAME_RULE}")
    if not isinstance(paused, bool):
        return GatewayError(INVALID_REQUEST, "paused must be true or false")
    return QueueCommand(queue, paused)


def queue_command(queue: str, paused: bool) -> bytes:
    return orjson.dumps({"queue": queue, "paused": paused})


def queue_state(command: QueueCommand, at_ms: int) -> dict[str, Any]:
    """What the processor publishes for a queue after a command at `at_ms`."""
    stamp = "paused_at" if command.paused else "resumed_at"
    return {
        "queue": command.queue,
        "paused": command.paused,
        "status": "paused" if command.paused else "active",
        stamp: format_rfc3339(at_ms),
    }


def paused_refusal(job_id: str, queue: str) -> GatewayError:
    return GatewayError(
        QUEUE_PAUSED, f"queue {queue} is paused: job {job_id} is not handed out until it resumes"
    )
