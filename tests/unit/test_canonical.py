"""The JCS fast path produces the reference bytes: `rfc8785` over NFC-normalised input."""

from __future__ import annotations

import math
import unicodedata
from typing import Any

import orjson
import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core.canonical import (
    MAX_SAFE_INTEGER,
    _fast,
    _NotFast,
    canonical_json,
    canonical_json_reference,
)
from gateway.core.errors import Invalid


def oracle(value: Any) -> bytes | None:
    """rfc8785 over an NFC copy built here, independently; None where no canonical form exists."""

    def nfc(v: Any) -> Any:
        if isinstance(v, str):
            return unicodedata.normalize("NFC", v)
        if isinstance(v, list):
            return [nfc(x) for x in v]
        if isinstance(v, dict):
            out = {nfc(k): nfc(x) for k, x in v.items()}
            if len(out) != len(v):
                raise ValueError("keys merged under NFC")
            return out
        return v

    try:
        return rfc8785.dumps(nfc(value))
    except (ValueError, rfc8785.CanonicalizationError):
        return None


def ours(value: Any) -> bytes | None:
    try:
        return canonical_json(value)
    except Invalid:
        return None


# Strings that stress NFC and JCS ordering: decomposed/composed pairs, a singleton
# decomposition (KELVIN SIGN -> K), U+E000..U+FFFF and astral characters, which
# sort differently by code point and by UTF-16 code unit.
TRICKY = ["caf\u00e9", "cafe\u0301", "\u212a", "K", "\u00c5", "A\u030a", "\ufb01", "\ue000",
          "\uffff", "\U0001f600", "\U00010000", "a\U0001f600", "a\uff61", "", "\x00", "\u2028",
          '"', "\\", "\x7f"]  # fmt: skip
texts = st.one_of(
    st.text(max_size=6),
    st.sampled_from(TRICKY),
    st.text(st.characters(min_codepoint=0xE000, max_codepoint=0xFFFF), max_size=3),
    st.text(st.characters(min_codepoint=0x10000), max_size=3),
    st.text(st.sampled_from(["a", "e", "\u0301", "\u00e9", "\u0327", "c", "\u00e7"]), max_size=4),
)
numbers = st.one_of(
    st.integers(min_value=-MAX_SAFE_INTEGER, max_value=MAX_SAFE_INTEGER),
    st.integers(min_value=-5, max_value=5),
    st.sampled_from([MAX_SAFE_INTEGER, -MAX_SAFE_INTEGER, 0, -0.0, 1.0, 1e16, 1e21, 1e-7, 5e-324]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.floats(min_value=-1e6, max_value=1e6, allow_nan=False).map(round).map(float),
)
scalars = st.one_of(st.none(), st.booleans(), numbers, texts)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=5),
    max_leaves=20,
)
bad_scalars = st.sampled_from(
    [2**53, -(2**53), 2**64, 10**30, math.nan, math.inf, -math.inf, "\ud800", "a\udfff"]
)
values_with_errors = st.recursive(
    scalars | bad_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=10,
)


@settings(max_examples=400)
@given(json_values)
def test_canonical_json_equals_rfc8785_over_nfc(value: Any) -> None:
    assert ours(value) == oracle(value)


@settings(max_examples=300)
@given(values_with_errors)
def test_invalid_values_are_rejected_exactly_when_rfc8785_rejects(value: Any) -> None:
    assert ours(value) == oracle(value)


# The subset the fast path claims: it must take it (no fallback) and be exact.
fast_texts = st.text(st.characters(max_codepoint=0xDFFF, exclude_categories=["Cs"]), max_size=6)
fast_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-MAX_SAFE_INTEGER, max_value=MAX_SAFE_INTEGER),
    st.floats(min_value=1e-4, max_value=9e15, allow_nan=False),
    st.floats(min_value=-9e15, max_value=-1e-4, allow_nan=False),
    st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1).map(float),
    texts,
)
fast_values = st.recursive(
    fast_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(fast_texts, inner, max_size=5),
    max_leaves=20,
)


@settings(max_examples=400)
@given(fast_values)
def test_fast_path_covers_its_subset_exactly(value: Any) -> None:
    expected = oracle(value)
    if expected is None:  # NFC merged two keys: that one is the reference's to report
        return
    assert orjson.dumps(_fast(value), option=orjson.OPT_SORT_KEYS) == expected


def test_the_fast_path_escapes_every_code_point_as_jcs_does() -> None:
    # Escaping is per character, so comparing long runs proves it for each one.
    for start in range(0, 0x110000, 2048):
        run = "".join(
            chr(c) for c in range(start, min(start + 2048, 0x110000)) if not 0xD800 <= c <= 0xDFFF
        )
        if run:
            assert orjson.dumps(run) == rfc8785.dumps(run), hex(start)


def test_keys_sort_by_utf16_code_units_not_code_points() -> None:
    value = {"\ue000": 1, "\U0001f600": 2, "z": 3}
    assert canonical_json(value) == '{"z":3,"\U0001f600":2,"\ue000":1}'.encode()
    with pytest.raises(_NotFast):  # code point order would differ: the reference decides
        _fast(value)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1.0, b"1"),
        (-0.0, b"0"),
        (0.5, b"0.5"),
        (1e21, b"1e+21"),
        (1e-7, b"1e-7"),
        (1e-6, b"0.000001"),
        (1e20, b"100000000000000000000"),
        (MAX_SAFE_INTEGER, b"9007199254740991"),
        (float(2**53), b"9007199254740992"),  # a double is in the JCS domain whatever its size
    ],
)
def test_numbers_serialise_as_ecmascript_does(value: Any, expected: bytes) -> None:
    assert canonical_json(value) == expected == rfc8785.dumps(value)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (2**53, "outside the JSON safe integer range"),
        (-(2**53), "outside the JSON safe integer range"),
        (math.nan, "not a JSON number"),
        (math.inf, "not a JSON number"),
        ({"a": "\ud800"}, "lone surrogate"),
        ({"caf\u00e9": 1, "cafe\u0301": 2}, "equal after Unicode NFC normalisation"),
        ({"\u212a": 1, "K": 2}, "equal after Unicode NFC normalisation"),
        ({1: 2}, "non-string key"),
        ({"a": {1, 2}}, "not a JSON value"),
    ],
)
def test_values_without_a_canonical_form(value: Any, message: str) -> None:
    for encode in (canonical_json, canonical_json_reference):
        with pytest.raises(Invalid) as caught:
            encode(value, "args")
        assert caught.value.error.code == "invalid_request"
        assert caught.value.error.message.startswith("args")
        assert message in caught.value.error.message


def test_error_messages_name_the_nested_field() -> None:
    with pytest.raises(Invalid) as caught:
        canonical_json({"a": [0, {"b": 2**60}]}, "args")
    assert caught.value.error.message.startswith("args.a[1].b is 1152921504606846976")


def test_very_deep_nesting_is_an_error_not_a_crash() -> None:
    value: Any = 1
    for _ in range(5000):
        value = [value]
    with pytest.raises(Invalid, match="nested too deeply"):
        canonical_json(value, "args")
