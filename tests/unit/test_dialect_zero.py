"""A number field's "none" is absent, null or the whole number 0, in every dialect that has one.

JSON's 0.0 and false equal 0 in Python; taking them as "none" enqueued a job a dialect's own
client could never have sent. They are refused as the wrong type, as true, 1.0 and 60.0 are.
"""

from __future__ import annotations

from typing import Any

import pytest

from gateway.core import parse_request
from gateway.core.errors import GatewayError
from tests.unit.test_dialect_bullmq import add
from tests.unit.test_dialect_river import insert
from tests.unit.test_dialect_sidekiq import job

# (a request carrying the value, the field its refusal names)
FIELDS = [
    (lambda v: add({"id": "d", "ttl": v}), "opts.deduplication.ttl"),
    (lambda v: job(lock_ttl=v), "lock_ttl"),
    (lambda v: job(lock_expiration=v), "lock_expiration"),
    (lambda v: job(lock_timeout=v), "lock_timeout"),
    (lambda v: insert({"by_args": True, "by_period": v}), "unique_opts.by_period"),
]


@pytest.mark.parametrize(("request_of", "field"), FIELDS)
@pytest.mark.parametrize("value", [0.0, -0.0, False, True, 1.0, 60.0, "0", [], {}])
def test_zero_spelled_other_than_0_is_refused_naming_the_field(
    request_of: Any, field: str, value: Any
) -> None:
    error = parse_request(request_of(value))
    assert isinstance(error, GatewayError), (field, value, error)
    assert error.code == "invalid_request", error
    assert field in error.message


@pytest.mark.parametrize(("request_of", "field"), FIELDS)
def test_the_whole_number_0_and_null_mean_none(request_of: Any, field: str) -> None:
    for value in (0, None):
        request = request_of(value)
        if field == "lock_ttl" or field == "lock_expiration":
            request["lock"] = "until_executed"
        assert not isinstance(parse_request(request), GatewayError), (field, value)
