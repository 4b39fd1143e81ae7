"""The events' wire forms on GET /ojs/v1/events: server-sent frames, the missed-events
notice, and which events a reader gets (the events are view/events.py's)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import orjson

SSE_RETRY_MS = 3000


def sse_frame(cursor: str, event: Mapping[str, Any]) -> bytes:
    """One server-sent event: the cursor past it as `id` (an EventSource sends it back
    as Last-Event-ID), the type as `event`, the envelope as `data`."""
    return f"id: {cursor}\nevent: {event['type']}\ndata: ".encode() + orjson.dumps(event) + b"\n\n"


# Sent first when a reader's cursor is older than what is kept (or unreadable): an
# EventSource sees it with addEventListener, curl as a named event.
MISSED = "events.missed"


def missed_notice(message: str, oldest_kept: str) -> dict[str, Any]:
    """The body of the MISSED event: what was missed, and the cursor the stream resumes
    from (the oldest kept)."""
    return {"type": MISSED, "message": message, "resumes_from": oldest_kept}


SSE_PREAMBLE = f"retry: {SSE_RETRY_MS}\n\n".encode()
SSE_HEARTBEAT = b":heartbeat\n\n"


def matches(
    event: Mapping[str, Any], types: frozenset[str] | None, queues: frozenset[str] | None,
    sees: Callable[[str | None, str | None], bool] | None = None,
) -> bool:  # fmt: skip
    """Whether a reader that asked for `types` and `queues` (None: any), and sees the
    jobs of the queues and tenants `sees` is true of (access.Scope.sees_named; None:
    every job), gets the event."""
    if types is not None and event["type"] not in types:
        return False
    data = event["data"]
    queue = data.get("queue")
    return (queues is None or queue in queues) and (
        sees is None or sees(queue, data.get("tenant_id"))
    )
