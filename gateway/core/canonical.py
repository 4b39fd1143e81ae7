"""RFC 8785 (JCS) canonical JSON of NFC-normalised values.

Numbers: a float is a double, whatever its size, and is written as JCS writes
it (ECMAScript's Number.prototype.toString): 1e21 as 1e+21, 4e15 as
4000000000000000, 1.0 as 1, -0.0 as 0, 5e-324 as 5e-324; only NaN and the
infinities have no form. An int is an integer literal, and one beyond
+-(2**53 - 1) is refused: a JSON parser rounds it to a double, so two
different ones would share a key (send it as a string).

The reference is the `rfc8785` package applied to the NFC-normalised value. It
is pure Python and slow, so `canonical_json` first tries a fast path through
orjson restricted to inputs it provably serialises byte-for-byte identically:

- strings: orjson and rfc8785 escape exactly the same characters the same way
  (checked for every code point by the tests) and both write raw UTF-8;
- object keys: orjson sorts by code point, JCS by UTF-16 code unit; the two
  orders agree when no key has a character at or above U+E000 (below that a
  code point is its own single code unit), so other keys take the reference;
- integers within +-(2**53 - 1), the JCS domain; rfc8785 rejects the rest;
- floats: an integral float of safe magnitude is written as that integer (JCS
  writes 1.0 as 1, and below 2**53 the shortest digits of an integral double
  are the integer's own); any other float whose Python repr has no exponent
  is written as that repr, which is exactly what rfc8785 derives from it
  (repr and ECMAScript both give the shortest digits that round-trip); every
  other float (an integral one beyond +-(2**53 - 1), such as 1e21, or one
  whose repr has an exponent, such as 1e-5), NaN and the infinities take the
  reference path;
- true, false, null, arrays and objects of the above.

Anything else, including every invalid input, takes the reference path, which
also produces the error message naming the offending field.
"""

from __future__ import annotations

import math
import unicodedata
from typing import Any

import orjson
import rfc8785

from gateway.core.errors import invalid_request
from gateway.core.limits import MAX_SAFE_INTEGER

_KEY_ORDER_SAFE_BELOW = "\ue000"
# By chr(): mypyc compiles no surrogate in a string literal.
_SURROGATE_FIRST, _SURROGATE_LAST = chr(0xD800), chr(0xDFFF)


class _NotFast(Exception):
    """The value is outside the subset the fast path is proven for."""


def canonical_json(value: Any, path: str = "value") -> bytes:
    """JCS bytes of the NFC-normalised value; raises Invalid if it has none.

    Error messages name the offending field from `path` on ("" for a root
    object whose keys are themselves field names).
    """
    try:
        return orjson.dumps(_fast(value), option=orjson.OPT_SORT_KEYS)
    except (_NotFast, orjson.JSONEncodeError, RecursionError):
        # orjson refuses lone surrogates and very deep nesting; the reference decides.
        return canonical_json_reference(value, path)


def canonical_json_reference(value: Any, path: str = "value") -> bytes:
    """The same bytes through the reference implementation only."""
    try:
        return rfc8785.dumps(nfc_normalize(value, path))
    except rfc8785.CanonicalizationError as exc:
        raise invalid_request(f"{path or 'the value'} cannot be canonicalised: {exc}") from None
    except RecursionError:
        raise invalid_request(f"{path or 'the value'} is nested too deeply") from None


def nfc_normalize(value: Any, path: str = "value") -> Any:
    """A copy with every string (keys and values) in NFC; raises Invalid for non-JSON values."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        if any(_SURROGATE_FIRST <= c <= _SURROGATE_LAST for c in value):
            raise invalid_request(f"{path} contains a lone surrogate, which is not valid Unicode")
        return unicodedata.normalize("NFC", value)
    if isinstance(value, int):
        if not -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
            raise invalid_request(
                f"{path} is {value}, outside the JSON safe integer range +-(2**53 - 1) that "
                "RFC 8785 can represent exactly; send it as a string"
            )
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise invalid_request(f"{path} is {value}, which is not a JSON number")
        return value
    if isinstance(value, list | tuple):
        return [nfc_normalize(item, f"{path}[{i}]") for i, item in enumerate(value)]
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        originals: dict[str, str] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise invalid_request(f"{path or 'the value'} has a non-string key {key!r}")
            norm_key = nfc_normalize(key, f"{path} key {key!r}")
            if norm_key in out:
                raise invalid_request(
                    f"{path or 'the value'} has keys {ascii(originals[norm_key])} and "
                    f"{ascii(key)}, which are equal after Unicode NFC normalisation; keep one"
                )
            originals[norm_key] = key
            out[norm_key] = nfc_normalize(item, f"{path}.{key}" if path else key)
        return out
    raise invalid_request(f"{path} is a {type(value).__name__}, not a JSON value")


def _fast(value: Any) -> Any:
    kind = type(value)
    if kind is dict:
        out = {}
        renamed = False
        for key, item in value.items():
            if type(key) is not str:
                raise _NotFast
            if not key.isascii():
                key = unicodedata.normalize("NFC", key)
                if max(key) >= _KEY_ORDER_SAFE_BELOW:
                    raise _NotFast
                renamed = True
            # The two commonest leaves are handled inline: this loop is the hot path.
            kind = type(item)
            if (kind is str and item.isascii()) or (
                kind is int and -MAX_SAFE_INTEGER <= item <= MAX_SAFE_INTEGER
            ):
                out[key] = item
            else:
                out[key] = _fast(item)
        if renamed and len(out) != len(value):  # two keys merged under NFC: an error
            raise _NotFast
        return out
    if kind is str:
        return value if value.isascii() else unicodedata.normalize("NFC", value)
    if kind is int:
        if -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
            return value
        raise _NotFast
    if kind is list:
        return [_fast(item) for item in value]
    if value is None or kind is bool:
        return value
    if kind is float and math.isfinite(value):
        if value.is_integer():
            if -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
                return int(value)  # also maps -0.0 to 0, as JCS requires
            raise _NotFast
        text = repr(value)
        if "e" not in text:
            return orjson.Fragment(text)
    raise _NotFast
