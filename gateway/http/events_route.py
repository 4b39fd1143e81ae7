"""GET /ojs/v1/events: the lifecycle events this process's view has derived (events.py).

With `Accept: text/event-stream`: a stream of server-sent events, each with
`id` (its number here), `event` (the OJS type) and `data` (the OJS event
envelope); `retry: 3000` first, a `:heartbeat` comment every 15 s when idle.
It starts with the events after `Last-Event-ID` (or the `after` query
parameter) still kept, else with the next event. Otherwise: JSON
`{"events": [...], "last_id": n}`, the last `limit` (default 100) kept events
after `after`, oldest first. Both filter by `types` and `queues`
(comma-separated). With `page` or `per_page`, the paged shape the OJS Admin UI
reads: `{"items": [...], "pagination": {"total", "page", "per_page"}}`, newest
first, each envelope with its `time` also as `timestamp`; `type` filters too.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from gateway.http.answers import Answer
from gateway.http.binding import Binding
from gateway.http.errors import ApiError
from gateway.http.events import SSE_HEARTBEAT, SSE_PREAMBLE, matches, sse_frame
from gateway.http.plumbing import int_param
from gateway.http.responses import OJS_VERSION

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
HEARTBEAT_S = 15.0
POLL_S = 0.1


def _set(raw: str | None) -> frozenset[str] | None:
    names = frozenset(n.strip() for n in (raw or "").split(",") if n.strip())
    return names or None


async def events(
    request: Request, binding: Binding, request_id: str
) -> Answer | ApiError | Response:
    query = request.query_params
    types, queues = _set(query.get("types")), _set(query.get("queues"))
    limit = int_param(query.get("limit"), "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
    if isinstance(limit, ApiError):
        return limit
    streaming = "text/event-stream" in request.headers.get("accept", "")
    resume = request.headers.get("last-event-id") if streaming else None
    after = int_param(resume or query.get("after"), "after", -1, 0, 2**62)
    if isinstance(after, ApiError):
        return after
    if not streaming and ("page" in query or "per_page" in query):
        return _page(binding, request, types or _set(query.get("type")), queues)
    if not streaming:
        since = max(after, 0)
        kept = [e for n, e in binding.feed.after(since) if matches(e, types, queues)]
        return Answer(200, {"events": kept[-limit:], "last_id": binding.feed.last})
    start = binding.feed.last if after < 0 else after

    async def stream() -> AsyncIterator[bytes]:
        yield SSE_PREAMBLE
        seen, quiet_since = start, time.monotonic()
        while True:
            if await request.is_disconnected():
                return
            sent = False
            for number, event in binding.feed.after(seen):
                seen = number
                if matches(event, types, queues):
                    yield sse_frame(number, event)
                    sent = True
            if sent:
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since >= HEARTBEAT_S:
                quiet_since = time.monotonic()
                yield SSE_HEARTBEAT
            await asyncio.sleep(POLL_S)

    return StreamingResponse(
        stream(),
        media_type="text/event-stream",
        headers={
            "OJS-Version": OJS_VERSION, "X-Request-Id": request_id,
            "Cache-Control": "no-cache", "X-Accel-Buffering": "no",
        },
    )  # fmt: skip


def _page(
    binding: Binding, request: Request, types: frozenset[str] | None, queues: frozenset[str] | None
) -> Answer | ApiError:
    query = request.query_params
    page = int_param(query.get("page"), "page", 1, 1, 2**31 - 1)
    if isinstance(page, ApiError):
        return page
    per_page = int_param(query.get("per_page"), "per_page", DEFAULT_LIMIT, 1, MAX_LIMIT)
    if isinstance(per_page, ApiError):
        return per_page
    kept = [e for _, e in binding.feed.after(0) if matches(e, types, queues)][::-1]
    items = [{**e, "timestamp": e.get("time")} for e in kept[(page - 1) * per_page :][:per_page]]
    pagination = {"total": len(kept), "page": page, "per_page": per_page}
    return Answer(200, {"items": items, "pagination": pagination})
