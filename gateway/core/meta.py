"""What a job's `meta` may hold (OJS security §8.3): the check the edges make before a
job is sent (the SDK's prepare, so the HTTP binding too, and a cron's template).

Keys of 1 to 128 characters of A-Z, a-z, 0-9, "_", "." and "-"; no string in a
value holds a newline ("\\r" or "\\n"), since meta values may end up in headers
downstream; and 64 KiB at most in all, as JSON. The processor does not check it:
jobs sent before the rule, or by a producer writing to Kafka itself, are decided
as they always were.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

MAX_META_BYTES = 64 * 1024
KEY_RULE = '1 to 128 characters of A-Z, a-z, 0-9, "_", "." and "-"'
_KEY = re.compile(r"[A-Za-z0-9_.-]{1,128}")


def meta_problem(meta: dict[str, Any] | None, where: str = "meta") -> str | None:
    """Why `meta` may not be sent, naming the key; None when it may."""
    if not meta:
        return None
    for key, value in meta.items():
        if not _KEY.fullmatch(key):
            return f"{where} key {key[:140]!r} is not valid: use {KEY_RULE}"
        if _has_newline(value):
            return f"{where}.{key} holds a newline; meta values may not"
    if len(orjson.dumps(meta)) > MAX_META_BYTES:
        return f"{where} is over {MAX_META_BYTES // 1024} KiB as JSON"
    return None


def _has_newline(value: Any) -> bool:
    """Whether any string in `value` (its keys among them, at any depth) holds one."""
    left = [value]
    while left:
        item = left.pop()
        if isinstance(item, str):
            if "\n" in item or "\r" in item:
                return True
        elif isinstance(item, dict):
            left.extend(item.keys())
            left.extend(item.values())
        elif isinstance(item, list):
            left.extend(item)
    return False
