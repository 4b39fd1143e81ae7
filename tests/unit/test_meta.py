"""OJS security §8.3 (SEC-011): meta keys, newlines in values and meta's size, checked where a
job is sent (the SDK's prepare, so the HTTP binding; a cron's template), never by the processor."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.core import GatewayError
from gateway.core.meta import MAX_META_BYTES, meta_problem
from gateway.http.errors import ApiError
from gateway.sdk.prepare import prepare
from tests.http_requests import Untouchable, call, request, route
from tests.unit.test_http_job_types import binding

KEYS = st.from_regex(r"[A-Za-z0-9_.-]{1,128}", fullmatch=True)
LINES = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\r\n"))
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | LINES,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
    max_leaves=10,
)


@given(st.dictionaries(KEYS, VALUES, max_size=5))
def test_meta_of_good_keys_and_values_without_newlines_is_let_through(meta: dict[str, Any]):
    assert meta_problem(meta) is None


@pytest.mark.parametrize(
    ("meta", "named"),
    [
        ({"bad key": 1}, "'bad key' is not valid"),
        ({"": 1}, "'' is not valid"),
        ({"k" * 129: 1}, "is not valid"),
        ({"X-Header\r\nInjected": 1}, "is not valid"),
        ({"trace": "a\nb"}, "meta.trace holds a newline"),
        ({"deep": {"list": ["ok", "c\rd"]}}, "meta.deep holds a newline"),
        ({"deep": {"key\n": 1}}, "meta.deep holds a newline"),
        ({"big": "x" * MAX_META_BYTES}, "over 64 KiB"),
    ],
)  # fmt: skip
def test_bad_meta_is_refused_naming_what(meta: dict[str, Any], named: str):
    problem = meta_problem(meta)
    assert problem is not None and named in problem
    refused = prepare({"type": "a.b", "args": [], "meta": meta})
    assert isinstance(refused, GatewayError) and refused.code == "invalid_request"
    assert named in refused.message


def test_a_cron_whose_template_has_bad_meta_is_400_and_nothing_is_sent():
    template = {"type": "report.build", "meta": {"to\r\nX-Evil": "1"}}
    body = {"name": "nightly", "expression": "0 3 * * *", "job_template": template}
    answer = call(route("POST", "/ojs/v1/cron"), request(body), binding(Untouchable(), None))
    assert isinstance(answer, ApiError) and (answer.status, answer.code) == (400, "invalid_request")
    assert "job_template.meta key" in answer.message
