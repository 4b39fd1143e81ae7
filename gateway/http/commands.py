"""Sending queue and cron commands to the processor and waiting for its answers.

The binding decides nothing here either: it sends the command (sdk/commands.py)
and reports what the processor answered (stage/commands.py).
"""

from __future__ import annotations

from typing import Any

from gateway.core import EventOutcome
from gateway.core.actor import Actor
from gateway.http import errors
from gateway.http.binding import Binding
from gateway.http.errors import ApiError
from gateway.http.transitions import PUBLISH_TIMEOUT_S
from gateway.sdk import ClientError
from gateway.sdk.prepare import Outgoing


async def send(
    binding: Binding, actor: Actor, commands: list[Outgoing], what: str
) -> list[dict[str, Any]]:
    """Every command's answer, sent for `actor` (caller.py); else raises the first error: a
    refusal (400) or no answer (503)."""
    try:
        answers = await binding.client.send_commands(
            commands, timeout=PUBLISH_TIMEOUT_S, actor=actor
        )
    except ClientError as exc:
        message = f"{what}: no answer in time ({exc.message}); it may still apply"
        raise ApiError(503, errors.UNAVAILABLE, message, retryable=True) from None
    records: list[dict[str, Any]] = []
    for answer in answers:
        if isinstance(answer, ClientError):
            raise ApiError(503, errors.UNAVAILABLE, f"{what}: {answer.message}", retryable=True)
        if answer.get("outcome") == EventOutcome.INVALID:
            error = answer.get("error") or {}
            raise ApiError(400, str(error.get("code")), f"{what}: {error.get('message')}")
        records.append(answer)
    return records


async def partitions(binding: Binding) -> int:
    """How many partitions the processor's topics have; 503 if the SDK cannot say."""
    try:
        return await binding.client.partitions(PUBLISH_TIMEOUT_S)
    except ClientError as exc:
        raise ApiError(503, errors.UNAVAILABLE, exc.message, retryable=True) from None
