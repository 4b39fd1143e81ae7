"""Adversarial cron registrations: names that only look ASCII, separators that are not
ASCII blanks, intervals past the calendar, zone names that only look like one. Each is
refused with an invalid_request saying what is wrong, never taken as something else."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.core.cron_expr import CronExpr, parse_cron, parse_zone
from gateway.core.crons import definition
from gateway.core.errors import GatewayError
from gateway.core.limits import MAX_DURATION_MS


def refused_expression(text: str) -> str:
    parsed = parse_cron(text)
    assert isinstance(parsed, GatewayError) and parsed.code == "invalid_request", parsed
    return parsed.message


@pytest.mark.parametrize(
    "text",
    ["0 0 * * \u017fun",  # "ſun".upper() is "SUN"
     "0 0 * \u017fep *", "0 0 * * MON-\u017fat", "0 0 * * \u0130", "0 0 * \u212a *"],
)  # fmt: skip
def test_a_name_that_only_uppercases_to_a_month_or_weekday_is_refused(text: str):
    refused_expression(text)


@pytest.mark.parametrize(
    "text", ["*\u3000* * * *", "0 0\u00a0* * *", "@every\u30001s", "0\u20030 * * *"]
)
def test_fields_are_separated_by_ascii_blanks_only(text: str):
    refused_expression(text)


@pytest.mark.parametrize("text", ["0 0 * * *", " 0\t0 * * *\n", "@every 1h30m", "@daily"])
def test_ascii_blanks_around_and_between_fields_are_fine(text: str):
    assert isinstance(parse_cron(text), CronExpr)


@pytest.mark.parametrize("text", ["@every 876001h", "@every 99999999999h", "@every 876000h1ms"])
def test_an_interval_longer_than_the_longest_duration_is_refused(text: str):
    assert "longest" in refused_expression(text)


def test_the_longest_interval_is_taken():
    parsed = parse_cron(f"@every {MAX_DURATION_MS}ms")
    assert isinstance(parsed, CronExpr) and parsed.every_ms == MAX_DURATION_MS


@given(st.integers(min_value=1, max_value=2**80))
def test_every_interval_is_taken_exactly_when_it_is_a_second_to_the_longest(seconds: int):
    parsed = parse_cron(f"@every {seconds}s")
    ms = seconds * 1000
    assert isinstance(parsed, CronExpr) == (ms <= MAX_DURATION_MS)


@pytest.mark.parametrize(
    "zone",
    ["Europe/Paris/", "Europe//Paris", "/Europe/Paris", "Europe/./Paris", "Europe/Paris ",
     " Europe/Paris", "Europe/Par\u00eds", "Europe/Paris\x00", "Europe\\Paris", "europe/paris"],
)  # fmt: skip
def test_a_zone_name_that_only_looks_like_one_is_refused(zone: str):
    parsed = parse_zone(zone)
    assert isinstance(parsed, GatewayError) and parsed.code == "invalid_request"


def test_a_long_zone_name_is_named_cut_short():
    parsed = parse_zone("A/" + "b" * 100_000)
    assert isinstance(parsed, GatewayError) and len(parsed.message) < 300


@pytest.mark.parametrize("zone", ["America/New_York", "Asia/Tokyo", "Etc/GMT+5", "UTC"])
def test_the_zones_real_clients_send_are_taken(zone: str):
    cron = definition({"name": "c", "cron": "0 9 * * *", "type": "t", "timezone": zone})
    assert isinstance(cron, dict) and cron["timezone"] == zone


@given(st.text(max_size=30))
def test_a_zone_is_taken_only_as_named(zone: str):
    parsed = parse_zone(zone)
    assert isinstance(parsed, GatewayError) or str(parsed) == zone


# What the official OJS Python SDK's register_cron_job sends, every option set.
SDK_REGISTRATION = {
    "name": "nightly-report", "cron": "0 2 * * *", "type": "report.build", "args": [1],
    "timezone": "America/New_York", "meta": {"team": "a"},
    "options": {"queue": "reports", "priority": 5, "tags": ["x"],
                "retry": {"max_attempts": 3, "initial_interval": "PT1S"}},
}  # fmt: skip


def test_the_sdks_registration_is_taken():
    cron = definition(SDK_REGISTRATION)
    assert isinstance(cron, dict)
    assert cron["job_template"]["options"]["queue"] == "reports"
