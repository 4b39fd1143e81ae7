"""A queue's rate limit (OJS rate limiting §7.2): limits that hold every job of a queue
beside its own. They are a rate key's, `queue:<queue>` (core/rates.py decides its permits
at its home, exactly as a job's own key's), and a claim of a waiting job of the queue needs
a permit of it too, so that all limits are met: a job with a rate limit of its own starts
only with a permit of each key (its own key being `queue:<queue>` too, the queue's limits
are the ones that key is decided by).

The queue's limits are set by a command written to every partition (as a pause,
core/queues.py: versioned, the newest wins on every partition whatever the order), so
each route knows, in its own log order, which claims need the queue's key; a command with
no limits clears them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.core.envelope import QUEUE_NAME_RULE, is_valid_queue_name
from gateway.core.errors import INVALID_REQUEST, GatewayError, Invalid, invalid_request
from gateway.core.queues import Version, newer_than, version_of
from gateway.core.rate_policy import RateLimit, parse_rate_limit, policy_of
from gateway.core.times import format_rfc3339

_SHAPE = '{"queue": <name>, "rate_limit": {...} | null, "version": [<ms>, <id>]}'
_FIELDS = frozenset({"concurrency", "rate", "period", "max_per_second"})


QUEUE_KEY = "queue:"  # + queue: the rate key of a queue's limits


def queue_rate_key(queue: str) -> str:
    return QUEUE_KEY + queue


@dataclass(frozen=True, slots=True)
class QueueRateCommand:
    queue: str
    policy: RateLimit | None  # None: the queue's limits cleared
    version: Version


def parse_queue_limits(raw: object, queue: str) -> RateLimit:
    """PUT /ojs/v1/admin/queues/{name}/rate-limit's body: `{"concurrency", "rate": {"limit",
    "period"}}` (or a job rate limit's other shapes, without key and on_limit); raises
    Invalid naming the field."""
    if not isinstance(raw, Mapping):
        raise invalid_request(
            'a queue rate limit is {"concurrency": n, "rate": {"limit": n, "period": "PT1S"}}'
        )
    unknown = sorted(str(k) for k in raw if k not in _FIELDS)
    if unknown:
        raise invalid_request(f"{unknown[0]} is not a field of a queue's rate limit; use "
                              "concurrency, rate {limit, period}")  # fmt: skip
    parsed = parse_rate_limit({**raw, "key": queue_rate_key(queue)}, queue, "rate_limit")
    assert parsed is not None
    return parsed


def parse_queue_rate_command(data: bytes) -> QueueRateCommand | GatewayError:
    """The command, or why not."""
    try:
        raw = orjson.loads(data)
        if not isinstance(raw, Mapping) or set(raw) != {"queue", "rate_limit", "version"}:
            raise invalid_request(f"a queue rate command is {_SHAPE}")
        queue, given, version = raw["queue"], raw["rate_limit"], version_of(raw)
        if not isinstance(queue, str) or not is_valid_queue_name(queue):
            raise invalid_request(f"a queue name is {QUEUE_NAME_RULE}")
        policy = None if given is None else policy_of(given)
        if version is None or (given is not None and policy is None) or (
            policy is not None and policy.key != queue_rate_key(queue)
        ):  # fmt: skip
            raise invalid_request(f"a queue rate command is {_SHAPE}")
        return QueueRateCommand(queue, policy, version)
    except orjson.JSONDecodeError:
        return GatewayError(INVALID_REQUEST, "a queue rate command is JSON")
    except Invalid as exc:
        return exc.error


def queue_rate_command(queue: str, policy: RateLimit | None, version: Version) -> bytes:
    given = None if policy is None else policy.to_dict()
    return orjson.dumps({"queue": queue, "rate_limit": given, "version": list(version)})


def newer_rate(command: QueueRateCommand, held: Mapping[str, Any] | None) -> bool:
    return newer_than(command.version, held)


def queue_rate_state(command: QueueRateCommand, at_ms: int) -> dict[str, Any]:
    """What a partition keeps and publishes for the queue's limits after a command."""
    given = None if command.policy is None else command.policy.to_dict()
    return {"queue": command.queue, "rate_limit": given, "set_at": format_rfc3339(at_ms),
            "version": list(command.version)}  # fmt: skip


def policy_in(state: Mapping[str, Any] | None) -> RateLimit | None:
    """The queue's limits a kept or published state holds; None for none."""
    return None if state is None else policy_of(state.get("rate_limit"))


def needed(own: RateLimit | None, queue: RateLimit | None) -> tuple[RateLimit, ...]:
    """The keys a claim of a waiting job must hold a permit of, the queue's first; the
    job's own key, when it is the queue's, decided by the queue's limits."""
    if queue is None:
        return () if own is None else (own,)
    return (queue,) if own is None or own.key == queue.key else (queue, own)
