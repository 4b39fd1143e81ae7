"""The one set of limits on what the core accepts, so every record it derives fits.

The processor is exactly-once: a record it cannot write is read again after
every restart, so a single oversized or unprintable input would stop its
partition for good. Every topic allows 1 MiB per record (`max.message.bytes`
1048588, topics/topics.toml). The limits below are checked when a request or a
job event is parsed, and they add up under that ceiling:

- a job record is the request's fields (<= MAX_REQUEST_BYTES, 256 KiB, as
  serialised) plus the gateway's fields (a few hundred bytes) plus its
  `result` (<= MAX_RESULT_BYTES, 64 KiB) and its errors: the last one as
  `error` and again at the end of `errors` (each <= MAX_ERROR_BYTES, 16 KiB,
  kept with its type and message: at most about three times that, so 96 KiB
  for the two copies). Oban's `replace` may give a job the fields of two
  requests: 512 KiB; 512 + 96 = 608 KiB, or 512 + 64 after an ack (which drops
  `error`). So MAX_JOB_RECORD_BYTES, 640 KiB, holds every case with the last
  error; the older entries of `errors` (at most ten) are dropped, oldest first,
  while a record would exceed it, so failures never accumulate past it, and
  the core refuses an event that would still push a record past it.
- a decision record carries ids, the policy (<= one request), and either the
  new job (<= one request) or the job it matched as its record holds it (<=
  MAX_JOB_RECORD_BYTES): at most about 640 + 256 KiB, under MAX_RECORD_BYTES.
  An Oban update also lists each changed field before and after: only near
  the largest jobs can that pass the record size, and the processor's check
  then answers the request `internal` rather than write it.
- a job event is at most MAX_EVENT_BYTES, enough for a maximal result.
- the headers of an input record, at most MAX_HEADERS_BYTES together, travel
  on with it (router to requests) and some are copied into its answers; a
  request_id copied into every record about its request is at most
  MAX_ID_BYTES.

The processor checks each record it writes against MAX_RECORD_BYTES before it
produces anything (stage/total.py): with the limits above that check is a
safety net, never the refusal a valid input meets.

Nesting is at most MAX_DEPTH levels (orjson cannot serialise past 255), and
integers at most MAX_SAFE_INTEGER in magnitude: JSON parsers round larger
integer literals to doubles, so two different ones would collide in a key. A
number written with a fraction or an exponent is a double whatever its size
(1e21, -0.0, 5e-324) and RFC 8785 writes it exactly, so it is taken; only
NaN and the infinities, which JSON cannot carry, are refused. orjson reads an
integer literal beyond 64 bits as a float, so where JSON text is parsed
`rounded_integer_problem` finds those literals in the text.

Durations are at most MAX_DURATION_MS and instants lie in [MIN_INSTANT_MS,
MAX_INSTANT_MS): an instant plus a period, a retention or a capped retry delay
(1.5 x MAX_DURATION_MS with jitter) then stays well inside the years 1..9999
that RFC 3339 dates (and Python's datetime) can print.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from gateway.core.errors import PAYLOAD_TOO_LARGE, GatewayError

# What any one record the processor writes may weigh: key, value and headers,
# with room under 1048588 for Kafka's own framing.
MAX_RECORD_BYTES = 1_000_000
MAX_REQUEST_BYTES = 256 * 1024
MAX_HEADERS_BYTES = 16 * 1024
MAX_ID_BYTES = 255
# An idempotency key (core/idempotency.py): OJS's bulk idempotency_key bound.
MAX_IDEMPOTENCY_KEY_CHARS = 256
MAX_EVENT_BYTES = 128 * 1024
MAX_RESULT_BYTES = 64 * 1024
MAX_ERROR_BYTES = 16 * 1024
MAX_JOB_RECORD_BYTES = 640 * 1024
MAX_DEPTH = 64
# A cron's definition as JSON: its state is kept and published at every firing.
MAX_CRON_BYTES = 64 * 1024
MAX_SAFE_INTEGER = 2**53 - 1
MS_PER_DAY = 86_400_000
MAX_DURATION_DAYS = 36_500  # 100 years of 365 days
MAX_DURATION_MS = MAX_DURATION_DAYS * MS_PER_DAY
MIN_INSTANT = "1970-01-01T00:00:00Z"
MAX_INSTANT = "9000-01-01T00:00:00Z"
MIN_INSTANT_MS = 0
MAX_INSTANT_MS = (datetime(9000, 1, 1, tzinfo=UTC) - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(
    milliseconds=1
)

_CONTAINERS = (dict, list)
_INF = float("inf")
# orjson reads an integer literal outside [-2**63, 2**64 - 1] as a float: one of at
# least 19 digits. A run of 19 digits anywhere in a text is the cheap sign of one,
# found as 19 zeros once every digit is a zero and every other byte a space (some ten
# times faster than a regular expression).
_DIGITS_AS_ZEROS = bytes(0x30 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))
_LONG_RUN = b"0" * 19
# A JSON string (skipped whole, so digits inside strings never count), or an integer
# literal of at least 19 digits: not part of a fraction or an exponent, none following.
_STRING_OR_LONG_INTEGER = (
    r'"[^"\\]*(?:\\.[^"\\]*)*"|(?<![0-9A-Za-z_.+-])(-?[0-9]{19,})(?![0-9A-Za-z_.])'
)
_LONG_INTEGERS = re.compile(_STRING_OR_LONG_INTEGER.encode(), re.DOTALL)


def too_large(what: str, size: int, limit: int) -> GatewayError:
    """The `payload_too_large` error for `size` bytes of `what` over `limit`."""
    return GatewayError(
        PAYLOAD_TOO_LARGE,
        f"{what} is {size} bytes; the limit is {limit} bytes ({limit // 1024} KiB)",
    )


def headers_refusal(headers: dict[str, bytes]) -> GatewayError | None:
    """An input record's headers over MAX_HEADERS_BYTES, refused before the record is read."""
    size = sum(len(name.encode()) + len(value) for name, value in headers.items())
    return (
        too_large("the record's headers", size, MAX_HEADERS_BYTES)
        if (size > MAX_HEADERS_BYTES)
        else None
    )


def event_size_refusal(value: bytes | None) -> GatewayError | None:
    """A job event over MAX_EVENT_BYTES: refused where it arrives, not forwarded."""
    size = len(value or b"")
    return too_large("the job event", size, MAX_EVENT_BYTES) if size > MAX_EVENT_BYTES else None


def json_problem(value: Any, root: str = "") -> str | None:
    """Why a parsed JSON value breaks the depth or number rule, naming the path; else None.

    Iterative (a deep value cannot exhaust the interpreter's stack) and cheap:
    it runs on every request, so it only looks, and a second walk finds the
    path once something is wrong. `root` names the value in messages ("" when
    its keys are themselves field names, as for a request).
    """
    if type(value) not in _CONTAINERS:
        return _number_problem(value, root)
    stack = [(value, 1)]
    while stack:
        container, depth = stack.pop()
        for item in container.values() if type(container) is dict else container:
            kind = type(item)
            if kind is str:
                continue
            if kind is dict or kind is list:
                if depth >= MAX_DEPTH:
                    return _locate(value, root)
                stack.append((item, depth + 1))
            elif kind is int:
                if not -MAX_SAFE_INTEGER <= item <= MAX_SAFE_INTEGER:
                    return _locate(value, root)
            elif kind is float and not -_INF < item < _INF:  # NaN or an infinity
                return _locate(value, root)
    return None


def rounded_integer_problem(
    value: Any, text: bytes | bytearray | str, root: str = ""
) -> str | None:
    """Why `value`, which orjson parsed from `text`, holds an integer literal it rounded.

    orjson reads an integer literal beyond 64 bits (1 followed by 21 zeros) as a
    float, which `json_problem` cannot tell from a double written as one (1e21):
    the text can. A cheap look at the text settles nearly every one; only a text
    holding an integer literal of 19 digits or more is read token by token, and
    then `value` is walked to name the first place, in document order, that
    breaks the rules: a float equal to such a literal, or whatever `json_problem`
    finds. (A double of the very same value written before the literal is named
    instead of it; the text is refused either way.) Call it with the text
    wherever JSON is parsed for the core, before anything is taken from it.
    """
    rounded = _rounded_integers(text)
    if not rounded:
        return None
    if type(value) not in _CONTAINERS:
        return _number_problem(value, root, rounded)
    return _locate(value, root, rounded)


def _rounded_integers(text: bytes | bytearray | str) -> frozenset[float]:
    """`text`'s integer literals of 19 digits or more as floats, as orjson reads those
    beyond 64 bits."""
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    if _LONG_RUN not in data.translate(_DIGITS_AS_ZEROS):
        return frozenset()
    literals = [m.group(1) for m in _LONG_INTEGERS.finditer(data)]
    out = set()
    for literal in literals:
        # Beyond the largest double (or int's digit limit) orjson refused the text.
        with contextlib.suppress(OverflowError, ValueError):
            if literal is not None:
                out.add(float(int(literal)))
    return frozenset(out)


def _locate(
    value: dict[str, Any] | list[Any], root: str, rounded: frozenset[float] = frozenset()
) -> str | None:
    """`json_problem`'s message for the first offending place, in document order; with
    `rounded`, a float among them is one too (see `rounded_integer_problem`)."""
    frames = [_children(value)]
    names: list[object] = []  # the key or index leading to each open frame after the first
    while frames:
        for name, item in frames[-1]:
            kind = type(item)
            if kind is dict or kind is list:
                if len(frames) >= MAX_DEPTH:
                    return f"{_path(root, [*names, name])} is nested deeper than {MAX_DEPTH} levels"
                names.append(name)
                frames.append(_children(item))
                break
            problem = _number_problem(item, "", rounded)
            if problem is not None:
                return _number_problem(item, _path(root, [*names, name]), rounded)
        else:
            frames.pop()
            if names:
                names.pop()
    return None


def _children(container: dict[str, Any] | list[Any]) -> Iterator[tuple[object, Any]]:
    return iter(container.items()) if type(container) is dict else iter(enumerate(container))


def _number_problem(value: Any, where: str, rounded: frozenset[float] = frozenset()) -> str | None:
    """An integer beyond the range, NaN or an infinity, or a float among `rounded`."""
    kind = type(value)
    if kind is float:
        if not -_INF < value < _INF:
            return f"{where or 'the value'} is {value}, which is not a JSON number"
        if value not in rounded:
            return None
    elif kind is not int or -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
        return None
    return f"{where or 'the value'}: integers beyond ±(2^53−1) are not exact; send them as strings"


def _path(root: str, names: list[object]) -> str:
    out = root
    for name in names:
        if isinstance(name, int):
            out += f"[{name}]"
        else:
            out = f"{out}.{name}" if out else str(name)
    return out


def duration_problem(ms: int, field: str) -> str | None:
    """Why a duration is out of bounds (it must be at most MAX_DURATION_MS), else None."""
    if ms <= MAX_DURATION_MS:
        return None
    return f"{field} is longer than {MAX_DURATION_DAYS} days (100 years), the longest duration"


def instant_problem(ms: int, field: str) -> str | None:
    """Why an instant is out of bounds, else None."""
    if MIN_INSTANT_MS <= ms < MAX_INSTANT_MS:
        return None
    return f"{field} must be from {MIN_INSTANT} up to (not including) {MAX_INSTANT}"
