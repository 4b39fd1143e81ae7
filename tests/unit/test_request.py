"""Enqueue requests: envelope validation, both shapes, policy placement."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.core import (
    INVALID_PAYLOAD,
    INVALID_REQUEST,
    GatewayError,
    OnConflict,
    Request,
    parse_request,
    parse_request_json,
)
from gateway.core.envelope import is_valid_queue_name

BASE: dict[str, Any] = {"type": "email.send", "args": [1]}


def ok(job: dict[str, Any]) -> Request:
    parsed = parse_request(job)
    assert isinstance(parsed, Request), parsed
    return parsed


def test_a_minimal_job_without_policy_has_no_key() -> None:
    req = ok(BASE)
    assert req.policy is None and req.unique_key is None
    assert req.dialect == "ojs"
    assert req.envelope.queue == "default"
    assert req.envelope.max_attempts == 3


def test_the_policy_may_be_top_level_or_under_options() -> None:
    top = ok({**BASE, "unique": {"on_conflict": "ignore"}})
    nested = ok({**BASE, "options": {"unique": {"on_conflict": "ignore"}}})
    assert top.policy == nested.policy
    assert top.policy is not None and top.policy.on_conflict is OnConflict.IGNORE
    assert top.unique_key == nested.unique_key is not None
    assert top.envelope.unique_field == "unique"
    assert nested.envelope.unique_field == "options.unique"


def test_options_queue_is_the_queue_and_may_repeat_the_top_level_one() -> None:
    assert ok({**BASE, "options": {"queue": "mail"}}).envelope.queue == "mail"
    assert ok({**BASE, "queue": "mail", "options": {"queue": "mail"}}).envelope.queue == "mail"


def test_fields_are_parsed() -> None:
    env = ok(
        {
            **BASE,
            "id": "019078a3-b5c7-7def-8a12-3456789abcde",
            "meta": {"tenant_id": "acme"},
            "scheduled_at": "2026-02-12T10:00:00.250+01:00",
            "max_attempts": 5,
            "priority": -2,
        }
    ).envelope
    assert env.id == "019078a3-b5c7-7def-8a12-3456789abcde"
    assert env.meta == {"tenant_id": "acme"}
    assert env.scheduled_at == 1_770_886_800_250
    assert env.max_attempts == 5
    assert env.priority == -2


@pytest.mark.parametrize(
    ("job", "message"),
    [
        ([], "the job must be a JSON object"),
        ({"args": []}, "type is required"),
        ({"type": "", "args": []}, "type is required"),
        ({"type": 5, "args": []}, "type is required"),
        ({"type": "t"}, "args is required"),
        ({"type": "t", "args": "x"}, "args must be a JSON array or object"),
        ({"type": "t", "args": None}, "args must be a JSON array or object"),
        ({**BASE, "queue": "Mail"}, 'queue "Mail" is not a valid queue name'),
        ({**BASE, "queue": ""}, "is not a valid queue name"),
        ({**BASE, "queue": "-mail"}, "is not a valid queue name"),
        ({**BASE, "queue": "a" * 256}, "is not a valid queue name"),
        ({**BASE, "queue": 3}, "queue a non-string value is not a valid queue name"),
        ({**BASE, "options": {"queue": "a b"}}, 'options.queue "a b" is not a valid queue name'),
        ({**BASE, "queue": "a", "options": {"queue": "b"}}, "queue ('a') and options.queue ('b')"),
        ({**BASE, "options": []}, "options must be an object"),
        ({**BASE, "id": 7}, "id must be a lowercase UUIDv7"),
        ({**BASE, "id": "job-1"}, "id must be a lowercase UUIDv7"),
        ({**BASE, "id": "019078A3-B5C7-7DEF-8A12-3456789ABCDE"}, "id must be a lowercase UUIDv7"),
        ({**BASE, "id": "550e8400-e29b-41d4-a716-446655440000"}, "id must be a lowercase UUIDv7"),
        ({**BASE, "type": "Email.Send"}, "is not a valid job type"),
        ({**BASE, "type": "1email.send"}, "is not a valid job type"),
        ({**BASE, "type": "email send"}, "is not a valid job type"),
        ({**BASE, "type": "-email.send"}, "is not a valid job type"),
        ({**BASE, "type": "email.-send"}, "is not a valid job type"),
        ({**BASE, "type": "e" * 256}, "is not a valid job type"),
        ({**BASE, "options": {"retry": {"max_attempts": 0}}}, "retry.max_attempts must be"),
        ({**BASE, "options": {"delay_until": "soon"}}, "scheduled_at must be an RFC 3339"),
        ({**BASE, "priority": 1, "options": {"priority": 2}}, "priority and options.priority"),
        ({**BASE, "meta": []}, "meta must be an object"),
        ({**BASE, "scheduled_at": 1770886800}, "scheduled_at must be an RFC 3339 date-time"),
        ({**BASE, "scheduled_at": "2026-02-12"}, "scheduled_at must be an RFC 3339"),
        ({**BASE, "scheduled_at": "2026-02-12T10:00:00"}, "with a time zone"),
        ({**BASE, "scheduled_at": "2026-02-30T10:00:00Z"}, "scheduled_at must be an RFC 3339"),
        ({**BASE, "max_attempts": 0}, "max_attempts must be an integer of at least 1"),
        ({**BASE, "max_attempts": True}, "max_attempts must be an integer"),
        ({**BASE, "max_attempts": "3"}, "max_attempts must be an integer"),
        ({**BASE, "priority": 1.5}, "priority must be an integer"),
        ({**BASE, "priority": False}, "priority must be an integer"),
        (
            {**BASE, "unique": {}, "options": {"unique": {}}},
            "either as unique or as options.unique",
        ),
        ({**BASE, "unique": "yes"}, "unique must be an object"),
        (
            {**BASE, "options": {"unique": {"keys": ["meta"]}}},
            "options.unique.meta_keys is required",
        ),
    ],
)
def test_invalid_requests(job: Any, message: str) -> None:
    error = parse_request(job)
    assert isinstance(error, GatewayError)
    assert error.code == INVALID_REQUEST
    assert message in error.message


@pytest.mark.parametrize(
    ("name", "valid"),
    [
        ("default", True),
        ("a", True),
        ("0", True),
        ("mail.high_priority-2", True),
        ("a" * 255, True),
        ("a" * 256, False),
        ("", False),
        (".hidden", False),
        ("_x", False),
        ("Mail", False),
        ("caf\u00e9", False),
        ("a/b", False),
        ("a b", False),
    ],
)
def test_queue_name_rule(name: str, valid: bool) -> None:
    assert is_valid_queue_name(name) is valid


def test_malformed_json_is_an_invalid_request() -> None:
    # OJS's `invalid_request` ("Malformed request"), as the HTTP binding says; OJS's
    # `invalid_payload` is args that fail a schema, which the gateway does not check.
    for text in (b'{"type": ', b"", b"{not json"):
        error = parse_request_json(text)
        assert isinstance(error, GatewayError)
        assert error.code == INVALID_REQUEST != INVALID_PAYLOAD
        assert error.message.startswith("the request is not valid JSON")


def test_json_text_is_parsed() -> None:
    req = parse_request_json(b'{"type": "t", "args": {"a": 1}, "unique": {"keys": ["args"]}}')
    assert isinstance(req, Request) and req.unique_key is not None


def test_the_http_form_options_are_read() -> None:
    env = ok(
        {
            **BASE,
            "options": {
                "priority": 10, "delay_until": "2026-02-12T10:00:00Z", "tags": ["a"],
                "retry": {"max_attempts": 5, "initial_interval": "PT2S", "jitter": False},
            },
        }
    ).envelope  # fmt: skip
    assert (env.priority, env.max_attempts, env.tags) == (10, 5, ["a"])
    assert env.scheduled_at == 1_770_890_400_000
    assert (env.retry.initial_ms, env.retry.jitter) == (2000, False)
    assert ok({**BASE, "options": {"max_attempts": 2}}).envelope.max_attempts == 2
    assert ok({**BASE, "options": {"scheduled_at": "2026-02-12T10:00:00Z"}}).envelope.scheduled_at
    assert ok({**BASE, "priority": 101}).envelope.priority == 101  # OJS sets no range


@pytest.mark.parametrize(
    "job_type", ["retry.test.exponential-backoff", "email-send", "a_b.c-d", "e" * 255]
)
def test_hyphens_are_allowed_in_type_segments_as_ojs_openapi_has_it(job_type: str) -> None:
    request = parse_request({**BASE, "type": job_type})
    assert isinstance(request, Request) and request.envelope.type == job_type
