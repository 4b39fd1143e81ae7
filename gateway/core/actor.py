"""Who asked for a record: the principal an edge authenticated (its name, and its role when
it has one), the caller's source address and the request id the edge gave the call.

The edge that served the caller (the HTTP binding) names it on every record it sends for
the caller, in one header (wire.ACTOR_HEADER) holding this as compact JSON, and the
processor copies it into the record's audit record as `by`. The header is as trusted as
whoever writes the record: anyone who may produce to `requests` may name anyone, as they
may write any record; an edge never takes it from its caller.

Bounded: the edge cuts each field to FIELD_BYTES of UTF-8 (at a character's edge), so a
header it writes is never over MAX_ACTOR_BYTES; the processor refuses a record whose
header is over that, or is not this shape, before reading it (`parse`). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

FIELDS = ("principal", "role", "source", "request_id")
FIELD_BYTES = 255
# Each field's JSON is at most six bytes a byte of text (a control character's \u00XX).
MAX_ACTOR_BYTES = 8 * 1024


@dataclass(frozen=True, slots=True)
class Actor:
    principal: str | None = None
    role: str | None = None
    source: str | None = None
    request_id: str | None = None

    def fields(self) -> dict[str, str]:
        """The fields it has, in FIELDS order: the header's JSON, and the audit's `by`."""
        return {name: value for name in FIELDS if (value := getattr(self, name)) is not None}

    def header(self) -> bytes:
        """The header's value: each field cut to FIELD_BYTES."""
        return orjson.dumps({name: cut(value) for name, value in self.fields().items()})


def cut(text: str) -> str:
    """`text` within FIELD_BYTES of UTF-8, cut at a character's edge."""
    # Through bytes even when short: a lone surrogate becomes "?", which JSON can carry.
    return text.encode("utf-8", "replace")[:FIELD_BYTES].decode("utf-8", "ignore")


def parse(raw: bytes) -> Actor | str:
    """The actor a header names; else why it is refused."""
    if len(raw) > MAX_ACTOR_BYTES:
        return f"is {len(raw)} bytes, over {MAX_ACTOR_BYTES}"
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return "is not JSON"
    if not isinstance(value, dict) or not value.keys() <= set(FIELDS):
        return f"is not an object of {', '.join(FIELDS)}"
    for name, field in value.items():
        if not isinstance(field, str) or len(field.encode("utf-8", "replace")) > FIELD_BYTES:
            return f"field {name} is not a string of at most {FIELD_BYTES} bytes"
    return Actor(**value)


def told(by: Any) -> str | None:
    """An audit record's `by` in words: `admin:alice from 10.0.0.5` (the role only when the
    principal has one), `alice`, `from 10.0.0.5`; None when it names nobody."""
    if not isinstance(by, Mapping):
        return None
    principal, role, source = by.get("principal"), by.get("role"), by.get("source")
    words = []
    if isinstance(principal, str):
        words.append(f"{role}:{principal}" if isinstance(role, str) else principal)
    if isinstance(source, str):
        words.append(f"from {source}")
    return " ".join(words) or None
