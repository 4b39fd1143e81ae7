"""The view's RocksDB layout: every key it writes, and where a job sorts in each index.

Layout (one RocksDB under the gateway home per serve process):
    j/<id>                         -> the job (JSON)
    q/<queue>\\0<rank><id>          -> b"" for every job that may become fetchable
                                      (available, scheduled, retryable), in fetch
                                      order: priority descending, then ready time
    h/<tenant>\\0<queue>\\0<rank><id> -> as q/, for a tenant's jobs: its fetch reads past
                                      no other tenant's backlog
    x/<expiry ms><id>              -> b"" for every terminal job, in expiry order
    t/<due ms><id>                 -> b"" for every scheduled or retryable job not yet due, in
                                      due order: when it comes, the job is listed and counted
                                      as available (apply.sweep), as GET shows it
    s/<state>\\0<queue>\\0<id>        -> b"" for every job, by the state it is listed in
                                      (its own, or available once due; dead letters: the
                                      discarded ones), then queue
    c/<queue>\\0<state>              -> how many jobs of the queue are in the state
    a/<unique key>\\0<id>            -> b"" for every active job with a unique key: fetch counts
                                      a key's running jobs by it (core/concurrency.py)
    g/<tenant>\\0<state>\\0<queue>\\0<id> -> b"" for every job of a tenant (core/tenants.py),
                                      as s/ within the tenant: its listings
    d/<tenant>\\0<queue>\\0<state>     -> how many of the tenant's jobs of the queue are in
                                      the state
    m/<tenant>                     -> when the tenant's first job was created (RFC 3339)
    l/<rate key>\\0<id>              -> b"" for every available job of a rate key: how many wait
                                      for its permits (core/rates.py)
    r/<queue>\\0<minute>             -> what the queue's jobs did in the minute (queue_stats.py)
    n/<queue>                      -> when the queue's first job was created (RFC 3339)
    k/<key>                        -> a queue's or a cron's state, as the processor published
                                      it under its NUL-prefixed key (wire.queue_key, cron_key)
    o/<partition>                  -> the next offset to read
    e/..., ew/...                  -> the events feed's window, written in the same batch
                                      (event_feed.py)
    meta/layout                    -> this layout's version; a view of another is read anew
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from gateway.core import ready_at
from gateway.core.moves import WAITING_STATES
from gateway.core.states import State
from gateway.core.tenants import tenant_of
from gateway.core.times import parse_rfc3339

LAYOUT = b"9"
LAYOUT_KEY = b"meta/layout"
JOB = b"j/"
EXPIRY = b"x/"
DUE = b"t/"
COUNT = b"c/"
FIRST_SEEN = b"n/"
TENANT_STATE = b"g/"
TENANT_COUNT = b"d/"
TENANT_FIRST_SEEN = b"m/"
CONTROL = b"k/"
OFFSET = b"o/"
_PRIORITY_BIAS = 2**31
RANK_BYTES = 12  # a queue key's rank: 4 bytes of priority, 8 of ready time


def version(job_id: str, job: Mapping[str, Any] | None) -> tuple[str, int]:
    """A job's version by content (None: its tombstone), whatever its fields' order."""
    return job_id, hash(orjson.dumps(job, option=orjson.OPT_SORT_KEYS))


def job_key(job_id: str) -> bytes:
    return JOB + job_id.encode()


def queue_prefix(queue: str) -> bytes:
    return b"q/" + queue.encode() + b"\x00"


def queue_key(job: Mapping[str, Any]) -> bytes | None:
    """Where a waiting job sorts in its queue; None if it is not waiting."""
    if job.get("state") not in WAITING_STATES:
        return None
    at = ready_at(job)
    ready_ms = (parse_rfc3339(at) if isinstance(at, str) else None) or 0
    raw_priority = job.get("priority")
    priority = raw_priority if isinstance(raw_priority, int) else 0
    # Higher priority first: store the distance below the largest priority.
    clamped = max(-_PRIORITY_BIAS, min(priority, _PRIORITY_BIAS - 1))
    rank = (_PRIORITY_BIAS - 1 - clamped).to_bytes(4, "big") + max(ready_ms, 0).to_bytes(8, "big")
    return queue_prefix(str(job.get("queue", ""))) + rank + str(job["id"]).encode()


def tenant_queue_prefix(tenant: str, queue: str) -> bytes:
    return b"h/" + tenant.encode() + b"\x00" + queue.encode() + b"\x00"


def tenant_queue_key(job: Mapping[str, Any]) -> bytes | None:
    """Where a waiting job of a tenant sorts in its tenant's part of its queue; None for a
    job not waiting or of no tenant."""
    tenant = tenant_of(job)
    rank = None if tenant is None else queue_key(job)
    if tenant is None or rank is None:
        return None
    queue = str(job.get("queue", ""))
    return tenant_queue_prefix(tenant, queue) + rank[len(queue_prefix(queue)) :]


def expiry_key(expires_ms: int, job_id: bytes) -> bytes:
    return EXPIRY + max(expires_ms, 0).to_bytes(8, "big") + job_id


def state_prefix(state: str, queue: str | None = None) -> bytes:
    prefix = b"s/" + state.encode() + b"\x00"
    return prefix if queue is None else prefix + queue.encode() + b"\x00"


def state_key(job: Mapping[str, Any], state: str | None = None) -> bytes:
    """Where a job is listed: under `state`, else its own."""
    listed = str(job.get("state", "")) if state is None else state
    return state_prefix(listed, str(job.get("queue", ""))) + str(job["id"]).encode()


def due_key(job: Mapping[str, Any], due: int) -> bytes:
    """Where a scheduled or retryable job waits to be listed as available at `due`."""
    return DUE + max(due, 0).to_bytes(8, "big") + str(job["id"]).encode()


def active_prefix(unique_key: str) -> bytes:
    return b"a/" + unique_key.encode() + b"\x00"


def active_key(job: Mapping[str, Any]) -> bytes | None:
    """Where an active job of a unique key is counted; None for any other job."""
    key = job.get("unique_key")
    if job.get("state") != State.ACTIVE or not isinstance(key, str):
        return None
    return active_prefix(key) + str(job["id"]).encode()


def rate_waiting_prefix(rate_key: str) -> bytes:
    return b"l/" + rate_key.encode() + b"\x00"


def rate_waiting_key(job: Mapping[str, Any]) -> bytes | None:
    """Where an available job of a rate key is counted; None for any other job."""
    limit = job.get("rate_limit")
    key = limit.get("key") if isinstance(limit, Mapping) else None
    if job.get("state") != State.AVAILABLE or not isinstance(key, str):
        return None
    return rate_waiting_prefix(key) + str(job["id"]).encode()


def count_key(queue: str, state: str) -> bytes:
    return COUNT + queue.encode() + b"\x00" + state.encode()


def job_count_key(job: Mapping[str, Any], state: str | None = None) -> bytes:
    """The counter of the job's queue and the state it is listed in (`state`, else its own)."""
    listed = str(job.get("state", "")) if state is None else state
    return count_key(str(job.get("queue", "")), listed)


def tenant_state_prefix(tenant: str, state: str, queue: str | None = None) -> bytes:
    return TENANT_STATE + tenant.encode() + b"\x00" + state_prefix(state, queue)[2:]


def tenant_state_key(job: Mapping[str, Any], state: str | None = None) -> bytes | None:
    """Where a job of a tenant is listed (under `state`, else its own); None for a job of
    no tenant."""
    tenant = tenant_of(job)
    if tenant is None:
        return None
    return TENANT_STATE + tenant.encode() + b"\x00" + state_key(job, state)[2:]


def tenant_count_key(job: Mapping[str, Any], state: str | None = None) -> bytes | None:
    """The counter of the job's tenant, queue and listed state; None for a job of no
    tenant."""
    tenant = tenant_of(job)
    if tenant is None:
        return None
    return TENANT_COUNT + tenant.encode() + b"\x00" + job_count_key(job, state)[2:]


def tenant_first_seen_key(tenant: str) -> bytes:
    return TENANT_FIRST_SEEN + tenant.encode()


def first_seen_key(queue: str) -> bytes:
    return FIRST_SEEN + queue.encode()


def offset_key(partition: int) -> bytes:
    return OFFSET + str(partition).encode()
