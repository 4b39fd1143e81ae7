"""Accepted jobs: ids, the job record published downstream, and where a job lives.

A job lives under its route: its unique key, else its id (`route_key`, the
route rule's one statement). Its route's state and `job_states` hold it with
that route and its partition (`stored_job`).

Ids are reproducible. The core has no clock and no randomness: a UUIDv7 takes
its 48-bit timestamp from the decision time and its 74 "random" bits from
SHA-256 over (unique key, decision time, seed), where the seed identifies the
request (the processor passes its topic, partition and offset). Replaying the
log therefore reproduces every id exactly, and two requests never share one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from typing import Any

from gateway.core.concurrency import JOB_FIELD as CONCURRENCY_FIELD
from gateway.core.envelope import Envelope, is_uuid7
from gateway.core.rate_policy import JOB_FIELD as RATE_FIELD
from gateway.core.states import TERMINAL_STATES, State
from gateway.core.times import format_rfc3339, parse_rfc3339

_UUID7_DOMAIN = b"gateway.uuid7\x00"
# Set by the processor as a job moves on, never taken from a request.
LIFECYCLE_FIELDS = frozenset(
    {
        "enqueued_at", "started_at", "completed_at", "cancelled_at", "discarded_at",
        "next_attempt_at", "result", "error", "errors", "previous_state",
        "lease_expires_at", "visibility_timeout_ms", "rate_permit", "rate_permits_more",
        "tenant_slot",
    }
)  # fmt: skip


# The 4,096 values of rand_a as three hex digits, for stepping through them.
_HEX3 = tuple(b"%03x" % i for i in range(1 << 12))
_VARIANT = ("8", "9", "a", "b")


def uuid7(
    ms: int, unique_key: str | None, seed: bytes, at_home: Callable[[bytes], bool] | None = None
) -> str:
    """A lowercase UUIDv7 for time `ms`, its other bits derived from key and seed.

    `at_home`, when given, must hold for the id (its ASCII bytes): the processor mints a
    keyed job's id in the id's own home, the partition that decides its claims (see
    core/ids.py). The 12 bits of rand_a are stepped until it holds (a partition in N takes
    N steps on average), then the digest is drawn again; the first id that holds is the
    one without `at_home`.
    """
    draw = 0
    while True:
        digest = hashlib.sha256(
            _UUID7_DOMAIN
            + (unique_key or "").encode()
            + b"\x00"
            + ms.to_bytes(8, "big", signed=True)
            + seed
            + (draw.to_bytes(4, "big") if draw else b"")
        ).digest()
        # The digest's first 80 bits: 12 for rand_a, then (skipping 6) 62 for rand_b under
        # the variant's 0b10, its first hex digit 8 to b. Built from hex strings: mypyc's
        # integer formatting costs a microsecond an id.
        rand_a = (digest[0] << 4) | (digest[1] >> 4)
        low = _VARIANT[(digest[2] >> 4) & 3] + digest[2:10].hex()[1:]
        high = (ms & 0xFFFF_FFFF_FFFF).to_bytes(6, "big").hex()
        head = (high[:8] + "-" + high[8:] + "-7").encode()
        tail = ("-" + low[:4] + "-" + low[4:]).encode()
        if at_home is None:
            return (head + _HEX3[rand_a] + tail).decode()
        for step in range(1 << 12):
            job_id = head + _HEX3[(rand_a + step) & 0xFFF] + tail
            if at_home(job_id):
                return job_id.decode()
        draw += 1


def uuid7_ms(job_id: str) -> int | None:
    """The time a lowercase UUIDv7 carries (ms since the epoch), else None."""
    if not is_uuid7(job_id):
        return None
    return int(job_id[:8] + job_id[9:13], 16)


def initial_state(scheduled_at: int | None, now_ms: int) -> State:
    if scheduled_at is not None and scheduled_at > now_ms:
        return State.SCHEDULED
    return State.AVAILABLE


def accepted_job(
    envelope: Envelope,
    job_id: str,
    unique_key: str | None,
    now_ms: int,
    scheduled_at: int | None,
    concurrency: int | None = None,
) -> dict[str, Any]:
    """The accepted job: the request's fields, unknown ones included, plus the gateway's.

    The gateway sets id, queue, state, priority, attempt, max_attempts, retry,
    timeout_ms, created_at, enqueued_at (once the job is available), scheduled_at,
    expires_at, unique_key, under a policy's `concurrency`, unique_concurrency
    (core/concurrency.py) and, for a rate-limited job, its `rate_limit` normalised
    (core/rate_policy.py); values for these in the request are replaced, and the
    lifecycle fields a job gains later (started_at, completed_at, result, ...)
    are dropped from it.
    """
    job = {k: v for k, v in envelope.raw.items() if k not in LIFECYCLE_FIELDS}
    job.pop(CONCURRENCY_FIELD, None)
    if concurrency is not None:
        job[CONCURRENCY_FIELD] = concurrency  # the claim rule reads the job's own limit
    if envelope.rate_limit is not None:
        job[RATE_FIELD] = envelope.rate_limit.to_dict()  # normalised: what its home reads
    state = initial_state(scheduled_at, now_ms)
    job.update(
        id=job_id,
        queue=envelope.queue,
        state=str(state),
        priority=envelope.priority or 0,
        attempt=0,
        max_attempts=envelope.max_attempts,
        retry=envelope.retry.to_dict() | {"max_attempts": envelope.max_attempts},
        created_at=format_rfc3339(now_ms),
        unique_key=unique_key,
    )
    if envelope.tags is not None:
        job["tags"] = envelope.tags
    if envelope.timeout_ms is not None:
        job["timeout_ms"] = envelope.timeout_ms  # bounds each attempt (see leases.py)
    if envelope.visibility_timeout_ms is not None:
        job["visibility_timeout_ms"] = envelope.visibility_timeout_ms  # its claims' lease
    if state is State.AVAILABLE:
        job["enqueued_at"] = job["created_at"]
    if scheduled_at is None:
        job.pop("scheduled_at", None)
    else:
        job["scheduled_at"] = format_rfc3339(scheduled_at)
    if envelope.expires_at is not None:
        # As sent (validated), wherever it was sent: OJS clients read their own value back.
        sent = envelope.raw.get("expires_at")
        job["expires_at"] = sent if sent is not None else envelope.raw["options"]["expires_at"]
    return job


def route_key(unique_key: str | None, job_id: str) -> str:
    """Where a job lives, the route rule's one statement (gateway.wire.route applies it to
    a request): its unique key, else its id. Its requests and events are keyed by this."""
    return unique_key or job_id


def stored_job(job: Mapping[str, Any], unique_key: str | None, partition: int) -> dict[str, Any]:
    """A new job as its route's state and `job_states` hold it: the decided job with where
    it lives. The HTTP binding builds its provisional copy of an answered job with this."""
    return {**job, "route": route_key(unique_key, str(job["id"])), "partition": partition}


def job_route(job: Mapping[str, Any]) -> str:
    """The route a stored job lives under, as its record says (`stored_job`); a record from
    before routes were kept: its id."""
    return str(job.get("route") or job["id"])


def terminal_since(job: Mapping[str, Any]) -> int | None:
    """When a terminal job became terminal (its own stamp), else None (a live job)."""
    if job.get("state") not in TERMINAL_STATES:
        return None
    stamp = job.get("cancelled_at") if job["state"] == State.CANCELLED else job.get("completed_at")
    return parse_rfc3339(stamp) if isinstance(stamp, str) else None


def job_expires_at(job: Mapping[str, Any], retention_ms: int) -> int | None:
    """When a job record is forgotten: `retention_ms` after it became terminal; None while
    it is live. The processor's store expires the record then, and every view drops it."""
    since = terminal_since(job)
    return None if since is None else since + retention_ms
