"""Idempotency keys: a retried request gets the original answer, not a new decision.

A caller names an enqueue (or a whole batch) with a key of its own. The same key with
the same body within the window gets the answer the first one got; the same key with
another body is refused (`idempotency_key_reused`). Pure: the processor keeps the
records these functions read and write (stage/idempotency.py).

Two records, because a request's route is a function of its body: at the key's home
(the partition its own bytes route to) an `Admission` remembers, per item, the digest of
the body admitted under the key (a single request is one item; a batch of n has items
0..n-1), so another body under the key is caught exactly, wherever it would route; at the
request's route an `Answer` remembers the decision record it got, so a retry, which the
home sends to the same route, is answered with those bytes and decided no more.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.core.errors import INVALID_REQUEST, GatewayError
from gateway.core.limits import MAX_IDEMPOTENCY_KEY_CHARS

IDEMPOTENCY_KEY_REUSED = "idempotency_key_reused"
MAX_KEY_CHARS = MAX_IDEMPOTENCY_KEY_CHARS
# How long a key's first answer is kept: OJS asks for at least 24 hours.
DEFAULT_IDEMPOTENCY_MS = 24 * 3600 * 1000
# Fields of a request that are not part of the body compared: each attempt has its own.
_NOT_COMPARED = ("request_id",)
_RECORD = b',"record":'


def key_problem(key: object, name: str = "idempotency_key") -> GatewayError | None:
    """Why `key` is no idempotency key (`name`: where the caller gave it), else None: a key
    is a string of 1 to 256 printable characters."""
    if not isinstance(key, str):
        return GatewayError(INVALID_REQUEST, f"{name} must be a string")
    if not 1 <= len(key) <= MAX_KEY_CHARS:
        return GatewayError(
            INVALID_REQUEST, f"{name} must be 1 to {MAX_KEY_CHARS} characters, not {len(key)}"
        )
    if not key.isprintable():
        return GatewayError(
            INVALID_REQUEST, f"{name} {key!r} has a character that is not printable"
        )
    return None


def body_digest(body: object) -> str:
    """The digest of a request's body as compared between attempts: its JSON with sorted
    keys, without `request_id` (each attempt has its own)."""
    if isinstance(body, Mapping):
        body = {k: v for k, v in body.items() if k not in _NOT_COMPARED}
    try:
        data = orjson.dumps(body, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # beyond orjson (a 65-bit integer): the standard library's JSON
        data = json.dumps(body, sort_keys=True, default=repr).encode()
    return hashlib.sha256(data).hexdigest()


def value_digest(value: bytes | None) -> str:
    """`body_digest` of a request record's value; bytes that are not JSON, as bytes."""
    try:
        body = orjson.loads(value or b"")
    except orjson.JSONDecodeError:
        return hashlib.sha256(b"\x00" + (value or b"")).hexdigest()
    return body_digest(body)


def reused(key: str) -> GatewayError:
    return GatewayError(
        IDEMPOTENCY_KEY_REUSED,
        f"idempotency key {key!r} was used with another request within its window; "
        "send the same request to get its answer, or use a new key",
    )


@dataclass(frozen=True, slots=True)
class Item:
    """Which item of what a key names: `index` of `count` (a single request: 0 of None)."""

    index: int = 0
    count: int | None = None

    def dump(self) -> str:
        return "" if self.count is None else f"{self.index}/{self.count}"

    @classmethod
    def parse(cls, text: str | None) -> Item | GatewayError:
        """From the `idempotency_item` header ("i/n"; absent or empty: a single request)."""
        if not text:
            return cls()
        index, _, count = text.partition("/")
        if not (index.isdigit() and count.isdigit() and int(index) < int(count)):
            return GatewayError(INVALID_REQUEST, f"idempotency_item {text!r} is not i/n, i < n")
        return cls(int(index), int(count))


@dataclass(frozen=True, slots=True)
class Admission:
    """At the key's home: what the key admitted, until when. `items`: per item index, the
    body digest and the job id minted for it (None: the body had its own route)."""

    count: int | None
    until_ms: int
    items: dict[int, tuple[str, str | None]] = field(default_factory=dict)

    def dump(self) -> bytes:
        items = {str(i): [d, j] for i, (d, j) in sorted(self.items.items())}
        return orjson.dumps({"count": self.count, "until_ms": self.until_ms, "items": items})

    @classmethod
    def load(cls, raw: bytes | None) -> Admission | None:
        if raw is None:
            return None
        data = orjson.loads(raw)
        items = {int(i): (str(d), j) for i, (d, j) in data["items"].items()}
        return cls(data["count"], int(data["until_ms"]), items)


@dataclass(frozen=True, slots=True)
class Admitted:
    """Send the request on to its route; `job_id`: the id it was given before (a retry of a
    job without key or id gets the same one), None if it has none yet."""

    admission: Admission
    job_id: str | None


def admit(
    key: str, before: Admission | None, item: Item, digest: str, now_ms: int, window_ms: int
) -> Admitted | GatewayError:
    """The home's rule. A key past its window is as new. A new key (or a new item of a
    batch the key admitted, one a first attempt never delivered) is admitted with its
    digest; an item admitted with the same digest again is admitted again; another digest
    for an item, or a batch of another size, is the key reused."""
    if before is None or before.until_ms <= now_ms:
        before = Admission(item.count, now_ms + window_ms)
    if before.count != item.count:
        return reused(key)
    held = before.items.get(item.index)
    if held is None:
        items = {**before.items, item.index: (digest, None)}
        return Admitted(Admission(before.count, before.until_ms, items), None)
    if held[0] != digest:
        return reused(key)
    return Admitted(before, held[1])


def with_job_id(admission: Admission, item: Item, job_id: str) -> Admission:
    """The admission, remembering the id the home gave the item's job."""
    digest, _ = admission.items[item.index]
    return Admission(admission.count, admission.until_ms,
                     {**admission.items, item.index: (digest, job_id)})  # fmt: skip


@dataclass(frozen=True, slots=True)
class Answer:
    """At the request's route: the decision record a key's item was answered with."""

    digest: str
    until_ms: int
    record: bytes
    replays: int = 0

    def dump(self) -> bytes:
        """JSON, the record last and as it is, so that `load` gives back its very bytes."""
        head = orjson.dumps(
            {"digest": self.digest, "until_ms": self.until_ms, "replays": self.replays}
        )
        return b"%b%b%b}" % (head[:-1], _RECORD, self.record)

    @classmethod
    def load(cls, raw: bytes | None) -> Answer | None:
        if raw is None:
            return None
        cut = raw.index(_RECORD)
        data = orjson.loads(raw[:cut] + b"}")
        record = raw[cut + len(_RECORD) : -1]
        return cls(str(data["digest"]), int(data["until_ms"]), record, int(data["replays"]))


def answered(held: Answer | None, digest: str, now_ms: int) -> Answer | None:
    """The route's rule: the answer a request admitted under a key gets without a new
    decision (the held one, for the same digest within its window), else None: decide."""
    if held is None or held.until_ms <= now_ms or held.digest != digest:
        return None
    return held


def details(key: str) -> dict[str, Any]:
    return {"idempotency_key": key}
