"""The uniqueness key: selected dimensions, NFC, RFC 8785, SHA-256 lowercase hex."""

from __future__ import annotations

import hashlib
import unicodedata
from typing import Any

import pytest
import rfc8785
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from gateway.core import (
    GatewayError,
    Request,
    UniquePolicy,
    canonical_form,
    fingerprint,
    fingerprint_reference,
    parse_policy,
    parse_request,
)
from gateway.core.canonical import MAX_SAFE_INTEGER


def policy(**raw: Any) -> UniquePolicy:
    parsed = parse_policy(raw)
    assert isinstance(parsed, UniquePolicy), parsed
    return parsed


def request(job: dict[str, Any]) -> Request:
    parsed = parse_request(job)
    assert isinstance(parsed, Request), parsed
    return parsed


def form(job: dict[str, Any]) -> str:
    req = request(job)
    assert req.policy is not None
    env = req.envelope
    out = canonical_form(req.policy, env.type, env.queue, env.args, env.meta)
    assert isinstance(out, bytes), out
    return out.decode()


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


WORKED_EXAMPLE = {
    "type": "email.send",
    "queue": "notifications",
    "args": {"user_id": 42, "template": "welcome"},
    "unique": {"keys": ["type", "queue", "args"], "args_keys": ["user_id"]},
}


def test_the_pages_worked_example() -> None:
    expected = '{"args":{"user_id":42},"queue":"notifications","type":"email.send"}'
    assert form(WORKED_EXAMPLE) == expected
    key = request(WORKED_EXAMPLE).unique_key
    assert key == sha(expected)
    assert key == "71f9344b82e66297a49775bbe27752297922842b675330641ebe3ff4fea46c1f"


@pytest.mark.parametrize(
    ("job", "canonical"),
    [
        # type-level: only the type
        (
            {"type": "report.daily", "args": {"date": "2026-02-12"},
             "unique": {"keys": ["type"], "on_conflict": "ignore"}},
            '{"type":"report.daily"}',
        ),
        # args-based: user_id only, locale ignored
        (
            {"type": "email.send_welcome", "args": {"user_id": 42, "locale": "en-US"},
             "unique": {"keys": ["type", "args"], "args_keys": ["user_id"]}},
            '{"args":{"user_id":42},"type":"email.send_welcome"}',
        ),
        # time-windowed
        (
            {"type": "notification.push", "args": {"user_id": 42, "event": "new_comment"},
             "unique": {"keys": ["type", "args"], "args_keys": ["user_id", "event"],
                        "period": "PT1H", "on_conflict": "ignore"}},
            '{"args":{"event":"new_comment","user_id":42},"type":"notification.push"}',
        ),
        # queue-scoped
        (
            {"type": "image.resize", "queue": "thumbnails", "args": {"image_id": "img_abc123"},
             "unique": {"keys": ["type", "queue", "args"], "args_keys": ["image_id"],
                        "on_conflict": "replace"}},
            '{"args":{"image_id":"img_abc123"},"queue":"thumbnails","type":"image.resize"}',
        ),
        # meta-based
        (
            {"type": "cache.warm", "args": {"resource": "products"},
             "meta": {"tenant_id": "acme", "trace_id": "t-1"},
             "unique": {"keys": ["type", "args", "meta"], "meta_keys": ["tenant_id"],
                        "on_conflict": "ignore"}},
            '{"args":{"resource":"products"},"meta":{"tenant_id":"acme"},"type":"cache.warm"}',
        ),
        # queue defaults to "default"
        (
            {"type": "t", "args": [], "unique": {"keys": ["queue"]}},
            '{"queue":"default","type":"t"}',
        ),
        # the HTTP form reads options.queue and options.unique
        (
            {"type": "t", "args": [1], "options": {"queue": "q1", "unique": {"keys": ["queue"]}}},
            '{"queue":"q1","type":"t"}',
        ),
        # an args array without args_keys is used whole
        (
            {"type": "t", "args": [{"b": 1, "a": 2}, "x"], "unique": {"keys": ["args"]}},
            '{"args":[{"a":2,"b":1},"x"],"type":"t"}',
        ),
        # with args_keys, the object an array holds is filtered, keeping the array shape
        (
            {"type": "t", "args": [{"user_id": 42, "locale": "en"}],
             "unique": {"keys": ["args"], "args_keys": ["user_id"]}},
            '{"args":[{"user_id":42}],"type":"t"}',
        ),
        # strings are NFC-normalised, keys and values alike
        (
            {"type": "cafe", "args": {"nam\u0065\u0301": "Zoe\u0308"},
             "unique": {"keys": ["args"]}},
            '{"args":{"nam\u00e9":"Zo\u00eb"},"type":"cafe"}',
        ),
        # args_keys match keys present in another normalisation form
        (
            {"type": "t", "args": {"nam\u0065\u0301": 1, "x": 2},
             "unique": {"keys": ["args"], "args_keys": ["nam\u00e9"]}},
            '{"args":{"nam\u00e9":1},"type":"t"}',
        ),
    ],
)  # fmt: skip
def test_canonical_forms(job: dict[str, Any], canonical: str) -> None:
    assert form(job) == canonical
    assert request(job).unique_key == sha(canonical)


def test_type_is_always_included() -> None:
    a = {"type": "a", "args": {"x": 1}, "unique": {"keys": ["args"]}}
    b = {**a, "type": "b"}
    assert request(a).unique_key != request(b).unique_key


def test_queue_dimension_separates_queues_and_its_absence_does_not() -> None:
    job = {"type": "t", "args": [], "queue": "q1", "unique": {"keys": ["type", "queue"]}}
    other = {**job, "queue": "q2"}
    assert request(job).unique_key != request(other).unique_key
    job["unique"] = other["unique"] = {"keys": ["type"]}
    assert request(job).unique_key == request(other).unique_key


@pytest.mark.parametrize(
    ("job", "message"),
    [
        (
            {"type": "t", "args": {"user_id": 1},
             "unique": {"keys": ["args"], "args_keys": ["id"]}},
            'unique.args_keys names "id", not present in args',
        ),
        (
            {"type": "t", "args": [], "unique": {"keys": ["args"], "args_keys": ["id"]}},
            "unique.args_keys needs args to be an object, or an array holding exactly one object",
        ),
        (
            {"type": "t", "args": [1], "unique": {"keys": ["args"], "args_keys": ["id"]}},
            "an array holding exactly one object",
        ),
        (
            {"type": "t", "args": [{"id": 1}, {"id": 2}],
             "unique": {"keys": ["args"], "args_keys": ["id"]}},
            "an array holding exactly one object",
        ),
        (
            {"type": "t", "args": [{"a": 1}], "unique": {"keys": ["args"], "args_keys": ["id"]}},
            'unique.args_keys names "id", not present in args[0]',
        ),
        (
            {"type": "t", "args": [], "meta": {"x": 1},
             "unique": {"keys": ["meta"], "meta_keys": ["tenant_id"]}},
            'unique.meta_keys names "tenant_id", not present in meta',
        ),
        (
            {"type": "t", "args": [], "unique": {"keys": ["meta"], "meta_keys": ["tenant_id"]}},
            'meta must be an object holding "tenant_id"',
        ),
        (
            {"type": "t", "args": {"n": 2**53}, "unique": {"keys": ["args"]}},
            "args.n: integers beyond ±(2^53−1) are not exact; send them as strings",
        ),
        (
            {"type": "t", "args": {"caf\u00e9": 1, "cafe\u0301": 2},
             "unique": {"keys": ["args"], "args_keys": ["caf\u00e9"]}},
            "equal after Unicode NFC normalisation, so unique.args_keys is ambiguous",
        ),
        (
            {"type": "t", "args": {"caf\u00e9": 1, "cafe\u0301": 2}, "unique": {"keys": ["args"]}},
            "equal after Unicode NFC normalisation",
        ),
        (
            {"type": "t", "args": [],
             "options": {"unique": {"keys": ["args"], "args_keys": ["a"]}}},
            "options.unique.args_keys needs args to be an object",
        ),
    ],
)  # fmt: skip
def test_jobs_the_policy_cannot_key(job: dict[str, Any], message: str) -> None:
    error = parse_request(job)
    assert isinstance(error, GatewayError)
    assert error.code == "invalid_request"
    assert message in error.message


def test_args_keys_of_an_unselected_dimension_are_refused() -> None:
    job = {"type": "t", "args": {}, "unique": {"keys": ["type"], "args_keys": ["missing"]}}
    refused = parse_request(job)
    assert not isinstance(refused, Request) and "does not contain" in refused.message


# --- properties -------------------------------------------------------------------------------

texts = st.one_of(
    st.text(max_size=5),
    st.sampled_from(["caf\u00e9", "cafe\u0301", "\u00c5", "A\u030a", "\ue000", "\U0001f600"]),
)
leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-MAX_SAFE_INTEGER, max_value=MAX_SAFE_INTEGER),
    st.floats(allow_nan=False, allow_infinity=False),
    texts,
)
values = st.recursive(
    leaves,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=12,
)
args_values = st.dictionaries(texts, values, max_size=5) | st.lists(values, max_size=3)
job_types = texts.filter(bool)  # a job has a type: an empty one has no key to compare


def reorder(value: Any) -> Any:
    """The same JSON with every object's keys in reverse insertion order."""
    if isinstance(value, dict):
        return {k: reorder(value[k]) for k in reversed(list(value))}
    if isinstance(value, list):
        return [reorder(v) for v in value]
    return value


def decompose(value: Any) -> Any:
    """The same JSON with every string, keys included, in NFD."""
    if isinstance(value, str):
        return unicodedata.normalize("NFD", value)
    if isinstance(value, dict):
        return {decompose(k): decompose(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decompose(v) for v in value]
    return value


def as_floats(value: Any) -> Any:
    """The same JSON with every integer written as a float (1 -> 1.0)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return float(value)
    if isinstance(value, dict):
        return {k: as_floats(v) for k, v in value.items()}
    if isinstance(value, list):
        return [as_floats(v) for v in value]
    return value


ALL_DIMENSIONS = policy(keys=["type", "queue", "args"])


def key_of(job_type: str, args: Any) -> str | None:
    """The key, or None when the job has none (messages may name fields in any order)."""
    key = fingerprint(ALL_DIMENSIONS, job_type, "q", args)
    return key if isinstance(key, str) else None


def nfc_merges_keys(value: Any) -> bool:
    if isinstance(value, dict):
        names = {unicodedata.normalize("NFC", k) for k in value}
        return len(names) != len(value) or any(nfc_merges_keys(v) for v in value.values())
    if isinstance(value, list):
        return any(nfc_merges_keys(v) for v in value)
    return False


@settings(max_examples=200)
@given(job_types, args_values)
def test_key_is_invariant_under_key_order(job_type: str, args: Any) -> None:
    assume(not nfc_merges_keys(args))  # such args are refused: no key to compare
    key = key_of(job_type, args)
    assert key is not None and key_of(job_type, reorder(args)) == key


@settings(max_examples=200)
@given(job_types, args_values)
def test_key_is_invariant_under_nfc_nfd(job_type: str, args: Any) -> None:
    assume(not nfc_merges_keys(args))
    key = key_of(job_type, args)
    assert key is not None and key_of(decompose(job_type), decompose(args)) == key


@settings(max_examples=200)
@given(st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1), args_values)
def test_key_is_invariant_under_1_versus_1_0(n: int, args: Any) -> None:
    assert key_of("t", [n, args]) == key_of("t", [float(n), as_floats(args)])


@settings(max_examples=300)
@given(texts, args_values)
def test_fast_key_equals_rfc8785_then_sha256(job_type: str, args: Any) -> None:
    fast = fingerprint(ALL_DIMENSIONS, job_type, "q", args)
    assert fast == fingerprint_reference(ALL_DIMENSIONS, job_type, "q", args)
    if isinstance(fast, str):
        obj = {"args": args, "queue": "q", "type": job_type}
        nfc = decompose_then_compose(obj)
        assert fast == hashlib.sha256(rfc8785.dumps(nfc)).hexdigest()
        assert len(fast) == 64 and fast == fast.lower()


def decompose_then_compose(value: Any) -> Any:
    if isinstance(value, str):
        return unicodedata.normalize("NFC", value)
    if isinstance(value, dict):
        return {decompose_then_compose(k): decompose_then_compose(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decompose_then_compose(v) for v in value]
    return value
