"""The wire facts: the route rule, the group name, and the names already in the logs."""

from __future__ import annotations

import pytest

from gateway import wire
from gateway.core import JobEvent, Request, parse_event, parse_request

UNIQUE = {"unique": {"keys": ["type", "args"]}}
JOB_ID = "019078a3-b5c7-7def-8a12-3456789abcde"


def request(**fields: object) -> Request:
    parsed = parse_request({"type": "email.send", "args": [1], **fields})
    assert isinstance(parsed, Request), parsed
    return parsed


def test_a_request_is_routed_by_its_unique_key_else_its_id_else_not_yet() -> None:
    key = request(**UNIQUE).unique_key
    assert key is not None
    assert wire.route(request(**UNIQUE)) == wire.route(request(**UNIQUE, id=JOB_ID)) == key
    assert wire.route(request(id=JOB_ID)) == JOB_ID
    assert wire.route(request()) is None


@pytest.mark.parametrize("policy", [UNIQUE, {}])
def test_an_event_about_a_job_travels_under_the_route_its_request_did(
    policy: dict[str, object],
) -> None:
    req = request(**policy, id=JOB_ID)
    event = parse_event({"job_id": JOB_ID, "unique_key": req.unique_key, "type": "job.started"})
    assert isinstance(event, JobEvent) and event.route == wire.route(req)


def test_the_group_is_named_in_its_namespace() -> None:
    assert wire.group_name(None) == wire.group_name("") == "gateway-dedup"
    assert wire.group_name("team-a") == "team-a.gateway-dedup"


@pytest.mark.parametrize(
    ("name", "in_the_logs"),
    [
        (wire.REQUEST_ID_HEADER, "request_id"),
        (wire.REPLY_TO_HEADER, "reply_to"),
        (wire.CORRELATION_ID_HEADER, "correlation_id"),
        (wire.UNIQUE_KEY_HEADER, "unique_key"),
        (wire.KIND_HEADER, "kind"),
        (wire.JOB_EVENT, b"job_event"),
        (wire.ID_REPORT, b"id_report"),
        (wire.TICK, b"tick"),
        (wire.TICK_KEY, b"\x00tick"),
        (wire.ID_CLAIM_HEADER, "id_claim"),
        (wire.ID_CLAIMED, b"claimed"),
        (wire.CLAIMED_ID_HEADER, "claimed_id"),
    ],
)
def test_a_name_on_the_wire_is_the_one_already_in_the_logs(
    name: str | bytes, in_the_logs: str | bytes
) -> None:
    """Renamed, it would strand the records written before, which replay reads back."""
    assert name == in_the_logs
