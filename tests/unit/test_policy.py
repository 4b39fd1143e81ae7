"""The UniquePolicy: defaults, canonical form, every validation rule."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.core import (
    DEFAULT_UNIQUE_STATES,
    INVALID_REQUEST,
    Dimension,
    GatewayError,
    OnConflict,
    State,
    UniquePolicy,
    parse_policy,
)
from gateway.core.limits import MAX_DURATION_MS
from gateway.core.periods import format_period


def ok(raw: Any, field: str = "unique") -> UniquePolicy:
    policy = parse_policy(raw, field)
    assert isinstance(policy, UniquePolicy), policy
    return policy


def test_defaults_follow_the_spec_table() -> None:
    policy = ok({})
    assert policy.keys == (Dimension.TYPE,)
    assert policy.args_keys is None
    assert policy.meta_keys is None
    assert policy.period_ms is None
    assert policy.states == DEFAULT_UNIQUE_STATES == {
        State.AVAILABLE, State.ACTIVE, State.SCHEDULED, State.RETRYABLE, State.PENDING,
    }  # fmt: skip
    assert policy.on_conflict is OnConflict.REJECT


def test_null_fields_take_their_defaults() -> None:
    nulls = {f: None for f in ("keys", "args_keys", "meta_keys", "period", "states")}
    assert ok({**nulls, "on_conflict": None}) == ok({})


def test_type_is_always_a_dimension() -> None:
    assert ok({"keys": ["args"]}).keys == (Dimension.TYPE, Dimension.ARGS)
    assert ok({"keys": []}).keys == (Dimension.TYPE,)


def test_behaviour_equal_policies_are_equal_values() -> None:
    a = ok({"keys": ["args", "queue", "type"], "args_keys": ["b", "a"], "period": "PT60M"})
    b = ok({"key": ["queue", "args"], "args_keys": ["a", "b"], "period": 3600})
    assert a == b
    assert a.keys == (Dimension.TYPE, Dimension.QUEUE, Dimension.ARGS)
    assert a.args_keys == ("a", "b")


def test_key_is_an_alias_of_keys() -> None:
    assert ok({"key": ["type", "args"]}).keys == (Dimension.TYPE, Dimension.ARGS)


def test_field_lists_without_their_dimension_are_refused() -> None:
    # The spec's own example structure sends meta_keys: [] without "meta" in keys;
    # an empty list selects nothing, so it is dropped.
    policy = ok({"keys": ["type", "queue", "args"], "args_keys": ["user_id"], "meta_keys": []})
    assert policy.meta_keys is None
    refused = parse_policy({"keys": ["type"], "args_keys": ["user_id"]})
    assert isinstance(refused, GatewayError) and refused.code == "invalid_request"
    assert 'does not contain "args"' in refused.message
    refused = parse_policy({"keys": ["type", "args"], "meta_keys": ["tenant_id"]})
    assert refused == GatewayError(
        "invalid_request",
        'unique.meta_keys is given but unique.keys does not contain "meta"; '
        'add "meta" to unique.keys, or drop unique.meta_keys',
    )


def test_args_keys_are_nfc_normalised() -> None:
    assert ok({"keys": ["args"], "args_keys": ["cafe\u0301"]}).args_keys == ("caf\u00e9",)


def test_the_spec_policy_example_is_valid() -> None:
    policy = ok(
        {
            "keys": ["type", "queue", "args"],
            "args_keys": ["user_id"],
            "meta_keys": [],
            "period": "PT1H",
            "states": ["available", "active", "scheduled", "retryable", "pending"],
            "on_conflict": "reject",
        }
    )
    assert policy.period_ms == 3_600_000


@pytest.mark.parametrize("on_conflict", ["reject", "replace", "replace_except_schedule", "ignore"])
def test_every_conflict_strategy_is_accepted(on_conflict: str) -> None:
    assert ok({"on_conflict": on_conflict}).on_conflict == OnConflict(on_conflict)


def test_every_state_may_be_listed() -> None:
    assert ok({"states": [s.value for s in State]}).states == set(State)


@pytest.mark.parametrize(
    ("period", "ms"),
    [
        ("PT5M", 300_000),
        ("PT1H", 3_600_000),
        ("P1D", 86_400_000),
        ("P7D", 604_800_000),
        ("P1W", 604_800_000),
        ("P1DT12H", 129_600_000),
        ("PT1.5S", 1_500),
        ("PT0.001S", 1),
        ("P0Y1D", 86_400_000),  # zero years is still a fixed length
        (1, 1_000),
        (3600, 3_600_000),
    ],
)
def test_periods(period: Any, ms: int) -> None:
    assert ok({"period": period}).period_ms == ms


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        # meta needs meta_keys
        (
            {"keys": ["type", "meta"]},
            'unique.meta_keys is required when unique.keys contains "meta"',
        ),
        ({"keys": ["meta"], "meta_keys": None}, "unique.meta_keys is required"),
        ({"keys": ["meta"], "meta_keys": []}, "unique.meta_keys must not be empty"),
        ({"key": ["meta"]}, 'unique.meta_keys is required when unique.key contains "meta"'),
        # args_keys present but empty: ambiguous between "nothing" and "everything"
        ({"keys": ["args"], "args_keys": []}, "unique.args_keys must not be empty; omit it"),
        # unknown values
        ({"keys": ["type", "worker"]}, 'unique.keys contains unknown dimension "worker"'),
        ({"states": ["available", "running"]}, 'unique.states contains unknown state "running"'),
        ({"on_conflict": "merge"}, "unique.on_conflict must be one of"),
        ({"on_conflict": "REJECT"}, "unique.on_conflict must be one of"),
        # period
        ({"period": "one hour"}, 'unique.period "one hour" is not an ISO 8601 duration'),
        ({"period": "pt1h"}, "is not an ISO 8601 duration"),
        ({"period": ""}, "is not an ISO 8601 duration"),
        ({"period": "PT0S"}, "must be a positive duration"),
        ({"period": "PT"}, "must be a positive duration"),
        ({"period": "-PT1H"}, "must be a positive duration"),
        ({"period": 0}, "unique.period must be positive"),
        ({"period": -5}, "unique.period must be positive"),
        ({"period": "P1M"}, "uses years or months, which have no fixed length"),
        ({"period": "P1Y"}, "uses years or months"),
        ({"period": "PT0.0001S"}, "must be a whole number of milliseconds"),
        ({"period": True}, "unique.period must be a string or an integer"),
        ({"period": 1.5}, "unique.period must be a string or an integer"),
        ({"period": 10**20}, "unique.period is longer than"),
        ({"period": "P9999999999D"}, "is not an ISO 8601 duration"),
        # wrong types
        ("reject", "unique must be an object"),
        (["type"], "unique must be an object"),
        ({"keys": "type"}, "unique.keys must be an array of strings"),
        ({"keys": [1]}, "unique.keys must be an array of strings"),
        ({"args_keys": "user_id"}, "unique.args_keys must be an array of strings"),
        ({"keys": ["meta"], "meta_keys": [None]}, "unique.meta_keys must be an array of strings"),
        ({"states": "available"}, "unique.states must be an array of strings"),
        ({"on_conflict": 1}, "unique.on_conflict must be one of"),
        ({"on_conflict": ["reject"]}, "unique.on_conflict must be one of"),
        # duplicates
        ({"keys": ["type", "type"]}, 'unique.keys lists "type" twice'),
        ({"keys": ["args"], "args_keys": ["a", "a"]}, 'unique.args_keys lists "a" twice'),
        ({"keys": ["meta"], "meta_keys": ["t", "t"]}, 'unique.meta_keys lists "t" twice'),
        ({"states": ["active", "active"]}, 'unique.states lists "active" twice'),
        (
            {"keys": ["args"], "args_keys": ["caf\u00e9", "cafe\u0301"]},
            "equal after Unicode NFC normalisation",
        ),
        # empty states would make uniqueness a no-op
        ({"states": []}, "unique.states must not be empty"),
        # unknown fields and the alias
        ({"keys": ["type"], "ttl": 5}, "unique.ttl is not a unique policy field"),
        ({"keys": ["type"], "key": ["type"]}, "give either unique.keys or its alias unique.key"),
    ],
)
def test_invalid_policies(raw: Any, message: str) -> None:
    error = parse_policy(raw)
    assert isinstance(error, GatewayError)
    assert error.code == INVALID_REQUEST
    assert message in error.message
    assert str(error) == f"invalid_request: {error.message}"


def test_an_unknown_field_is_refused_naming_every_field_a_policy_takes() -> None:
    error = parse_policy({"keys": ["type"], "ttl": 5})
    assert isinstance(error, GatewayError)
    named = error.message.split("allowed fields are ")[1].split(", ")
    assert set(named) >= {"keys", "period", "debounce", "keep_last_if_active", "concurrency"}
    for name in named:  # each one named is taken: refused, if at all, for its value
        taken = parse_policy({"keys": ["type"], name: None})
        assert not isinstance(taken, GatewayError) or "policy field" not in taken.message


def test_messages_name_the_field_where_the_policy_was_found() -> None:
    error = parse_policy({"keys": ["meta"]}, "options.unique")
    assert isinstance(error, GatewayError)
    assert error.message == (
        'options.unique.meta_keys is required when options.unique.keys contains "meta"'
    )


def test_to_dict_is_the_policy_as_applied() -> None:
    policy = ok({"keys": ["args", "meta"], "meta_keys": ["tenant_id"], "period": 90})
    assert policy.to_dict() == {
        "keys": ["type", "args", "meta"],
        "args_keys": None,
        "meta_keys": ["tenant_id"],
        "period": "PT1M30S",
        "period_ms": 90_000,
        "states": ["scheduled", "available", "pending", "active", "retryable"],
        "on_conflict": "reject",
    }


def test_from_dict_checks_period_ms_agrees() -> None:
    raw = ok({"period": "PT1H"}).to_dict()
    raw["period_ms"] = 1
    error = UniquePolicy.from_dict(raw)
    assert isinstance(error, GatewayError)
    assert "period_ms" in error.message


policies = st.fixed_dictionaries(
    {
        "keys": st.lists(st.sampled_from(["type", "queue", "args", "meta"]), unique=True),
        "args_keys": st.none() | st.lists(st.text(min_size=1, max_size=5), min_size=1, unique=True),
        "meta_keys": st.lists(st.text(min_size=1, max_size=5), min_size=1, unique=True),
        "period": st.none()
        | st.integers(min_value=1, max_value=10**9)
        | st.integers(min_value=1, max_value=10**12).map(format_period),
        "states": st.lists(st.sampled_from([s.value for s in State]), min_size=1, unique=True),
        "on_conflict": st.sampled_from([c.value for c in OnConflict if c is not OnConflict.UPDATE]),
    }
)


@given(policies)
def test_canonical_dict_parses_back_identically(raw: dict[str, Any]) -> None:
    if "args" not in raw["keys"]:
        raw = {**raw, "args_keys": None}  # refused without args, as tested above
    if "meta" not in raw["keys"]:
        raw = {**raw, "meta_keys": None}  # likewise without meta
    policy = parse_policy(raw)
    if isinstance(policy, GatewayError):  # NFC-colliding generated names
        assert "NFC" in policy.message
        return
    as_dict = policy.to_dict()
    assert UniquePolicy.from_dict(as_dict) == policy
    assert parse_policy({k: v for k, v in as_dict.items() if k != "period_ms"}) == policy


@given(st.integers(min_value=1, max_value=MAX_DURATION_MS))
def test_period_format_round_trips(ms: int) -> None:
    assert ok({"period": format_period(ms)}).period_ms == ms
