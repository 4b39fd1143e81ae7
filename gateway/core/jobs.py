"""Accepted jobs: ids and the job record published downstream.

Ids are reproducible. The core has no clock and no randomness: a UUIDv7 takes
its 48-bit timestamp from the decision time and its 74 "random" bits from
SHA-256 over (unique key, decision time, seed), where the seed identifies the
request (the processor passes its topic, partition and offset). Replaying the
log therefore reproduces every id exactly, and two requests never share one.
"""

from __future__ import annotations

import hashlib
from typing import Any

from gateway.core.envelope import Envelope
from gateway.core.states import State
from gateway.core.times import format_rfc3339

_UUID7_DOMAIN = b"gateway.uuid7\x00"


def uuid7(ms: int, unique_key: str | None, seed: bytes) -> str:
    """A lowercase UUIDv7 for time `ms`, its other bits derived from key and seed."""
    digest = hashlib.sha256(
        _UUID7_DOMAIN
        + (unique_key or "").encode()
        + b"\x00"
        + ms.to_bytes(8, "big", signed=True)
        + seed
    ).digest()
    bits = int.from_bytes(digest[:10], "big")  # 80 bits: 12 for rand_a, 62 for rand_b
    rand_a = bits >> 68
    rand_b = bits & ((1 << 62) - 1)
    value = ((ms & 0xFFFF_FFFF_FFFF) << 80) | (0x7 << 76) | (rand_a << 64) | (0b10 << 62) | rand_b
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def initial_state(scheduled_at: int | None, now_ms: int) -> State:
    if scheduled_at is not None and scheduled_at > now_ms:
        return State.SCHEDULED
    return State.AVAILABLE


def job_record(
    envelope: Envelope,
    job_id: str,
    unique_key: str | None,
    now_ms: int,
    scheduled_at: int | None,
) -> dict[str, Any]:
    """The accepted job: the request's fields, unknown ones included, plus the gateway's.

    The gateway sets id, queue, state, attempt, max_attempts, created_at,
    scheduled_at and unique_key; values for these in the request are replaced.
    """
    job = dict(envelope.raw)
    job.update(
        id=job_id,
        queue=envelope.queue,
        state=str(initial_state(scheduled_at, now_ms)),
        attempt=0,
        max_attempts=envelope.max_attempts,
        created_at=format_rfc3339(now_ms),
        unique_key=unique_key,
    )
    if scheduled_at is None:
        job.pop("scheduled_at", None)
    else:
        job["scheduled_at"] = format_rfc3339(scheduled_at)
    return job
