"""GET /ojs/v1/events: the lifecycle events this process's view has derived (view/events.py).

Where a reader stands is a cursor (view/event_cursor.py): a position per job_states
partition, the same on every serve process and after any restart. With
`Accept: text/event-stream`: a stream of server-sent events, each with `id`
(the cursor past it), `event` (the OJS type) and `data` (the OJS event
envelope); `retry: 3000` first, a `:heartbeat` comment every HEARTBEAT_S when
idle. It starts after `Last-Event-ID` (or the `after` query parameter), else
with the next event. Otherwise: JSON `{"events": [...], "last_id", "missed"}`:
after `after`, the first `limit` (default 100) events from there, else the last
`limit` kept; `last_id` is the cursor to pass as `after` next. A cursor older
than the window starts from its oldest event and says so (`events.missed`
first on a stream, `"missed": true` in JSON); one past the newest event starts
with the next. Both filter by `types` (or the Admin UI's `type`) and `queues`
(comma-separated), and hold only events of the queues the caller sees
(access.scope, taken when the request comes). With `page` or `per_page`, the
paged shape the OJS Admin UI reads: `{"items": [...], "pagination": {"total",
"page", "per_page"}}`, newest first, each envelope with its `time` also as
`timestamp`. A cursor is a position in job_states, past the events passed over
(those a reader does not get among them): it names no job and no queue.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, Callable, Mapping
from typing import Any

from confluent_kafka import KafkaException
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from gateway.core import INVALID_REQUEST
from gateway.http import access
from gateway.http.answers import Answer
from gateway.http.binding import Binding
from gateway.http.errors import ApiError
from gateway.http.events import SSE_HEARTBEAT, SSE_PREAMBLE, matches, missed_notice, sse_frame
from gateway.http.plumbing import int_param
from gateway.http.responses import OJS_VERSION
from gateway.http.shared import MAX_PER_PAGE, page_of
from gateway.view.event_cursor import Cursor, format_cursor, parse, passed, position
from gateway.view.event_feed import Resumed

log = logging.getLogger("gateway.http")

DEFAULT_LIMIT = 100
MAX_LIMIT = MAX_PER_PAGE
HEARTBEAT_S = 15.0
POLL_S = 0.1
FRAMES_PER_WRITE = 100  # a long replay goes out in parts, so a slow reader holds it back
PARAMETERS = ("after", "limit", "page", "per_page", "queues", "type", "types")
# Whether a reader gets an event: what it asked for, of what it sees (events.matches).
Wanted = Callable[[Mapping[str, Any]], bool]


def _set(raw: str | None) -> frozenset[str] | None:
    names = frozenset(n.strip() for n in (raw or "").split(",") if n.strip())
    return names or None


async def events(request: Request, binding: Binding, request_id: str) -> Answer | Response:
    query = request.query_params
    types, queues = _set(query.get("types")) or _set(query.get("type")), _set(query.get("queues"))
    sees = access.scope().sees_named

    def wanted(event: Mapping[str, Any]) -> bool:
        return matches(event, types, queues, sees)

    limit = int_param(query.get("limit"), "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
    streaming = "text/event-stream" in request.headers.get("accept", "")
    if not streaming and ("page" in query or "per_page" in query):
        return _page(binding, request, wanted)
    cursor: Cursor | None = None
    unreadable = None
    header = request.headers.get("last-event-id", "") if streaming else ""
    if header:
        # An EventSource that gets a 400 never reconnects: an unreadable id (one from an
        # older version, say) replays everything kept instead, and says so.
        parsed = parse(header)
        cursor, unreadable = (
            ({}, f"Last-Event-ID {parsed}") if isinstance(parsed, str) else (parsed, None)
        )
    elif query.get("after"):
        parsed = parse(query["after"])
        if isinstance(parsed, str):
            raise ApiError(400, INVALID_REQUEST, f"after {parsed}")
        cursor = parsed
    if cursor is not None:
        cursor = await _clamped(binding, cursor)
    if not streaming:
        return _listed(binding, cursor, wanted, limit)
    return StreamingResponse(
        _stream(request, binding, cursor, unreadable, wanted),
        media_type="text/event-stream",
        headers={
            "OJS-Version": OJS_VERSION, "X-Request-Id": request_id,
            "Cache-Control": "no-cache", "X-Accel-Buffering": "no",
        },
    )  # fmt: skip


async def _clamped(binding: Binding, cursor: Cursor) -> Cursor:
    """`cursor`, where it is past the newest record of a partition, at that partition's
    end: a reader there gets the next event. Only a partition this process has not read
    up to is asked of the brokers (it may only be behind); one the topic lacks is
    dropped. Without an answer, a position beyond what this process read is taken as
    the end of what it read: a reader may get events twice, but none is lost."""
    ahead = [p for p, (offset, _) in cursor.items() if offset > binding.feed.read_up_to(p)]
    if not ahead:
        return cursor
    try:
        ends = await asyncio.to_thread(binding.job_states_ends, ahead)
    except KafkaException as exc:
        log.warning("the end offsets of job_states are unknown: %s", exc.args[0].str())
        ends = {p: binding.feed.read_up_to(p) for p in ahead}
    clamped = dict(cursor)
    for p in ahead:
        if p not in ends:
            del clamped[p]
        elif clamped[p][0] > ends[p]:
            clamped[p] = (ends[p], 0)
    return clamped


def _listed(binding: Binding, cursor: Cursor | None, wanted: Wanted, limit: int) -> Answer:
    if cursor is None:
        kept, end = binding.feed.kept()
        events = [k.event for k in kept if wanted(k.event)][-limit:]
        return Answer(200, {"events": events, "last_id": format_cursor(end), "missed": False})
    resumed = binding.feed.resume(cursor)
    at, found = resumed.start, list[dict[str, Any]]()
    for kept_event in resumed.events:
        if len(found) == limit:
            break
        passed(at, kept_event.partition, kept_event.offset, kept_event.index)
        if wanted(kept_event.event):
            found.append(kept_event.event)
    else:  # all read: past everything this process has read too
        _, end = binding.feed.kept()
        at = {p: max(position(at, p), position(end, p)) for p in at.keys() | end.keys()}
    body = {"events": found, "last_id": format_cursor(at), "missed": bool(resumed.missed)}
    return Answer(200, body)


async def _stream(
    request: Request, binding: Binding, cursor: Cursor | None, unreadable: str | None,
    wanted: Wanted,
) -> AsyncGenerator[bytes]:  # fmt: skip
    feed = binding.feed
    resumed = feed.resume(feed.kept()[1] if cursor is None else cursor)
    yield SSE_PREAMBLE  # where the stream starts is fixed once its reader has this
    at = resumed.start
    quiet_since = time.monotonic()
    while True:
        sent = bool(resumed.missed or unreadable)
        if sent:
            yield _notice(resumed, unreadable)
            unreadable = None
        frames: list[bytes] = []
        for kept in resumed.events:
            if (kept.offset, kept.index) < position(at, kept.partition):
                continue  # before where this reader stands (its cursor was ahead of us)
            passed(at, kept.partition, kept.offset, kept.index)
            if wanted(kept.event):
                frames.append(sse_frame(format_cursor(at), kept.event))
            if len(frames) == FRAMES_PER_WRITE or frames and kept is resumed.events[-1]:
                yield b"".join(frames)
                frames, sent = [], True
        if sent:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= HEARTBEAT_S:
            quiet_since = time.monotonic()
            yield SSE_HEARTBEAT
        if await request.is_disconnected():
            return
        await asyncio.sleep(POLL_S)
        newer = feed.since(resumed.seq)
        if newer is None:  # a reader slower than the window: resume, and say what it missed
            resumed = feed.resume(at)
            at = resumed.start
        else:
            resumed = Resumed(newer, at, seq=newer[-1].seq if newer else resumed.seq)


def _notice(resumed: Resumed, unreadable: str | None) -> bytes:
    where = format_cursor(resumed.start)
    if unreadable:
        message = f"{unreadable}; every event kept follows, from the oldest"
    else:
        older = ", ".join(f"partition {p}" for p in sorted(resumed.missed))
        message = f"events were missed: the cursor is older than what is kept on {older}"
    return sse_frame(where, missed_notice(message, where))


def _page(binding: Binding, request: Request, wanted: Wanted) -> Answer:
    page = page_of(request, numbered=True, default=DEFAULT_LIMIT)
    kept = [k.event for k in binding.feed.kept()[0] if wanted(k.event)][::-1]
    items = [{**e, "timestamp": e.get("time")} for e in page.of(kept)]
    return Answer(200, page.paged(items, len(kept)))
