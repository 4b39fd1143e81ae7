"""Keys are exact to RFC 8785 for every JSON number.

A number with a fraction or an exponent is a double whatever its size, and the key
holds it as JCS writes it (1e21 as 1e+21); an integer literal beyond ±(2^53−1) is
refused wherever JSON enters, since a parser rounds it and distinct ones would share
a key. orjson reads integer literals beyond 64 bits as floats, so the text decides.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import struct
from typing import Any

import orjson
import pytest
import rfc8785
from hypothesis import example, given, settings
from hypothesis import strategies as st
from starlette.requests import Request as HttpRequest

from gateway.cli.enqueue import _loads
from gateway.core import (
    INVALID_EVENT,
    INVALID_REQUEST,
    GatewayError,
    JobEvent,
    Request,
    RetryPolicy,
    canonical_form,
    fingerprint,
    parse_event_json,
    parse_policy,
    parse_request,
    parse_request_json,
)
from gateway.core.canonical import canonical_json
from gateway.core.errors import Invalid
from gateway.core.limits import (
    MAX_DURATION_MS,
    MAX_SAFE_INTEGER,
    json_problem,
    rounded_integer_problem,
)
from gateway.core.policy import UniquePolicy
from gateway.http.errors import ApiError
from gateway.http.plumbing import read_json

REFUSAL = "integers beyond ±(2^53−1) are not exact; send them as strings"
UNIQUE = b',"unique":{"keys":["type","args"]}}'
JOB_ID = "019078a3-b5c7-7def-8a12-3456789abcde"


def job_text(args: bytes) -> bytes:
    return b'{"type":"t","args":' + args + UNIQUE


def event_text(result: bytes) -> bytes:
    return b'{"job_id":"' + JOB_ID.encode() + b'","type":"job.completed","result":' + result + b"}"


def key_of_jcs(jcs: bytes) -> str:
    return hashlib.sha256(jcs).hexdigest()


def accepted(data: bytes) -> Request:
    request = parse_request_json(data)
    assert isinstance(request, Request), request
    return request


def refused(result: object, code: str, *words: str) -> None:
    assert isinstance(result, GatewayError), result
    assert result.code == code, result
    for word in words:
        assert word in result.message, result


def problem_of(text: bytes | str) -> str | None:
    """The number rule on a parsed text, as the core applies it (limits.py)."""
    value = orjson.loads(text)
    return json_problem(value) or rounded_integer_problem(value, text)


# -- RFC 8785's own examples ----------------------------------------------------------

# Appendix B: IEEE 754 bit patterns and the JCS text of each (NaN and Infinity have none).
APPENDIX_B = [
    ("0000000000000000", "0"),
    ("8000000000000000", "0"),  # minus zero
    ("0000000000000001", "5e-324"),
    ("8000000000000001", "-5e-324"),
    ("7fefffffffffffff", "1.7976931348623157e+308"),
    ("ffefffffffffffff", "-1.7976931348623157e+308"),
    ("4340000000000000", "9007199254740992"),
    ("c340000000000000", "-9007199254740992"),
    ("4430000000000000", "295147905179352830000"),
    ("44b52d02c7e14af5", "9.999999999999997e+22"),
    ("44b52d02c7e14af6", "1e+23"),
    ("44b52d02c7e14af7", "1.0000000000000001e+23"),
    ("444b1ae4d6e2ef4e", "999999999999999700000"),
    ("444b1ae4d6e2ef4f", "999999999999999900000"),
    ("444b1ae4d6e2ef50", "1e+21"),
    ("3eb0c6f7a0b5ed8c", "9.999999999999997e-7"),
    ("3eb0c6f7a0b5ed8d", "0.000001"),
    ("41b3de4355555553", "333333333.3333332"),
    ("41b3de4355555554", "333333333.33333325"),
    ("41b3de4355555555", "333333333.3333333"),
    ("41b3de4355555556", "333333333.3333334"),
    ("41b3de4355555557", "333333333.33333343"),
    ("becbf647612f3696", "-0.0000033333333333333333"),
    ("43143ff3c1cb0959", "1424953923781206.2"),  # round to even
]


@pytest.mark.parametrize(("bits", "jcs"), APPENDIX_B)
def test_rfc8785_appendix_b_numbers(bits: str, jcs: str) -> None:
    value = struct.unpack(">d", bytes.fromhex(bits))[0]
    assert canonical_json(value) == jcs.encode() == rfc8785.dumps(value)
    # In a job, written as JSON text the way orjson writes the double.
    request = accepted(job_text(b"[" + orjson.dumps(value) + b"]"))
    assert request.unique_key == key_of_jcs(b'{"args":[' + jcs.encode() + b'],"type":"t"}')


# Number literals as a JSON text may hold them, and the JCS text of each: section 3.2.2.3
# and the example of section 3.2.4, then some more at the edges.
LITERALS = [
    (b"333333333.33333329", b"333333333.3333333"),
    (b"1E30", b"1e+30"),
    (b"1e30", b"1e+30"),
    (b"4.50", b"4.5"),
    (b"2e-3", b"0.002"),
    (b"0.000000000000000000000000001", b"1e-27"),
    (b"1e21", b"1e+21"),
    (b"1e+21", b"1e+21"),
    (b"1e+0000000000000000021", b"1e+21"),  # a long exponent is no integer literal
    (b"-0.0", b"0"),
    (b"-0", b"0"),
    (b"5e-324", b"5e-324"),
    (b"1.7976931348623157e308", b"1.7976931348623157e+308"),
    (b"-1.7976931348623157e308", b"-1.7976931348623157e+308"),
    (b"1.5e300", b"1.5e+300"),
    (b"4e15", b"4000000000000000"),
    (b"1e16", b"10000000000000000"),
    (b"1e20", b"100000000000000000000"),
    (b"1e-6", b"0.000001"),
    (b"1e-7", b"1e-7"),
    (b"9007199254740991", b"9007199254740991"),
    (b"-9007199254740991", b"-9007199254740991"),
    (b"9007199254740992.0", b"9007199254740992"),  # a fraction: a double, exact
    (b"18446744073709551616.0", b"18446744073709552000"),
    (b"-12345678901234567890123e0", b"-1.2345678901234568e+22"),
    (b"0.12345678901234567890123", b"0.12345678901234568"),
]


@pytest.mark.parametrize(("literal", "jcs"), LITERALS)
def test_number_literals_give_the_keys_jcs_defines(literal: bytes, jcs: bytes) -> None:
    assert problem_of(literal) is None
    assert canonical_json(orjson.loads(literal)) == jcs
    request = accepted(job_text(b'{"n":' + literal + b"}"))
    assert request.unique_key == key_of_jcs(b'{"args":{"n":' + jcs + b'},"type":"t"}')
    assert isinstance(parse_event_json(event_text(literal)), JobEvent)


def test_the_rfc8785_section_3_2_4_example_is_keyed_by_its_canonical_text() -> None:
    args = (
        b'{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],'
        b' "string": "\\u20ac$\\u000F\\u000aA\'\\u0042\\u0022\\u005c\\\\\\"\\/",'
        b' "literals": [null, true, false]}'
    )
    expected = (
        b'{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
        b'"string":"\xe2\x82\xac$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'
    )
    assert canonical_json(orjson.loads(args)) == expected
    request = accepted(job_text(args))
    assert request.unique_key == key_of_jcs(b'{"args":' + expected + b',"type":"t"}')


def test_a_job_with_a_huge_double_is_accepted_and_keyed_by_its_jcs_text() -> None:
    data = b'{"type":"t","args":{"big":1e21},"unique":{"keys":["type","args"]}}'
    request = accepted(data)
    assert request.unique_key == key_of_jcs(b'{"args":{"big":1e+21},"type":"t"}')
    assert request.policy is not None
    env = request.envelope
    form = canonical_form(request.policy, env.type, env.queue, env.args, env.meta)
    assert form == b'{"args":{"big":1e+21},"type":"t"}'
    # The same job as a Python value, and as the SDK serialises it.
    parsed = parse_request(orjson.loads(data))
    assert isinstance(parsed, Request) and parsed.unique_key == request.unique_key
    assert accepted(orjson.dumps(orjson.loads(data))).unique_key == request.unique_key


# -- integer literals beyond ±(2^53−1) --------------------------------------------------

BEYOND = [
    b"9007199254740992",
    b"-9007199254740992",
    b"18446744073709551615",  # 2**64 - 1: orjson's largest int
    b"18446744073709551616",  # 2**64: orjson reads it as a float
    b"-9223372036854775809",  # below -2**63: a float too
    b"1000000000000000000000",  # 10**21, the integer 1e21 is: refused, 1e21 is not
    b"1000000000000000000001",
    b"1" + b"0" * 308,
]


@pytest.mark.parametrize("literal", BEYOND)
def test_integer_literals_beyond_the_range_are_refused_everywhere(literal: bytes) -> None:
    assert problem_of(b'{"n":' + literal + b"}") == "n: " + REFUSAL
    refused(parse_request_json(job_text(b'{"n":' + literal + b"}")), INVALID_REQUEST,
            "args.n: " + REFUSAL)  # fmt: skip
    refused(parse_request_json(job_text(b"[0,[" + literal + b"]]")), INVALID_REQUEST,
            "args[1][0]: " + REFUSAL)  # fmt: skip
    refused(parse_event_json(event_text(b"[" + literal + b"]")), INVALID_EVENT,
            "result[0]: " + REFUSAL)  # fmt: skip


def test_an_integer_literal_too_large_for_a_double_is_not_json_to_the_parser() -> None:
    refused(parse_request_json(job_text(b"[1" + b"0" * 400 + b"]")), INVALID_REQUEST, "not valid")


def test_distinct_integer_literals_never_share_a_key() -> None:
    for a, b in [(b"18446744073709551616", b"18446744073709551617"),
                 (b"1000000000000000000000", b"1000000000000000000001")]:  # fmt: skip
        for literal in (a, b):
            refused(parse_request_json(job_text(b"[" + literal + b"]")), INVALID_REQUEST, REFUSAL)


def test_long_digit_runs_that_are_not_integer_literals_are_taken() -> None:
    for args in (
        b'{"s":"18446744073709551616"}',
        b'{"s":"\\"18446744073709551616\\\\"}',
        b'{"18446744073709551616":1}',
        b'{"f":18446744073709551616.5,"e":1e0000000000000000021,"g":1E-0000000000000000005}',
        b'["\\\\", 1e21, "x\\"1000000000000000000001"]',
    ):
        assert problem_of(args) is None, args
        accepted(job_text(args))


def test_a_double_equal_to_a_refused_literal_is_named_only_with_it() -> None:
    text = b'{"a":1e21,"b":[1000000000000000000000]}'
    assert problem_of(text) == "a: " + REFUSAL  # the first float of that value is named
    assert problem_of(b'{"a":1e21,"b":[1e21]}') is None


def test_rounded_integer_problem_reads_str_and_bytes_and_names_the_root() -> None:
    for text in ('{"x":[18446744073709551616]}', b'{"x":[18446744073709551616]}'):
        value = orjson.loads(text)
        assert json_problem(value) is None  # a float, as far as the value can tell
        assert rounded_integer_problem(value, text, "args") == "args.x[0]: " + REFUSAL
    assert rounded_integer_problem(1e20, "100000000000000000000", "n") == "n: " + REFUSAL
    assert rounded_integer_problem(1e20, "1e20", "n") is None
    assert rounded_integer_problem({"a": 1.5}, bytearray(b'{"a":1.5}')) is None


def test_python_values_follow_the_same_rule() -> None:
    assert json_problem({"a": [1e21, -1.7976931348623157e308, 5e-324, -0.0]}) is None
    assert json_problem({"a": [0, {"b": 2**53}]}) == "a[1].b: " + REFUSAL
    assert json_problem(-(2**70), "result") == "result: " + REFUSAL
    assert json_problem({"a": [float("inf")]}) == "a[0] is inf, which is not a JSON number"
    with pytest.raises(Invalid, match="outside the JSON safe integer range"):
        canonical_json({"n": 2**53}, "args")


# -- the entries that parse JSON text ---------------------------------------------------


def body(data: bytes) -> Any:
    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": data, "more_body": False}

    scope = {"type": "http", "method": "POST", "headers": [(b"content-type", b"application/json")]}
    try:
        return asyncio.run(read_json(HttpRequest(scope, receive), 1 << 20))
    except ApiError as refused:
        return refused


def test_an_http_body_with_a_long_integer_is_refused_before_it_is_re_serialised() -> None:
    answer = body(job_text(b'{"n":18446744073709551616}'))
    assert isinstance(answer, ApiError) and answer.status == 400
    assert "args.n: " + REFUSAL in answer.message
    assert body(job_text(b'{"n":1e21}'))["args"] == {"n": 1e21}


def test_the_cli_refuses_a_long_integer_in_its_arguments() -> None:
    refused(_loads("[18446744073709551616]", "--args", "args"), INVALID_REQUEST,
            "args[0]: " + REFUSAL)  # fmt: skip
    assert _loads("[1e21]", "--args", "args") == [1e21]


def test_a_huge_faktory_unique_for_is_refused_not_raised() -> None:
    for seconds in (b"1e21", b"1.7976931348623157e308", b"18446744073709551616.0"):
        data = b'{"dialect":"faktory","jobtype":"J","args":[],"custom":{"unique_for":'
        refused(parse_request_json(data + seconds + b"}}"), INVALID_REQUEST, "unique_for")


# -- properties ---------------------------------------------------------------------------

finite_floats = st.floats(allow_nan=False, allow_infinity=False)


@settings(max_examples=500)
@given(finite_floats)
@example(1e21)
@example(4e15)
@example(-0.0)
@example(5e-324)
@example(1.7976931348623157e308)
def test_every_double_is_written_as_rfc8785_writes_it(value: float) -> None:
    jcs = rfc8785.dumps(value)
    assert canonical_json(value) == jcs
    assert canonical_json({"a": [value]}) == b'{"a":[' + jcs + b"]}"
    expected = key_of_jcs(b'{"args":[' + jcs + b'],"type":"t"}')
    # However the double is written, as long as it has a fraction or an exponent.
    texts = {orjson.dumps(value), repr(value).encode(), f"{value:.17e}".encode()}
    if value.is_integer():
        texts.add(f"{int(value)}.0".encode())
    for text in texts:
        assert accepted(job_text(b"[" + text + b"]")).unique_key == expected, text
    assert isinstance(parse_event_json(event_text(b"[" + orjson.dumps(value) + b"]")), JobEvent)


beyond = st.integers(min_value=MAX_SAFE_INTEGER + 1, max_value=10**300).flatmap(
    lambda n: st.sampled_from([n, -n])
) | st.sampled_from([2**53, 2**63 - 1, 2**63, 2**64 - 1, 2**64, 2**64 + 1, -(2**63) - 1])


@settings(max_examples=300)
@given(beyond)
def test_every_integer_beyond_the_range_is_refused_with_the_message(n: int) -> None:
    literal = str(n).encode()
    assert json_problem({"n": n}) == "n: " + REFUSAL
    assert problem_of(b'{"n":' + literal + b"}") == "n: " + REFUSAL
    with pytest.raises(Invalid, match="outside the JSON safe integer range"):
        canonical_json(n)
    refused(parse_request_json(job_text(b"[" + literal + b"]")), INVALID_REQUEST,
            "args[0]: " + REFUSAL)  # fmt: skip
    refused(parse_event_json(event_text(b"[" + literal + b"]")), INVALID_EVENT, REFUSAL)


@settings(max_examples=300)
@given(st.integers(min_value=-MAX_SAFE_INTEGER, max_value=MAX_SAFE_INTEGER))
def test_every_integer_within_the_range_is_keyed_as_itself(n: int) -> None:
    request = accepted(job_text(b"[" + str(n).encode() + b"]"))
    assert request.unique_key == key_of_jcs(b'{"args":[' + str(n).encode() + b'],"type":"t"}')


digits = st.text("0123456789", min_size=1, max_size=30)
literals = st.builds(
    lambda sign, whole, fraction, exponent: sign + whole + fraction + exponent,
    st.sampled_from(["", "-"]),
    st.just("0")
    | st.builds(
        lambda d, rest: d + rest, st.sampled_from("123456789"), st.text("0123456789", max_size=29)
    ),  # fmt: skip
    st.just("") | digits.map(lambda d: "." + d),
    st.just("")
    | st.builds(
        lambda e, s, d: e + s + d,
        st.sampled_from("eE"),
        st.sampled_from(["", "+", "-"]),
        st.text("0123456789", min_size=1, max_size=4),
    ),  # fmt: skip
)


@settings(max_examples=1000)
@given(literals)
@example("1e21")
@example("1000000000000000000000")
@example("-9223372036854775809")
@example("18446744073709551616")
def test_every_number_literal_is_keyed_exactly_or_refused_as_a_rounded_integer(
    literal: str,
) -> None:
    text = literal.encode()
    request = parse_request_json(job_text(b"[" + text + b"]"))
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:  # beyond the largest double: not JSON to the parser
        refused(request, INVALID_REQUEST, "not valid JSON")
        return
    is_integer_literal = "." not in literal and "e" not in literal.lower()
    if is_integer_literal and abs(int(literal)) > MAX_SAFE_INTEGER:
        refused(request, INVALID_REQUEST, "args[0]: " + REFUSAL)
        return
    exact = int(literal) if is_integer_literal else float(literal)
    assert value == exact
    jcs = rfc8785.dumps(exact)
    assert isinstance(request, Request), request
    assert request.unique_key == key_of_jcs(b'{"args":[' + jcs + b'],"type":"t"}')


tricky_text = st.text(st.sampled_from(list('0123456789"\\/.-+eE :,[]{}\n\u00e9\U0001f600')))
documents = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**40), max_value=10**40)
    | st.sampled_from([2**53, 2**63, 2**64 - 1, 2**64, -(2**63) - 1, 10**21])
    | finite_floats
    | tricky_text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(tricky_text, inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=500)
@given(documents, st.booleans(), st.booleans())
def test_the_text_is_refused_exactly_when_it_holds_an_integer_literal_beyond_the_range(
    document: Any, ensure_ascii: bool, as_str: bool
) -> None:
    # The standard library writes integers exactly and reads them back as ints: the oracle.
    text = json.dumps(document, ensure_ascii=ensure_ascii)
    beyond_range: list[int] = []

    def read_int(literal: str) -> int:
        if abs(int(literal)) > MAX_SAFE_INTEGER:
            beyond_range.append(int(literal))
        return int(literal)

    json.loads(text, parse_int=read_int)
    data: str | bytes = text if as_str else text.encode()
    assert (problem_of(data) is not None) == bool(beyond_range), text


@settings(max_examples=300)
@given(
    st.floats(min_value=1, allow_infinity=False),
    st.sampled_from(["exponential", "polynomial", "linear", "none"]),
    st.integers(min_value=0, max_value=MAX_DURATION_MS),
    st.integers(min_value=1, max_value=10_000),
)
def test_any_backoff_coefficient_gives_a_bounded_delay(
    coefficient: float, backoff: str, initial: int, attempt: int
) -> None:
    retry = {"backoff_coefficient": coefficient, "backoff": backoff, "initial_interval_ms": initial}
    request = parse_request({"type": "t", "args": [], "retry": retry})
    assert isinstance(request, Request), request
    policy = RetryPolicy.from_dict(request.envelope.retry.to_dict())
    assert 0 <= policy.delay_ms(attempt, JOB_ID) <= 1.5 * MAX_DURATION_MS


@settings(max_examples=200)
@given(finite_floats | st.integers(min_value=-(2**70), max_value=2**70))
def test_a_faktory_unique_for_of_any_number_is_decided_or_refused(seconds: float) -> None:
    data = b'{"dialect":"faktory","jobtype":"J","args":[],"custom":{"unique_for":'
    result = parse_request_json(data + str(seconds).encode() + b"}}")
    assert isinstance(result, Request | GatewayError)


# -- determinism: keys of what was accepted before are unchanged ---------------------

# Keys computed before the rule changed (at 7c9e4af): every input accepted then is keyed
# exactly as then.
GOLDEN = [
    (b'{"type":"email.send","queue":"notifications","args":{"user_id":42,"template":"welcome"},'
     b'"unique":{"keys":["type","queue","args"],"args_keys":["user_id"]}}',
     "71f9344b82e66297a49775bbe27752297922842b675330641ebe3ff4fea46c1f"),
    (b'{"type":"t","args":[1,1.0,-0.0,0.5,-1.5,1e-7,1e-6,0.000123,123.456,1e15,-4e15],'
     b'"unique":{"keys":["type","args"]}}',
     "aafcb1e997982e01e6ba1b5fec19fb844ea665551fe07a821e08643a81bbab16"),
    (b'{"type":"t","args":{"max":9007199254740991,"min":-9007199254740991,'
     b'"maxf":9007199254740991.0,"tiny":5e-324,"third":0.3333333333333333},'
     b'"unique":{"keys":["type","args"]}}',
     "8b1a8a23c960f901fd3aea743d1a28706b2e33d99bd080f6b7259790ab73bc06"),
    (b'{"type":"t","args":{"n":[333333333.33333329,4.50,2e-3,1E2,0.1,0.2,0.30000000000000004]},'
     b'"unique":{"keys":["args"]}}',
     "d28d1442e0be185c1a6200339d6c07b685621c4abda4487a35fe74e7c7e275f9"),
    (b'{"type":"t","args":{"cafe\\u0301":"\\u212b","z":[null,true,false,"\\u20ac$\\u000f"]},'
     b'"meta":{"tenant":7.25},"unique":{"keys":["type","args","meta"],"meta_keys":["tenant"]}}',
     "fca40de5b3540acb21c8f27c203aae9091fba91492a015a65759afb15c638ed9"),
    (b'{"type":"t","queue":"q","args":[{"id":-12345678901234.5,"k":"v"}],'
     b'"unique":{"keys":["type","queue","args"],"args_keys":["id"]}}',
     "fb9722adbd733617d8ae3f6974e461cfca3ccfa8ba7adbc721e7789a7f4a2366"),
]  # fmt: skip


@pytest.mark.parametrize(("data", "key"), GOLDEN)
def test_keys_accepted_before_are_unchanged(data: bytes, key: str) -> None:
    assert accepted(data).unique_key == key


def every_dimension() -> UniquePolicy:
    parsed = parse_policy({"keys": ["type", "queue", "args"]})
    assert isinstance(parsed, UniquePolicy), parsed
    return parsed


ALL = every_dimension()
ascii_text = st.text(st.characters(max_codepoint=0x7F), max_size=4)  # its own NFC
safe_leaves = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-MAX_SAFE_INTEGER, max_value=MAX_SAFE_INTEGER)
    | st.floats(min_value=-MAX_SAFE_INTEGER, max_value=MAX_SAFE_INTEGER)
    | ascii_text
)
safe_values = st.recursive(
    safe_leaves,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(ascii_text, inner),
    max_leaves=10,
)


@settings(max_examples=300)
@given(safe_values)
def test_what_was_accepted_before_is_accepted_and_keyed_by_rfc8785(args: Any) -> None:
    # Before, exactly these numbers were taken (within ±(2^53−1)) and keyed by rfc8785.
    data = orjson.dumps({"type": "t", "args": [args], "unique": {"keys": ["type", "args"]}})
    assert accepted(data).unique_key == key_of_jcs(rfc8785.dumps({"args": [args], "type": "t"}))
    everything = {"args": [args], "queue": "default", "type": "t"}
    assert fingerprint(ALL, "t", "default", [args]) == key_of_jcs(rfc8785.dumps(everything))
