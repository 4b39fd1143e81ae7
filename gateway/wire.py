"""Wire facts: what the SDK, router, processor and HTTP binding must agree on, in one place.

Each writes records another reads, so the header names and marker values on
those records, the processor's consumer group and the route a request is
keyed by are defined here once and imported by all of them. Names only: the
shapes of record values live in the modules that build them, and topic names
in the topics/ catalogue.
"""

from __future__ import annotations

from gateway.core import Request, route_key

# Headers any producer may set. `request_id`: the request's id, copied into every
# record about it. `reply_to` and `correlation_id`: where to send the answer and
# what to mark it with (the answer carries `correlation_id` back).
REQUEST_ID_HEADER = "request_id"
REPLY_TO_HEADER = "reply_to"
CORRELATION_ID_HEADER = "correlation_id"
# On `requests`: who asked for the record, as the edge that served the caller names it
# (core/actor.py: principal, role, source address, request id, as compact JSON); the
# processor copies it into the record's audit record as `by`. As trusted as the producer.
ACTOR_HEADER = "actor"
# On `jobs` and `cancellations`: the job's unique key, when it has one.
UNIQUE_KEY_HEADER = "unique_key"

# On `requests`: the request's unique key is scoped by its tenant, `meta.tenant_id`
# (core/tenants.py), and its route with it. The SDK sets it on every job with a tenant; a
# request without it is decided as before tenants were, so an older log replays the same.
TENANT_SCOPED_HEADER = "tenant_scoped"
TENANT_SCOPED = b"1"
# The HTTP binding's header naming the request's tenant (OJS multi-tenancy §5.3).
HTTP_TENANT = "X-OJS-Tenant"

# What a record on a stage's input is, when it is not a request.
KIND_HEADER = "kind"
# On `requests`: a job event the router (or the SDK) put beside the requests, so
# that each partition's requests and events form one log in the order they are handled.
JOB_EVENT = b"job_event"
# On `requests`, keyed by a job id: a route's report, to the id's home, of the job it
# holds under the id (see core/ids.py).
ID_REPORT = b"id_report"
# On `requests`: a record that only carries time, written to each owned partition
# twice a second so that leases, tombstones and crons fall due without traffic (see
# processor/ticks.py). Empty, and keyed apart from every route (none starts with NUL):
# the key's own state is never written.
TICK = b"tick"
TICK_KEY = b"\x00tick"
# On `requests`: a command about a queue (pause, resume: core/queues.py), written to
# every partition, or about a cron (core/crons.py), on its key's partition; keyed by
# queue_key or cron_key, apart from every route. The processor publishes what became
# of each on `job_states` under the same key.
QUEUE_COMMAND = b"queue"
CRON_COMMAND = b"cron"
QUEUE_KEY_PREFIX = b"\x00queue\x00"
CRON_KEY_PREFIX = b"\x00cron\x00"
# A queue's rate limit (core/queue_rates.py): a command to every partition, keyed by the
# queue_key; what each partition holds is published under queue_rate_key.
QUEUE_RATE_COMMAND = b"queue_rate"
QUEUE_RATE_KEY_PREFIX = b"\x00qrate\x00"

# On `requests`: a keyed request whose client id its home claimed for its route (core/ids.py).
# Only the gateway sets these: the router drops a producer's own.
ID_CLAIM_HEADER = "id_claim"
ID_CLAIMED = b"claimed"
# Beside `id_claim: claimed`: the id claimed, so the route can report without reading the request.
CLAIMED_ID_HEADER = "claimed_id"


# On `requests`: the caller's idempotency key (core/idempotency.py), and for a batch's item
# which one it is ("i/n"; absent: a single request). Such a request is keyed by
# `idempotency_home(key)` and checked there first, then sent on to its route marked
# `idempotency_checked` (its body's digest); only the gateway sets that mark: the router
# drops a producer's own. The HTTP binding takes the key as the `Idempotency-Key` header.
IDEMPOTENCY_KEY_HEADER = "idempotency_key"
IDEMPOTENCY_ITEM_HEADER = "idempotency_item"
IDEMPOTENCY_CHECKED_HEADER = "idempotency_checked"
HTTP_IDEMPOTENCY_KEY = "Idempotency-Key"
IDEMPOTENCY_KEY_PREFIX = b"\x00idem\x00"


def idempotency_home(key: str) -> bytes:
    """The record key of an idempotency key's home: apart from every route (NUL first)."""
    return IDEMPOTENCY_KEY_PREFIX + key.encode()


# On `requests`: a rate-limited job's claim (and what must follow it in order, the
# requeue of a claim with no answer), keyed by `rate_home(key)` and marked `rate`; there
# the key's permits are decided (core/rates.py), and a granted claim is sent on to the
# job's route as a job event carrying its permit (`rate_permit`, the permit's id;
# `rate_key`; `rate_permit_at`, its time in ms). A route gives a permit back with a record
# marked `rate_report`, keyed by the home, and an operator sets or clears a key's override
# with one marked `rate_command`. Only the gateway sets the permit headers: the router
# drops a producer's own.
RATE = b"rate"
RATE_REPORT = b"rate_report"
RATE_COMMAND = b"rate_command"
RATE_PERMIT_HEADER = "rate_permit"
RATE_KEY_HEADER = "rate_key"
RATE_PERMIT_AT_HEADER = "rate_permit_at"
RATE_HEADERS = (RATE_PERMIT_HEADER, RATE_KEY_HEADER, RATE_PERMIT_AT_HEADER)
# A claim the home refused of a job whose `on_limit` moves it (reschedule, drop) goes on to
# its route marked `rate_refused` (JSON: on_limit, retry_at, the error), which moves the job
# and answers the claim (core/rate_moves.py). Only the home sets it: the router drops it.
RATE_REFUSED_HEADER = "rate_refused"
# A claim that needs permits of two keys (its own and its queue's, core/queue_rates.py)
# carries the first in the headers above, the others here (JSON: [[key, id, at], ...]).
RATE_MORE_HEADER = "rate_permits_more"
RATE_GATEWAY_HEADERS = (*RATE_HEADERS, RATE_REFUSED_HEADER, RATE_MORE_HEADER)
RATE_KEY_PREFIX = b"\x00rate\x00"


def rate_home(key: str) -> bytes:
    """The record key of a rate key's home: apart from every route (NUL first)."""
    return RATE_KEY_PREFIX + key.encode()


# On `requests`: a tenant's job counted at its tenant's home (core/tenant_limits.py). The
# SDK marks every job with a tenant `tenant_counted`, and keys it by `tenant_home(tenant)`
# when nothing must be checked before (no idempotency key, no client id to claim); the
# route sends any other there once those are done. The home sends it on to its route with
# `tenant_slot` (the place it took, `waiting/<tenant>` or `scheduled/<tenant>`) or
# `tenant_refused` (JSON:
# the limit it breaks, answered by the route). A route gives a place back with a record
# marked `tenant_report`; an operator sets a tenant's limits with one marked
# `tenant_command`. A request without the mark is decided as before tenant limits, so an
# older log replays the same. Only the gateway sets the slot headers: the router drops a
# producer's own.
TENANT_COUNTED_HEADER = "tenant_counted"
TENANT_COUNTED = b"1"
TENANT_SLOT_HEADER = "tenant_slot"
TENANT_REFUSED_HEADER = "tenant_refused"
TENANT_HEADERS = (TENANT_SLOT_HEADER, TENANT_REFUSED_HEADER)
SLOT_WAITING = "waiting"
SLOT_SCHEDULED = "scheduled"
TENANT_REPORT = b"tenant_report"
TENANT_COMMAND = b"tenant_command"
TENANT_KEY_PREFIX = b"\x00tenant\x00"


def tenant_home(tenant: str) -> bytes:
    """The record key of a tenant's home: apart from every route (NUL first)."""
    return TENANT_KEY_PREFIX + tenant.encode()


def queue_key(name: str) -> bytes:
    return QUEUE_KEY_PREFIX + name.encode()


def queue_rate_key(name: str) -> bytes:
    return QUEUE_RATE_KEY_PREFIX + name.encode()


def cron_key(name: str) -> bytes:
    return CRON_KEY_PREFIX + name.encode()


def group_name(namespace: str | None) -> str:
    """The processor's consumer group in a namespace (None: the default one)."""
    return f"{namespace}.gateway-dedup" if namespace else "gateway-dedup"


def route(request: Request) -> str | None:
    """The key a request travels under and is decided in, where its job then lives: its
    unique key (its tenant's, for a request marked TENANT_SCOPED_HEADER: parsing scoped
    it), else its job id (`core.route_key`); None while it has neither, until the SDK or
    the router gives it an id."""
    if request.unique_key is None and request.envelope.id is None:
        return None
    return route_key(request.unique_key, request.envelope.id or "")
