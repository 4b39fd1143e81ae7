"""Crons (gateway.core.crons): what a registration may say, the commands that carry it,
and how a cron's state fires its slots into jobs."""

from __future__ import annotations

from typing import Any
from zoneinfo import ZoneInfo

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core import Request
from gateway.core.cron_expr import next_after, parse_cron, parse_zone
from gateway.core.crons import (
    DEFAULT_OVERLAP,
    OVERLAP_POLICIES,
    CronCommand,
    command_record,
    definition,
    enabled,
    fire,
    firing_job,
    is_valid_name,
    next_run_ms,
    parse_cron_command,
    registered,
    shown,
)
from gateway.core.dialects import parse_request
from gateway.core.errors import INVALID_REQUEST, GatewayError
from gateway.core.limits import MAX_CRON_BYTES
from gateway.core.policy import OnConflict
from gateway.core.states import ALL_STATES, TERMINAL_STATES, State
from gateway.core.times import format_rfc3339, parse_rfc3339

T0 = 1_772_360_400_000  # 2026-03-01T10:20:00Z, a Sunday
HOUR_MS = 3_600_000
DAY_MS = 86_400_000


def ms(stamp: str) -> int:
    value = parse_rfc3339(stamp)
    assert value is not None, stamp
    return value


def raw_cron(**fields: Any) -> dict[str, Any]:
    return {"name": "nightly", "cron": "0 3 * * *", "type": "report.build", **fields}


def cron(**fields: Any) -> dict[str, Any]:
    made = definition(raw_cron(**fields))
    assert isinstance(made, dict), made
    return made


def refused(raw: object) -> GatewayError:
    made = definition(raw)
    assert isinstance(made, GatewayError), made
    assert made.code == INVALID_REQUEST and made.message
    return made


def request_of(job: dict[str, Any]) -> Request:
    request = parse_request(job)
    assert isinstance(request, Request), request
    return request


def fired(state: dict[str, Any], now: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The job a due cron's request carries, and the cron's state after."""
    result = fire(state, now)
    assert result is not None and result[0] is not None
    return dict(result[0].envelope.raw), result[1]


# -- definition -------------------------------------------------------------------


def test_the_ojs_spec_shape_in_its_one_form_with_defaults() -> None:
    assert cron() == {
        "name": "nightly",
        "expression": "0 3 * * *",
        "timezone": "UTC",
        "job_template": {"type": "report.build", "args": [], "options": {}, "meta": {}},
        "overlap_policy": "skip",
        "enabled": True,
        "description": None,
    }


def test_the_http_binding_shape_is_the_same_cron() -> None:
    ojs = definition(
        {
            "name": "nightly", "cron": "0 3 * * *", "timezone": "Europe/Berlin",
            "type": "report.build", "args": [1, "x"], "options": {"queue": "reports"},
            "meta": {"team": "a"}, "overlap_policy": "allow", "enabled": False,
            "description": "every night",
        }
    )  # fmt: skip
    http = definition(
        {
            "name": "nightly", "expression": "0 3 * * *", "timezone": "Europe/Berlin",
            "job_template": {
                "type": "report.build", "args": [1, "x"], "options": {"queue": "reports"},
                "meta": {"team": "a"},
            },
            "overlap_policy": "allow", "enabled": False, "description": "every night",
        }
    )  # fmt: skip
    assert isinstance(ojs, dict) and ojs == http
    assert ojs["job_template"] == {
        "type": "report.build", "args": [1, "x"], "options": {"queue": "reports"},
        "meta": {"team": "a"},
    }  # fmt: skip


def test_cron_and_expression_may_both_be_given_if_they_agree() -> None:
    assert cron(expression="0 3 * * *") == cron()
    assert "differ" in refused(raw_cron(expression="0 4 * * *")).message


@pytest.mark.parametrize("value", [None, 5, ["0 3 * * *"], {"m": 0}])
def test_the_expression_is_required_and_a_string(value: object) -> None:
    raw = {k: v for k, v in raw_cron().items() if k != "cron"}
    if value is not None:
        raw["cron"] = value
    refused(raw)


def test_the_expression_is_kept_trimmed() -> None:
    assert cron(cron="  */5 * * * *\t")["expression"] == "*/5 * * * *"


@pytest.mark.parametrize(
    "expression",
    ["0 0 L * *", "*/0 * * * *", "60 * * * *", "10-5 * * * *", "* * * *", "", "@reboot"],
)
def test_a_bad_expression_is_refused(expression: str) -> None:
    refused(raw_cron(cron=expression))


@pytest.mark.parametrize(
    "expression", ["0 0 31 2 *", "0 0 30 2 *", "0 0 31 4,6,9,11 *", "0 0 30-31 2 *"]
)
def test_an_expression_that_never_fires_is_refused(expression: str) -> None:
    assert "never fires" in refused(raw_cron(cron=expression)).message


@pytest.mark.parametrize(
    "expression", ["0 0 29 2 *", "0 0 31 2 MON", "@yearly", "@every 1h", "0 0 0 1 1 *"]
)
def test_rare_expressions_are_accepted(expression: str) -> None:
    assert cron(cron=expression)["expression"] == expression


@pytest.mark.parametrize(
    "name", ["a", "0", "nightly", "nightly-report.v2", "a" * 255, "9-lives", "x.y.z", "a-"]
)
def test_names_by_the_rule(name: str) -> None:
    assert is_valid_name(name)
    assert cron(name=name)["name"] == name


@pytest.mark.parametrize(
    "name",
    [
        "", "A", "Nightly", "-a", ".a", "a_b", "a b", "a/b", "a" * 256, "é", "a\n", None, 5,
        ["a"],
    ],
)  # fmt: skip
def test_names_against_the_rule_are_refused(name: object) -> None:
    assert not is_valid_name(name)
    assert "name" in refused(raw_cron(name=name)).message


@given(st.from_regex(r"[a-z0-9][a-z0-9.\-]{0,254}", fullmatch=True))
def test_every_name_of_the_rule_is_valid(name: str) -> None:
    assert is_valid_name(name)


@given(st.text(max_size=20))
def test_a_name_is_valid_exactly_when_it_follows_the_rule(name: str) -> None:
    expected = (
        0 < len(name) <= 255
        and name[0] in "abcdefghijklmnopqrstuvwxyz0123456789"
        and all(c in "abcdefghijklmnopqrstuvwxyz0123456789.-" for c in name)
    )
    assert is_valid_name(name) is expected


@pytest.mark.parametrize("zone", ["UTC", "America/New_York", "Europe/Berlin", "Asia/Tokyo"])
def test_an_iana_timezone_is_kept(zone: str) -> None:
    assert cron(timezone=zone)["timezone"] == zone


@pytest.mark.parametrize("zone", ["EST", "PST", "+05:00", "UTC+5", "utc", "Nowhere/City", 5, None])
def test_offsets_abbreviations_and_unknown_zones_are_refused(zone: object) -> None:
    assert "timezone" in refused(raw_cron(timezone=zone)).message


@pytest.mark.parametrize("policy", OVERLAP_POLICIES)
def test_each_overlap_policy_is_accepted(policy: str) -> None:
    assert cron(overlap_policy=policy)["overlap_policy"] == policy


def test_the_default_overlap_policy_is_skip() -> None:
    assert DEFAULT_OVERLAP == "skip"
    assert set(OVERLAP_POLICIES) == {"skip", "allow", "cancel_previous", "enqueue"}
    assert cron()["overlap_policy"] == "skip"


@pytest.mark.parametrize("policy", ["queue", "replace", "SKIP", "", None, 1, ["skip"]])
def test_other_overlap_policies_are_refused(policy: object) -> None:
    assert "overlap_policy" in refused(raw_cron(overlap_policy=policy)).message


@pytest.mark.parametrize("unique", [{"keys": ["type"]}, {}, None, "strict"])
def test_a_template_may_not_carry_its_own_unique_policy(unique: object) -> None:
    as_ojs = refused(raw_cron(options={"unique": unique}))
    assert "unique" in as_ojs.message
    as_http = refused(
        {"name": "n", "expression": "* * * * *",
         "job_template": {"type": "a.b", "options": {"unique": unique}}}
    )  # fmt: skip
    assert "unique" in as_http.message


@pytest.mark.parametrize(
    "field", ["foo", "schedule", "unique", "queue", "id", "dialect", "job", "templates"]
)
def test_unknown_fields_are_refused(field: str) -> None:
    assert field in refused(raw_cron(**{field: 1})).message


def test_unknown_template_fields_are_refused() -> None:
    message = refused(
        {"name": "n", "expression": "* * * * *", "job_template": {"type": "a.b", "queue": "q"}}
    ).message
    assert "queue" in message


def test_system_managed_fields_are_taken_and_dropped() -> None:
    managed = {
        "last_run_at": "2020-01-01T00:00:00Z", "next_run_at": "x", "run_count": 99,
        "created_at": "y", "updated_at": "z", "status": "paused",
    }  # fmt: skip
    assert cron(**managed) == cron()


def test_the_job_is_given_once_or_twice_alike() -> None:
    both = raw_cron(job_template={"type": "report.other"})
    assert "not both" in refused(both).message
    alike = {"name": "n", "cron": "* * * * *", "type": "a.b", "job_template": {"type": "a.b"}}
    assert not isinstance(definition(alike), GatewayError)
    meta_too = {"name": "n", "cron": "* * * * *", "job_template": {"type": "a.b"}, "meta": {}}
    refused(meta_too)


@pytest.mark.parametrize(
    "fields",
    [
        {"job_template": "report.build"},
        {"job_template": ["report.build"]},
        {"job_template": {"type": "a.b", "options": []}},
        {"job_template": {"type": "a.b", "meta": "x"}},
    ],
)
def test_the_template_and_its_options_and_meta_are_objects(fields: dict[str, Any]) -> None:
    refused({"name": "n", "cron": "* * * * *", **fields})


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"type": ""},
        {"type": "Not A Type"},
        {"type": 5},
        {"type": "a.b", "options": {"queue": "Bad Queue!"}},
        {"type": "a.b", "options": {"priority": "high"}},
        {"type": "a.b", "options": {"max_attempts": 0}},
    ],
)
def test_a_template_that_is_no_valid_job_is_refused(fields: dict[str, Any]) -> None:
    assert refused({"name": "n", "cron": "* * * * *", **fields}).message.startswith(
        "job_template: "
    )


@pytest.mark.parametrize(
    ("field", "value"), [("enabled", "yes"), ("enabled", 1), ("enabled", None), ("description", 3)]
)
def test_enabled_is_a_bool_and_description_a_string(field: str, value: object) -> None:
    assert field in refused(raw_cron(**{field: value})).message


@pytest.mark.parametrize("raw", [None, [], "nightly", 5, b"{}"])
def test_a_cron_is_an_object(raw: object) -> None:
    refused(raw)


# -- commands ------------------------------------------------------------------------


def test_commands_round_trip_through_their_records() -> None:
    every = definition({
        "name": "e", "expression": "@every 90s", "timezone": "America/New_York",
        "job_template": {"type": "a.b", "args": [{"x": [1, 2]}], "options": {"queue": "q"},
                         "meta": {"k": "v"}},
        "overlap_policy": "cancel_previous", "enabled": False, "description": "d",
    })  # fmt: skip
    assert isinstance(every, dict)
    commands = [
        CronCommand("register", "nightly", cron()),
        CronCommand("register", "e", every),
        CronCommand("enable", "nightly", enabled=True),
        CronCommand("enable", "nightly", enabled=False),
        CronCommand("delete", "nightly"),
    ]  # fmt: skip
    for command in commands:
        assert parse_cron_command(command_record(command)) == command
        assert parse_cron_command(command_record(command).decode()) == command


@given(
    policy=st.sampled_from(OVERLAP_POLICIES),
    expression=st.sampled_from(["* * * * *", "0 3 * * MON-FRI", "@daily", "@every 1h30m"]),
    zone=st.sampled_from(["UTC", "Europe/Berlin", "Australia/Lord_Howe"]),
    on=st.booleans(),
    args=st.lists(st.one_of(st.integers(-(10**6), 10**6), st.text(max_size=5)), max_size=3),
    nested=st.booleans(),
)
def test_a_registration_round_trips_whichever_shape_it_came_in(
    policy: str, expression: str, zone: str, on: bool, args: list[Any], nested: bool
) -> None:
    job = {"type": "a.b", "args": args, "meta": {"m": 1}}
    raw = {"name": "c", "timezone": zone, "overlap_policy": policy, "enabled": on}
    raw |= (
        {"expression": expression, "job_template": job} if nested else {"cron": expression, **job}
    )
    record = orjson.dumps({"op": "register", "cron": raw})
    command = parse_cron_command(record)
    assert isinstance(command, CronCommand) and command.op == "register"
    assert command.name == "c" and command.definition == definition(raw)
    assert parse_cron_command(command_record(command)) == command


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"{",
        b"not json",
        b"[]",
        b"null",
        b'"register"',
        b"{}",
        b'{"op": "create", "name": "n"}',
        b'{"op": ["register"], "name": "n"}',
        b'{"op": "register"}',
        b'{"op": "register", "cron": {"name": "n"}}',
        b'{"op": "register", "cron": {"name": "n", "cron": "0 0 31 2 *", "type": "a.b"}}',
        b'{"op": "enable", "name": "n"}',
        b'{"op": "enable", "name": "n", "enabled": "true"}',
        b'{"op": "enable", "name": "n", "enabled": 1}',
        b'{"op": "enable", "name": "N", "enabled": true}',
        b'{"op": "delete"}',
        b'{"op": "delete", "name": ""}',
        b'{"op": "delete", "name": 5}',
        b'{"op": "delete", "name": "a b"}',
    ],
)
def test_bad_commands_are_refused(data: bytes) -> None:
    command = parse_cron_command(data)
    assert isinstance(command, GatewayError), command
    assert command.code == INVALID_REQUEST


_ASCII = st.characters(max_codepoint=127)


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(_ASCII, max_size=8),
        lambda inner: (
            st.lists(inner, max_size=3)
            | st.dictionaries(
                st.sampled_from(["op", "name", "enabled", "cron", "x"]), inner, max_size=4
            )
        ),
        max_leaves=8,
    )
)
@settings(max_examples=200)
def test_parse_cron_command_never_raises(value: Any) -> None:
    assert isinstance(parse_cron_command(orjson.dumps(value)), CronCommand | GatewayError)


def test_a_register_command_with_a_superscript_digit_is_refused_not_raised() -> None:
    data = orjson.dumps({"op": "register", "cron": raw_cron(cron="*/² * * * *")})
    assert isinstance(parse_cron_command(data), GatewayError)


# -- state: registration, enabling, firing ------------------------------------------------


def test_a_registration_starts_the_count_and_schedules_the_next_slot() -> None:
    state = registered(cron(), None, T0)
    stamp = format_rfc3339(T0)
    assert state["created_at"] == state["updated_at"] == stamp
    assert state["run_count"] == 0 and state["last_run_at"] is None
    assert state["next_run_at"] == "2026-03-02T03:00:00.000Z"
    assert next_run_ms(state) == ms("2026-03-02T03:00:00Z")
    assert {k: state[k] for k in cron()} == cron()


def test_a_re_registration_keeps_the_count_and_takes_the_new_definition() -> None:
    first = registered(cron(), None, T0)
    _, ran = fired(first, ms("2026-03-02T03:00:05Z"))
    later = ms("2026-03-05T12:00:00Z")
    again = registered(cron(cron="*/10 * * * *", overlap_policy="allow"), ran, later)
    assert again["created_at"] == first["created_at"]
    assert again["run_count"] == 1 and again["last_run_at"] == ran["last_run_at"]
    assert again["updated_at"] == format_rfc3339(later)
    assert again["expression"] == "*/10 * * * *" and again["overlap_policy"] == "allow"
    assert again["next_run_at"] == "2026-03-05T12:10:00.000Z"


def test_a_disabled_cron_has_no_next_run_and_never_fires() -> None:
    state = registered(cron(enabled=False), None, T0)
    assert state["next_run_at"] is None and next_run_ms(state) is None
    for later in (T0, T0 + DAY_MS, T0 + 400 * DAY_MS):
        assert fire(state, later) is None
    # Even with a stale next_run_at, a disabled cron does not fire.
    assert fire({**state, "next_run_at": format_rfc3339(T0)}, T0 + DAY_MS) is None


def test_disabling_and_enabling_skips_the_slots_in_between() -> None:
    state = registered(cron(cron="0 * * * *"), None, T0)
    off = enabled(state, False, T0 + HOUR_MS)
    assert off["enabled"] is False and off["next_run_at"] is None
    assert off["updated_at"] == format_rfc3339(T0 + HOUR_MS)
    back_at = ms("2026-03-01T15:30:00Z")
    on = enabled(off, True, back_at)
    assert on["enabled"] is True and on["next_run_at"] == "2026-03-01T16:00:00.000Z"
    assert on["run_count"] == 0 and on["created_at"] == state["created_at"]


def test_not_due_is_none() -> None:
    state = registered(cron(), None, T0)
    slot = next_run_ms(state)
    assert slot is not None
    assert fire(state, slot - 1) is None
    assert fire(state, T0) is None
    assert fire({**state, "next_run_at": None}, slot + DAY_MS) is None
    assert fire({k: v for k, v in state.items() if k != "next_run_at"}, slot) is None


def test_a_due_slot_fires_its_job_and_moves_on() -> None:
    state = registered(cron(args=[7], meta={"team": "data"}), None, T0)
    slot = ms("2026-03-02T03:00:00Z")
    job, after = fired(state, slot + 250)
    assert job == {
        "type": "report.build",
        "args": [7],
        "options": {"unique": {
            "keys": ["type", "meta"], "meta_keys": ["cron_name"],
            "states": ["scheduled", "available", "pending", "active", "retryable"],
            "on_conflict": "reject",
        }},
        "meta": {
            "team": "data", "cron_name": "nightly", "cron_slot": "2026-03-02T03:00:00.000Z",
            "cron_triggered_at": "2026-03-02T03:00:00.250Z",
        },
    }  # fmt: skip
    assert after["run_count"] == 1
    assert after["last_run_at"] == "2026-03-02T03:00:00.250Z"
    assert after["next_run_at"] == "2026-03-03T03:00:00.000Z"
    unchanged = {"next_run_at", "run_count", "last_run_at"}
    assert {k: v for k, v in after.items() if k not in unchanged} == {
        k: v for k, v in state.items() if k not in unchanged
    }
    assert fire(after, slot + 250) is None  # the slot fires once


def test_missed_slots_fire_once_named_by_the_first_and_the_schedule_moves_past_now() -> None:
    state = registered(cron(cron="*/15 * * * *"), None, T0)
    assert state["next_run_at"] == "2026-03-01T10:30:00.000Z"
    now = ms("2026-03-01T14:07:00Z")  # 15 slots were missed
    job, after = fired(state, now)
    assert job["meta"]["cron_slot"] == "2026-03-01T10:30:00.000Z"
    assert job["meta"]["cron_triggered_at"] == "2026-03-01T14:07:00.000Z"
    assert after["next_run_at"] == "2026-03-01T14:15:00.000Z"
    assert after["run_count"] == 1
    assert fire(after, now) is None


def test_a_slot_fired_exactly_on_time_schedules_the_next_one() -> None:
    state = registered(cron(cron="*/15 * * * *"), None, T0)
    slot = ms("2026-03-01T10:30:00Z")
    _, after = fired(state, slot)
    assert after["next_run_at"] == "2026-03-01T10:45:00.000Z"


def test_the_template_meta_cannot_forge_the_cron_fields() -> None:
    state = registered(
        cron(meta={"cron_name": "other", "cron_slot": "x", "cron_triggered_at": "y", "k": 1}),
        None, T0,
    )  # fmt: skip
    job, _ = fired(state, ms("2026-03-02T03:00:00Z"))
    assert job["meta"] == {
        "k": 1, "cron_name": "nightly", "cron_slot": "2026-03-02T03:00:00.000Z",
        "cron_triggered_at": "2026-03-02T03:00:00.000Z",
    }  # fmt: skip


def test_a_timezone_cron_fires_at_its_wall_time() -> None:
    # 09:00 in New York: 14:00Z in winter, 13:00Z once DST starts (2026-03-08).
    state = registered(cron(cron="0 9 * * *", timezone="America/New_York"), None, T0)
    seen = []
    for _ in range(10):
        slot = next_run_ms(state)
        assert slot is not None
        seen.append(format_rfc3339(slot))
        _, state = fired(state, slot + 1_000)
    assert seen == [f"2026-03-0{d}T14:00:00.000Z" for d in range(1, 8)] + [
        "2026-03-08T13:00:00.000Z", "2026-03-09T13:00:00.000Z", "2026-03-10T13:00:00.000Z",
    ]  # fmt: skip


def test_every_counts_from_the_registration() -> None:
    registered_at = T0 + 123
    state = registered(cron(cron="@every 90s"), None, registered_at)
    assert next_run_ms(state) == registered_at + 90_000
    _, after = fired(state, registered_at + 10 * 90_000 + 5)
    assert next_run_ms(after) == registered_at + 11 * 90_000
    # A re-registration keeps the anchor: the slots stay where they were.
    again = registered(cron(cron="@every 90s"), after, registered_at + 1_000_000)
    assert next_run_ms(again) == registered_at + 12 * 90_000


_EXPRESSIONS = [
    "*/5 * * * *", "0 * * * *", "30 2 * * *", "30 1 * * *", "0 0 * * MON", "15 10 1 * *",
    "0 0 29 2 *", "*/30 * * * * *", "@every 90s", "@every 7h", "@daily",
]  # fmt: skip


@given(
    expression=st.sampled_from(_EXPRESSIONS),
    zone=st.sampled_from(["UTC", "America/New_York", "Europe/Berlin"]),
    policy=st.sampled_from(OVERLAP_POLICIES),
    registered_at=st.integers(ms("2025-01-01T00:00:00Z"), ms("2028-01-01T00:00:00Z")),
    late=st.one_of(st.integers(0, 2_000), st.integers(0, 40 * DAY_MS)),
)
@settings(max_examples=150, deadline=None)
def test_firing_catches_up_once_and_schedules_the_first_slot_after_now(
    expression: str, zone: str, policy: str, registered_at: int, late: int
) -> None:
    state = registered(
        cron(cron=expression, timezone=zone, overlap_policy=policy), None, registered_at
    )
    slot = next_run_ms(state)
    assert slot is not None and slot > registered_at
    assert fire(state, slot - 1) is None
    now = slot + late
    job, after = fired(state, now)
    assert job["meta"]["cron_name"] == "nightly"
    assert job["meta"]["cron_slot"] == state["next_run_at"]
    assert job["meta"]["cron_triggered_at"] == format_rfc3339(now)
    assert after["run_count"] == state["run_count"] + 1
    assert after["last_run_at"] == format_rfc3339(now)
    parsed, tz = parse_cron(expression), parse_zone(zone)
    assert not isinstance(parsed, GatewayError) and not isinstance(tz, GatewayError)
    expected = next_after(parsed, tz, now, registered_at)
    assert expected is not None and expected > now
    assert next_run_ms(after) == expected
    assert fire(after, now) is None
    assert fire(after, expected - 1) is None
    job_again, again = fired(after, expected)
    assert job_again["meta"]["cron_slot"] == after["next_run_at"]
    assert again["run_count"] == state["run_count"] + 2
    request_of(job)  # every firing is a valid request


# -- the firing job as a request: its unique policy and key ----------------------------


@pytest.mark.parametrize(
    ("policy", "meta_keys", "states", "on_conflict"),
    [
        ("skip", ("cron_name",), set(ALL_STATES) - TERMINAL_STATES, OnConflict.REJECT),
        ("cancel_previous", ("cron_name",), set(ALL_STATES) - TERMINAL_STATES, OnConflict.REPLACE),
        ("allow", ("cron_name", "cron_slot"), set(ALL_STATES), OnConflict.IGNORE),
        ("enqueue", ("cron_name", "cron_slot"), set(ALL_STATES), OnConflict.IGNORE),
    ],
)
def test_the_overlap_policy_is_the_jobs_unique_policy(
    policy: str, meta_keys: tuple[str, ...], states: set[State], on_conflict: OnConflict
) -> None:
    state = registered(cron(overlap_policy=policy, options={"queue": "reports"}), None, T0)
    job, _ = fired(state, ms("2026-03-02T03:00:00Z"))
    request = request_of(job)
    assert request.policy is not None and request.unique_key is not None
    assert [d.value for d in request.policy.keys] == ["type", "meta"]
    assert request.policy.meta_keys == meta_keys
    assert set(request.policy.states) == states
    assert request.policy.on_conflict is on_conflict
    assert request.envelope.queue == "reports"
    assert request.envelope.type == "report.build"


def _key(state: dict[str, Any], slot: int, now: int) -> str:
    key = request_of(firing_job(state, slot, now)).unique_key
    assert key is not None
    return key


@pytest.mark.parametrize("policy", ["allow", "enqueue"])
def test_allow_and_enqueue_key_each_slot(policy: str) -> None:
    state = registered(cron(overlap_policy=policy), None, T0)
    one, two = ms("2026-03-02T03:00:00Z"), ms("2026-03-03T03:00:00Z")
    assert _key(state, one, one) == _key(state, one, one + 5_000) == _key(state, one, two)
    assert _key(state, one, one) != _key(state, two, two)


@pytest.mark.parametrize("policy", ["skip", "cancel_previous"])
def test_skip_and_cancel_previous_key_the_cron_whatever_the_slot(policy: str) -> None:
    state = registered(cron(overlap_policy=policy), None, T0)
    slots = [ms("2026-03-02T03:00:00Z") + n * DAY_MS for n in range(5)]
    assert len({_key(state, s, s + n) for n, s in enumerate(slots)}) == 1


@given(
    policy=st.sampled_from(OVERLAP_POLICIES),
    slots=st.lists(st.integers(0, 10**13).map(lambda v: v - v % 1000), min_size=2, max_size=4),
    delays=st.lists(st.integers(0, DAY_MS), min_size=4, max_size=4),
)
def test_keys_follow_the_policy_for_any_slots(
    policy: str, slots: list[int], delays: list[int]
) -> None:
    state = registered(cron(overlap_policy=policy), None, T0)
    keys = {s: _key(state, s, s + d) for s, d in zip(slots, delays, strict=False)}
    per_slot = policy in ("allow", "enqueue")
    assert len(set(keys.values())) == (len(set(slots)) if per_slot else 1)


def test_different_crons_have_different_keys() -> None:
    slot = ms("2026-03-02T03:00:00Z")
    for policy in OVERLAP_POLICIES:
        a = registered(cron(name="a", overlap_policy=policy), None, T0)
        b = registered(cron(name="b", overlap_policy=policy), None, T0)
        assert _key(a, slot, slot) != _key(b, slot, slot)


# -- shown -------------------------------------------------------------------------------


def test_shown_has_the_ojs_fields_and_both_aliases() -> None:
    state = registered(cron(args=[1], options={"queue": "q"}, meta={"m": 2}), None, T0)
    view = shown(state)
    assert view["cron"] == view["expression"] == "0 3 * * *"
    assert view["job_template"] == state["job_template"]
    assert (view["type"], view["args"], view["options"], view["meta"]) == (
        "report.build", [1], {"queue": "q"}, {"m": 2},
    )  # fmt: skip
    assert view["status"] == "active"
    assert view["next_run_at"] == state["next_run_at"]
    assert view["run_count"] == 0 and view["last_run_at"] is None
    assert view["timezone"] == "UTC" and view["overlap_policy"] == "skip"
    assert shown(enabled(state, False, T0 + 1))["status"] == "disabled"


def test_a_shown_cron_registers_as_itself() -> None:
    """What the HTTP binding shows can be sent back as a registration (managed fields and
    both aliases included) and names the same cron."""
    state = registered(cron(args=[1], meta={"m": 2}, description="d"), None, T0)
    assert definition(shown(state)) == cron(args=[1], meta={"m": 2}, description="d")
    disagreeing = {**shown(state), "type": "other.type"}
    assert isinstance(definition(disagreeing), GatewayError)


def test_zone_objects_are_what_registration_checked() -> None:
    """From the tzdata package (not the host's files): the same rules, by name."""
    zone = parse_zone(cron(timezone="Europe/Berlin")["timezone"])
    assert isinstance(zone, ZoneInfo) and zone.key == "Europe/Berlin"
    assert parse_zone("Europe/Berlin") is zone  # read once


def test_a_stored_cron_the_rules_no_longer_take_is_stopped_not_fired() -> None:
    """A cron kept by an older version whose template or zone no longer passes: it is
    disabled with the reason, never raises, and fires nothing."""
    state = registered(cron(), None, T0)
    slot = next_run_ms(state)
    assert slot is not None
    for broken in (
        {**state, "timezone": "Mars/Olympus"},
        {**state, "job_template": {**state["job_template"], "type": "Not A Type"}},
        {**state, "expression": "99 * * * *"},
    ):
        result = fire(broken, slot)
        assert result is not None and result[0] is None
        stopped = result[1]
        assert stopped["enabled"] is False and stopped["next_run_at"] is None
        assert "invalid_request" in stopped["error"]
        assert fire(stopped, slot + DAY_MS) is None
        again = enabled(stopped, True, slot)
        assert "error" not in again


def test_a_cron_too_large_to_keep_is_refused() -> None:
    big = definition({"name": "big", "expression": "@daily", "type": "a.b",
                      "description": "x" * MAX_CRON_BYTES})  # fmt: skip
    assert isinstance(big, GatewayError) and "limit" in big.message
