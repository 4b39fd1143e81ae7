"""The rate limit routes: a rate key as its home last published it (core/rates.py), read
from this process's view, and an operator's override of a key, sent to the key's home.

GET /ojs/v1/rate-limits/{key} answers any key of the rule's form, one never claimed (or
idle long enough to be forgotten) with its counts at 0 and no policy; GET
/ojs/v1/rate-limits lists the keys the view holds, `{items, pagination}` by page and
per_page. `waiting` counts the key's available jobs in this view, up to MAX_WAITING.
PUT /ojs/v1/rate-limits/{key} sets the key's override (core/rate_policy.py's shapes), DELETE
/ojs/v1/rate-limits/{key}/override clears it: the home decides either at its record's
broker time and answers the key as it then stands.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from starlette.requests import Request

from gateway import wire
from gateway.core import INVALID_REQUEST
from gateway.core.errors import Invalid
from gateway.core.queue_rates import QUEUE_KEY, policy_in, queue_rate_key
from gateway.core.rate_policy import KEY_RULE, Override, is_key, parse_override
from gateway.core.rates import RateState, inspect
from gateway.http import commands
from gateway.http.answers import Answer
from gateway.http.binding import Binding
from gateway.http.caller import caller
from gateway.http.errors import ApiError
from gateway.http.plumbing import read_json
from gateway.http.security import privileged
from gateway.http.shared import page_of
from gateway.sdk.commands import rate_commands

MAX_WAITING = 10_000  # a key's waiting jobs are counted up to this many


async def get(request: Request, binding: Binding, _: str) -> Answer:
    key = _key(request)
    state = RateState.load(binding.view.controls(wire.rate_home(key)).get(""))
    return Answer(200, _shown(binding, key, _with_queue_limits(binding, key, state)))


async def keys(request: Request, binding: Binding, _: str) -> Answer:
    page = page_of(request, numbered=True)
    held: dict[str, RateState | None] = {
        key: RateState.load(state)
        for key, state in binding.view.controls(wire.RATE_KEY_PREFIX).items()
    }
    for queue, state in binding.view.controls(wire.QUEUE_RATE_KEY_PREFIX).items():
        if policy_in(state) is not None:  # a queue's limits: listed before any claim
            held.setdefault(queue_rate_key(queue), None)
    items = [
        _shown(binding, key, _with_queue_limits(binding, key, held[key]))
        for key in page.of(sorted(held))
    ]
    return Answer(200, page.paged(items, len(held)))


def _with_queue_limits(binding: Binding, key: str, state: RateState | None) -> RateState | None:
    """A queue's key shown with the queue's limits as its policy (core/queue_rates.py), the
    limits its home decides by, before and after its first claim."""
    if not key.startswith(QUEUE_KEY):
        return state
    queue = key[len(QUEUE_KEY) :]
    policy = policy_in(binding.view.controls(wire.queue_rate_key(queue)).get(""))
    if policy is None:
        return state
    return RateState(key, policy) if state is None else replace(state, policy=policy)


@privileged
async def put(request: Request, binding: Binding, request_id: str) -> Answer:
    key = _key(request)
    try:
        override = parse_override(await read_json(request, binding.settings.max_body_bytes))
    except Invalid as exc:
        raise ApiError(400, exc.error.code, exc.error.message) from None
    return await _send(request, binding, request_id, key, override)


@privileged
async def clear(request: Request, binding: Binding, request_id: str) -> Answer:
    return await _send(request, binding, request_id, _key(request), None)


async def _send(
    request: Request, binding: Binding, request_id: str, key: str, override: Override | None
) -> Answer:
    verb = "override" if override is not None else "clear the override of"
    answers = await commands.send(
        binding, caller(request, request_id), rate_commands(key, override), f"{verb} {key}"
    )
    shown: dict[str, Any] = dict(answers[0].get("rate_limit") or {"key": key})
    count = binding.view.waiting_under(key, MAX_WAITING)
    shown["waiting"] = shown["waiting_count"] = count
    return Answer(200, shown)


def _key(request: Request) -> str:
    key = str(request.path_params["key"])
    if not is_key(key):
        raise ApiError(400, INVALID_REQUEST, f"a rate key is {KEY_RULE}")
    return key


def _shown(binding: Binding, key: str, state: RateState | None) -> dict[str, Any]:
    return inspect(key, state, _now_ms(), binding.view.waiting_under(key, MAX_WAITING))


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
