"""A queue's paused state: the command that sets it and the rule that follows from it.

A paused queue hands out nothing: a claim (job.started) of one of its jobs is
refused with `queue_paused`, while its enqueues are still decided and stored.
The processor holds the state per partition, set by a command written to every
partition of `requests` (each partition applies it in its own log order, so a
claim after the pause in a partition's log is refused there, and replay and
explain refuse it too); the edges only send commands and show what the
processor published.

Two clients pausing and resuming at once send their commands to every partition
separately, so partitions may read them in different orders. Each command
carries its `version` (the sender's clock and a random id), and a partition
takes a command only if it is newer than the one it holds: every partition ends
in the state of the newest command, whatever the order, and so does a view
that keeps the newest version it has read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.core.envelope import QUEUE_NAME_RULE, is_valid_queue_name
from gateway.core.errors import INVALID_REQUEST, GatewayError
from gateway.core.limits import MAX_ID_BYTES, MAX_INSTANT_MS
from gateway.core.times import format_rfc3339

QUEUE_PAUSED = "queue_paused"


Version = tuple[int, str]  # the sender's clock (ms) and a random id: newer wins
_SHAPE = '{"queue": <name>, "paused": true|false, "version": [<ms>, <id>]}'


@dataclass(frozen=True, slots=True)
class QueueCommand:
    queue: str
    paused: bool
    version: Version


def parse_queue_command(data: bytes | str) -> QueueCommand | GatewayError:
    """The command, or why not."""
    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        return GatewayError(INVALID_REQUEST, f"the queue command is not valid JSON: {exc}")
    if not isinstance(raw, Mapping) or set(raw) != {"queue", "paused", "version"}:
        return GatewayError(INVALID_REQUEST, f"a queue command is {_SHAPE}")
    queue, paused, version = raw["queue"], raw["paused"], version_of(raw)
    if not isinstance(queue, str) or not is_valid_queue_name(queue):
        return GatewayError(INVALID_REQUEST, f"a queue name is {QUEUE_NAME_RULE}")
    if not isinstance(paused, bool):
        return GatewayError(INVALID_REQUEST, "paused must be true or false")
    if version is None:
        return GatewayError(INVALID_REQUEST, f"a queue command is {_SHAPE}")
    return QueueCommand(queue, paused, version)


def version_of(record: Mapping[str, Any]) -> Version | None:
    """A command's or a published state's version; None if it has none that is valid."""
    version = record.get("version")
    if not isinstance(version, list) or len(version) != 2:
        return None
    at, name = version
    if not isinstance(at, int) or isinstance(at, bool) or not isinstance(name, str):
        return None
    # A clock's reading: one past the calendar could not be passed (version_after) nor printed.
    return (at, name) if 0 <= at < MAX_INSTANT_MS and 0 < len(name) <= MAX_ID_BYTES else None


def version_after(now_ms: int, command_id: str, seen: Mapping[str, Any] | None) -> Version:
    """A new command's version: the sender's clock, but past the version of the state the
    sender has seen (`seen`), so a command sent after another's answer is newer than it
    whatever the two senders' clocks say (a resume in the millisecond of its pause, or from
    a host whose clock is behind, would otherwise lose to it)."""
    held = None if seen is None else version_of(seen)
    return (now_ms if held is None else max(now_ms, held[0] + 1), command_id)


def queue_command(queue: str, paused: bool, version: Version) -> bytes:
    return orjson.dumps({"queue": queue, "paused": paused, "version": list(version)})


def newer(command: QueueCommand, held: Mapping[str, Any] | None) -> bool:
    """Whether the command changes the state a partition holds (`held`: its last one)."""
    return newer_than(command.version, held)


def newer_state(state: Mapping[str, Any], held: Mapping[str, Any] | None) -> bool:
    """Whether a published state replaces `held` (a view's, or another answer's): the rule
    a partition takes commands by, so views end where the partitions do."""
    version = version_of(state)
    return version is not None and newer_than(version, held)


def newer_than(version: Version, held: Mapping[str, Any] | None) -> bool:
    held_version = None if held is None else version_of(held)
    return held_version is None or version > held_version


def queue_state(command: QueueCommand, at_ms: int) -> dict[str, Any]:
    """What the processor keeps and publishes for a queue after a command at `at_ms`."""
    stamp = "paused_at" if command.paused else "resumed_at"
    return {
        "queue": command.queue,
        "paused": command.paused,
        "status": "paused" if command.paused else "active",
        stamp: format_rfc3339(at_ms),
        "version": list(command.version),
    }


def paused_refusal(job_id: str, queue: str) -> GatewayError:
    return GatewayError(
        QUEUE_PAUSED, f"queue {queue} is paused: job {job_id} is not handed out until it resumes"
    )
