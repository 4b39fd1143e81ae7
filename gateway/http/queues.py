"""The queue routes: every queue the view has seen, and one queue's stats.

Counts come from the view's per-queue, per-state counters and the last hour's
activity from its per-minute buckets (view/queue_stats.py). The view follows
committed records, so a count asked right after this process answered for a
job of the queue waits (shared.QUEUE_SETTLE_S at most) until the view has that job's
record: a client that enqueues, fetches or acks and then asks sees its own
changes counted.
"""

from __future__ import annotations

import time
from typing import Any

from starlette.requests import Request

from gateway import wire
from gateway.core import INVALID_REQUEST, State
from gateway.core.actor import Actor
from gateway.core.envelope import QUEUE_NAME_RULE, is_valid_queue_name
from gateway.core.errors import Invalid
from gateway.core.queue_rates import parse_queue_limits, queue_rate_key
from gateway.core.queues import newer_state
from gateway.core.rate_policy import RateLimit
from gateway.core.times import format_rfc3339
from gateway.http import access, commands, errors
from gateway.http.answers import Answer
from gateway.http.binding import Binding
from gateway.http.caller import caller
from gateway.http.errors import ApiError
from gateway.http.plumbing import read_json
from gateway.http.security import privileged
from gateway.http.shared import page_of, paused_queues, seen_queues, settled
from gateway.sdk.commands import queue_commands, queue_rate_commands
from gateway.view import queue_stats


async def list_queues(request: Request, binding: Binding, _: str) -> Answer:
    """Every queue the view has seen a job of, or paused, by name, of those the caller
    sees: `status` (active or paused), `created_at` (its first job's) and `counts` per
    state now."""
    page = page_of(request)
    scope = access.scope()
    known, paused = seen_queues(binding, scope), paused_queues(binding)
    # A caller bound to tenants sees the queues its tenants' jobs are in.
    shown = {name for name in paused if scope.sees(name) and scope.tenants is None}
    names = sorted(known.keys() | shown)
    queues = [
        {
            "name": name,
            "status": "paused" if name in paused else "active",
            "created_at": known.get(name, {}).get("created_at"),
            "counts": {s: n for s, n in known.get(name, {}).get("counts", {}).items() if n},
        }  # fmt: skip
        for name in page.of(names)
    ]
    return Answer(200, {"queues": queues, "pagination": page.pagination(len(names))})


async def stats(request: Request, binding: Binding, _: str) -> Answer:
    """OJS level 4's queue stats: jobs per state now (of the caller's tenants, if it is
    bound to some), and the last hour's completions, failures, mean run and wait times and
    throughput (none, to a caller bound to tenants). The shape holds both OJS's
    documents: the HTTP binding's top-level `status` and `stats`, and the conformance
    suite's `queue` object with the name and the counts."""
    name = _name(request)
    await settled(binding, name)
    tenants = access.scope().tenants
    known = binding.view.queues(tenants).get(name)
    is_paused = name in paused_queues(binding)
    if known is None and (not is_paused or tenants is not None):
        raise ApiError(404, errors.NOT_FOUND, f"queue {name} has had no job")
    now_ms = time.time_ns() // 1_000_000
    held = {} if known is None else known["counts"]
    counts: dict[str, Any] = {str(s): held.get(str(s), 0) for s in State}
    # The last hour's activity counts every tenant's jobs: for a caller that sees them all.
    activity = binding.view.queue_activity(name) if tenants is None else []
    stats = {**counts, **queue_stats.last_hour(activity, now_ms)}
    status = "paused" if is_paused else "active"
    return Answer(200, {
        "queue": {"name": name, "status": status, "paused": is_paused, **counts},
        "status": status,
        "stats": stats,
        "computed_at": format_rfc3339(now_ms),
    })  # fmt: skip


@privileged
async def pause(request: Request, binding: Binding, request_id: str) -> Answer:
    return await _set_paused(request, binding, caller(request, request_id), True)


@privileged
async def resume(request: Request, binding: Binding, request_id: str) -> Answer:
    return await _set_paused(request, binding, caller(request, request_id), False)


async def _set_paused(request: Request, binding: Binding, actor: Actor, paused: bool) -> Answer:
    """Pause or resume a queue on every partition; answered once each has applied it, so a
    claim sent after this answer is judged by the new state wherever its job lives. The
    shape holds the OJS binding's `status` and time, the conformance suite's `queue`
    object and the Admin UI's `paused`."""
    name = _name(request)
    count = await commands.partitions(binding)
    verb = "pause" if paused else "resume"
    # Past the newest state this view holds: a pause or resume sent after another's answer
    # wins over it, whatever the clocks of the serve processes that sent them say.
    seen = binding.view.controls(wire.queue_key(name)).get("")
    outgoing = queue_commands(name, paused, count, seen)
    answers = await commands.send(binding, actor, outgoing, f"{verb} {name}")
    # Each partition answers the state it holds: this command's, or a newer one's.
    held: dict[str, Any] = answers[0]["queue"]
    for answer in answers[1:]:
        if newer_state(answer["queue"], held):
            held = answer["queue"]
    binding.view.queue_answered(held)
    now_paused = bool(held["paused"])
    stamp = "paused_at" if now_paused else "resumed_at"
    status = "paused" if now_paused else "active"
    at = held.get(stamp)
    queue = {"name": name, "paused": now_paused, "status": status, stamp: at}
    return Answer(
        200, {"queue": queue, "name": name, "paused": now_paused, "status": status, stamp: at}
    )


@privileged
async def set_rate_limit(request: Request, binding: Binding, request_id: str) -> Answer:
    """OJS rate limiting §7.2: the queue's jobs held by these limits too, beside their own."""
    name = _name(request)
    try:
        policy = parse_queue_limits(
            await read_json(request, binding.settings.max_body_bytes), name
        )  # fmt: skip
    except Invalid as exc:
        raise ApiError(400, exc.error.code, exc.error.message) from None
    return await _set_rate(binding, caller(request, request_id), name, policy)


@privileged
async def clear_rate_limit(request: Request, binding: Binding, request_id: str) -> Answer:
    return await _set_rate(binding, caller(request, request_id), _name(request), None)


async def _set_rate(binding: Binding, actor: Actor, name: str, policy: RateLimit | None) -> Answer:
    """Set or clear a queue's rate limit on every partition; answered once each holds it."""
    count = await commands.partitions(binding)
    seen = binding.view.controls(wire.queue_rate_key(name)).get("")
    outgoing = queue_rate_commands(name, policy, count, seen)
    verb = "set" if policy is not None else "clear"
    answers = await commands.send(binding, actor, outgoing, f"{verb} the rate limit of {name}")
    held: dict[str, Any] = answers[0]["queue_rate"]
    for answer in answers[1:]:
        if newer_state(answer["queue_rate"], held):
            held = answer["queue_rate"]
    shown = {"rate_limit": held.get("rate_limit"), "set_at": held.get("set_at")}
    return Answer(200, {"queue": name, "key": queue_rate_key(name), **shown})


def _name(request: Request) -> str:
    """The queue the path names; 403 if the caller may not do the route's operation on
    it."""
    name = request.path_params["name"]
    if not is_valid_queue_name(name):
        raise ApiError(400, INVALID_REQUEST, f"a queue name is {QUEUE_NAME_RULE}")
    access.permit(name)
    return str(name)
