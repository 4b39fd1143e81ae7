"""Field readers the dialect parsers share; each raises `Invalid` naming the field."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from gateway.core.canonical import canonical_json
from gateway.core.envelope import DEFAULT_QUEUE, QUEUE_NAME_RULE, is_valid_queue_name
from gateway.core.errors import invalid_request
from gateway.core.limits import instant_problem
from gateway.core.times import parse_rfc3339


def none_or_zero(value: Any) -> bool:
    """Whether a number field means "none": absent, null or the whole number 0. JSON's 0.0 and
    false equal 0 in Python, yet are not a whole number, so they are refused as one."""
    return value is None or (type(value) is int and value == 0)


def name(raw: Mapping[str, Any], field: str, example: str) -> str:
    value = raw.get(field)
    if not isinstance(value, str) or not value:
        raise invalid_request(f"{field} is required: a non-empty string such as {example}")
    return value


def queue(raw: Mapping[str, Any], field: str = "queue") -> str:
    value = raw.get(field)
    if value is None:
        return DEFAULT_QUEUE
    if not isinstance(value, str) or not is_valid_queue_name(value):
        raise invalid_request(f"{field} is not a valid queue name: use {QUEUE_NAME_RULE}")
    return value


def optional_object(raw: Mapping[str, Any], field: str) -> dict[str, Any] | None:
    value = raw.get(field)
    if value is not None and not isinstance(value, dict):
        raise invalid_request(f"{field} must be an object")
    return value


def optional_time(raw: Mapping[str, Any], field: str) -> int | None:
    value = raw.get(field)
    if value is None:
        return None
    ms = parse_rfc3339(value) if isinstance(value, str) else None
    if ms is None:
        raise invalid_request(
            f'{field} must be an RFC 3339 date-time with a time zone, e.g. "2026-02-12T10:00:00Z"'
        )
    problem = instant_problem(ms, field)
    if problem is not None:
        raise invalid_request(problem)
    return ms


def optional_int(
    raw: Mapping[str, Any], field: str, low: int, high: int | None = None
) -> int | None:
    value = raw.get(field)
    if value is None:
        return None
    bad = isinstance(value, bool) or not isinstance(value, int) or value < low
    if bad or (high is not None and value > high):
        bound = f"from {low} to {high}" if high is not None else f"of at least {low}"
        raise invalid_request(f"{field} must be an integer {bound}")
    return value


def string_list(value: Any, field: str, example: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise invalid_request(f"{field} must be an array of strings, e.g. {example}")
    if len(set(value)) != len(value):
        raise invalid_request(f"{field} lists an item twice; list each once")
    return value


def namespaced_key(namespace: str, obj: Mapping[str, Any], field: str) -> str:
    """SHA-256 of the JCS form of `obj` tagged with its namespace, which no OJS
    canonical object has, so the key can never equal an OJS key."""
    return hashlib.sha256(canonical_json({"namespace": namespace, **obj}, field)).hexdigest()


def job_fields(raw: Mapping[str, Any], renamed: tuple[str, ...], **ojs: Any) -> dict[str, Any]:
    """The job record's fields: the request's own, its dialect names replaced by OJS ones."""
    out = {k: v for k, v in raw.items() if k not in renamed}
    out.update({k: v for k, v in ojs.items() if v is not None})
    return out
