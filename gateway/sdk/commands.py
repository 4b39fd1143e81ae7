"""Queue, cron, rate and tenant commands as the records the SDK produces (see
core/queues.py, core/crons.py, core/rate_policy.py, core/tenant_limits.py).

Pure. A queue command goes to every partition of `requests`, so each partition
applies it in its own log; a cron command goes to its key's partition, where
the cron lives; a rate command to its rate key's home, a tenant's to its tenant's. Send them with
`Client.send_commands`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from gateway import wire
from gateway.core.crons import CronCommand, command_record
from gateway.core.queue_rates import queue_rate_command
from gateway.core.queues import Version, queue_command, version_after
from gateway.core.rate_policy import Override, RateLimit, rate_command
from gateway.core.tenant_limits import (
    TenantLimits,
    concurrency_key,
    concurrency_override,
    parse_limits,
    tenant_command,
)
from gateway.randomness import random_hex
from gateway.sdk.prepare import Outgoing


def queue_commands(
    queue: str, paused: bool, partitions: int, seen: Mapping[str, Any] | None = None
) -> list[Outgoing]:
    """Pause (or resume) `queue`: one command per partition, all alike, versioned by this
    clock and a random id, past the queue state the sender has `seen` (core/queues.py: the
    newest command wins on every partition)."""
    what = "pause" if paused else "resume"
    return _to_every_partition(
        queue, wire.QUEUE_COMMAND, what, lambda v: queue_command(queue, paused, v), partitions,
        seen,
    )  # fmt: skip


def queue_rate_commands(
    queue: str, policy: RateLimit | None, partitions: int, seen: Mapping[str, Any] | None = None
) -> list[Outgoing]:
    """Set (or, None, clear) `queue`'s rate limit: one command per partition, versioned as a
    pause is (core/queue_rates.py)."""
    return _to_every_partition(
        queue, wire.QUEUE_RATE_COMMAND, "rate",
        lambda v: queue_rate_command(queue, policy, v), partitions, seen,
    )  # fmt: skip


def _to_every_partition(
    queue: str, kind: bytes, what: str, command: Callable[[Version], bytes], partitions: int,
    seen: Mapping[str, Any] | None,
) -> list[Outgoing]:  # fmt: skip
    """A queue's command, alike on every partition, versioned past the state `seen`."""
    command_id = random_hex()
    value = command(version_after(time.time_ns() // 1_000_000, command_id, seen))
    request_id = f"queue/{queue}/{what}/{command_id}"
    headers = ((wire.KIND_HEADER, kind),)
    return [
        Outgoing(value, wire.queue_key(queue), request_id, None, headers=headers, partition=p)
        for p in range(partitions)
    ]


def cron_commands(command: CronCommand) -> list[Outgoing]:
    request_id = f"cron/{command.name}/{command.op}/{random_hex()}"
    headers = ((wire.KIND_HEADER, wire.CRON_COMMAND),)
    key = wire.cron_key(command.name)
    return [Outgoing(command_record(command), key, request_id, None, headers=headers)]


def rate_commands(key: str, override: Override | None) -> list[Outgoing]:
    """Set (or, None, clear) the override of rate key `key`, at the key's home."""
    request_id = f"rate/{key}/{'set' if override is not None else 'clear'}/{random_hex()}"
    headers = ((wire.KIND_HEADER, wire.RATE_COMMAND),)
    value = rate_command(key, override)
    return [Outgoing(value, wire.rate_home(key), request_id, None, headers=headers)]


def tenant_commands(tenant: str, given: Mapping[str, Any], reason: str | None) -> list[Outgoing]:
    """Change the limits of `tenant` that `given` names (PUT's body, checked), at its home;
    a max_concurrency named also sets the override of its concurrency key, at that key's
    home, so that jobs admitted before are held by the new limit (core/tenant_limits.py)."""
    request_id = f"tenant/{tenant}/limits/{random_hex()}"
    headers = ((wire.KIND_HEADER, wire.TENANT_COMMAND),)
    value = tenant_command(tenant, given, reason)
    sent = [Outgoing(value, wire.tenant_home(tenant), request_id, None, headers=headers)]
    if "max_concurrency" in given:
        named = parse_limits({"max_concurrency": given["max_concurrency"]}, TenantLimits())[0]
        sent += rate_commands(concurrency_key(tenant), concurrency_override(named))
    return sent
