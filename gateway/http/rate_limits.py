"""The rate limit routes: a rate key as its home last published it (core/rates.py), read
from this process's view. Inspection only: limits are set per job (`rate_limit`).

GET /ojs/v1/rate-limits/{key} answers any key of the rule's form, one never claimed (or
idle long enough to be forgotten) with its counts at 0 and no policy; GET
/ojs/v1/rate-limits lists the keys the view holds, `{items, pagination}` by page and
per_page.
"""

from __future__ import annotations

import time

from starlette.requests import Request

from gateway import wire
from gateway.core import INVALID_REQUEST
from gateway.core.rates import KEY_RULE, RateState, inspect, is_key
from gateway.http.answers import Answer
from gateway.http.binding import Binding
from gateway.http.errors import ApiError
from gateway.http.shared import page_of


async def get_rate_limit(request: Request, binding: Binding, _: str) -> Answer:
    key = request.path_params["key"]
    if not is_key(key):
        raise ApiError(400, INVALID_REQUEST, f"a rate key is {KEY_RULE}")
    state = RateState.load(binding.view.controls(wire.rate_home(key)).get(""))
    return Answer(200, inspect(key, state, _now_ms()))


async def list_rate_limits(request: Request, binding: Binding, _: str) -> Answer:
    page = page_of(request, numbered=True)
    held = binding.view.controls(wire.RATE_KEY_PREFIX)
    now = _now_ms()
    items = [inspect(key, RateState.load(held[key]), now) for key in page.of(sorted(held))]
    return Answer(200, page.paged(items, len(held)))


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
