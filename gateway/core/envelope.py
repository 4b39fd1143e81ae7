"""The OJS job envelope of an enqueue request, validated.

Two shapes are read: the OJS envelope (top-level `queue`, `unique`) and the
HTTP form (`options.queue`, `options.unique`). Only these options are read;
every other field, known or not, is kept in `raw` and carried into the
accepted job unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway.core.errors import invalid_request
from gateway.core.times import parse_rfc3339

DEFAULT_QUEUE = "default"
DEFAULT_MAX_ATTEMPTS = 3
QUEUE_NAME_RULE = (
    '1 to 255 characters of a-z, 0-9, ".", "_" and "-", starting with a letter or digit'
)
_QUEUE_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,254}")
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


@dataclass(frozen=True, slots=True)
class Envelope:
    raw: Mapping[str, Any]
    type: str
    queue: str
    args: list[Any] | dict[str, Any]
    id: str | None = None
    meta: dict[str, Any] | None = None
    scheduled_at: int | None = None
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    priority: int | None = None
    # The raw unique policy and where it was found ("unique" or "options.unique").
    unique: Any = None
    unique_field: str | None = None


def envelope_or_raise(raw: object) -> Envelope:
    if not isinstance(raw, Mapping):
        raise invalid_request("the job must be a JSON object")
    options = raw.get("options")
    if options is not None and not isinstance(options, Mapping):
        raise invalid_request("options must be an object")
    options = options or {}

    job_type = raw.get("type")
    if not isinstance(job_type, str) or not job_type:
        raise invalid_request('type is required: a non-empty string such as "email.send"')

    queue = _queue(raw, options)

    if "args" not in raw:
        raise invalid_request("args is required: a JSON array (or object) of job arguments")
    args = raw["args"]
    if not isinstance(args, list | dict):
        raise invalid_request("args must be a JSON array or object")

    meta = raw.get("meta")
    if meta is not None and not isinstance(meta, dict):
        raise invalid_request("meta must be an object")

    top_unique, nested_unique = raw.get("unique"), options.get("unique")
    if top_unique is not None and nested_unique is not None:
        raise invalid_request("give the unique policy either as unique or as options.unique")
    unique_field = None
    if top_unique is not None:
        unique_field = "unique"
    elif nested_unique is not None:
        unique_field = "options.unique"

    return Envelope(
        raw=raw,
        type=job_type,
        queue=queue,
        args=args,
        id=job_id_or_raise(raw.get("id")),
        meta=meta,
        scheduled_at=_scheduled_at(raw.get("scheduled_at")),
        max_attempts=_max_attempts(raw.get("max_attempts")),
        priority=_priority(raw.get("priority")),
        unique=top_unique if top_unique is not None else nested_unique,
        unique_field=unique_field,
    )


def is_valid_queue_name(name: str) -> bool:
    return _QUEUE_NAME.fullmatch(name) is not None


def _queue(raw: Mapping[str, Any], options: Mapping[str, Any]) -> str:
    top, nested = raw.get("queue"), options.get("queue")
    if top is not None and nested is not None and top != nested:
        raise invalid_request(
            f"queue ({top!r}) and options.queue ({nested!r}) differ; give the queue once"
        )
    field = "queue" if top is not None else "options.queue"
    queue = top if top is not None else nested
    if queue is None:
        return DEFAULT_QUEUE
    if not isinstance(queue, str) or not is_valid_queue_name(queue):
        shown = f'"{queue}"' if isinstance(queue, str) else "a non-string value"
        raise invalid_request(f"{field} {shown} is not a valid queue name: use {QUEUE_NAME_RULE}")
    return queue


def job_id_or_raise(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, str) and _UUID.fullmatch(value.lower()):
        return value.lower()
    raise invalid_request(
        "id must be a UUID such as 019078a3-b5c7-7def-8a12-3456789abcde, "
        "or omitted so the gateway assigns a UUIDv7"
    )


def _scheduled_at(value: object) -> int | None:
    if value is None:
        return None
    ms = parse_rfc3339(value) if isinstance(value, str) else None
    if ms is None:
        raise invalid_request(
            "scheduled_at must be an RFC 3339 date-time with a time zone, "
            'e.g. "2026-02-12T10:00:00Z"'
        )
    return ms


def _max_attempts(value: object) -> int:
    if value is None:
        return DEFAULT_MAX_ATTEMPTS
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise invalid_request("max_attempts must be an integer of at least 1")
    return value


def _priority(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid_request("priority must be an integer")
    return value
