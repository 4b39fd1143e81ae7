"""Who asked for a record: the actor header the edge sets (core/actor.py) becomes the audit
record's `by`, sealed like every other field, told by explain, and replayed byte for byte;
a record without one is as it always was, and one the edge could not have written is
refused before it is read."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson
import pytest

from gateway import wire
from gateway.audit import explain_record
from gateway.audit.log import LogRecord
from gateway.core.actor import FIELD_BYTES, MAX_ACTOR_BYTES, Actor, cut, parse, told
from gateway.core.queues import queue_command
from gateway.stage.trail import intact
from tests.support import validator
from tests.unit.test_replay import JOB, REQ, T0, event, key_of, processed, rec, replayed

ALICE = Actor("alice", "admin", "10.0.0.5", "req-1")


def _with(record: LogRecord, actor: Actor | bytes) -> LogRecord:
    raw = actor if isinstance(actor, bytes) else actor.header()
    return replace(record, headers={**record.headers, wire.ACTOR_HEADER: raw})


def cancel_log(actor: Actor | None) -> list[LogRecord]:
    """A request, and a cancel of its job sent for `actor`."""
    key = key_of(JOB)
    first = rec(REQ, 0, T0, JOB, key)
    [audit] = processed([first])
    job_id = orjson.loads(audit.value or b"")["job_id"]
    cancel = event(1, T0 + 1, {"job_id": job_id, "unique_key": key, "type": "job.cancelled"}, key)
    return [first, cancel if actor is None else _with(cancel, actor)]


def _audits(log: list[LogRecord]) -> list[dict[str, Any]]:
    return [orjson.loads(t.value or b"") for t in processed(log)]


# -- the header ---------------------------------------------------------------------


def test_the_header_is_compact_json_of_the_fields_given_in_order():
    assert ALICE.header() == (
        b'{"principal":"alice","role":"admin","source":"10.0.0.5","request_id":"req-1"}'
    )
    assert Actor(source="::1").header() == b'{"source":"::1"}'
    assert parse(ALICE.header()) == ALICE


def test_each_field_is_cut_at_a_characters_edge_so_a_header_always_fits():
    long = "é" * FIELD_BYTES  # two bytes each
    assert len(cut(long).encode()) == FIELD_BYTES - 1
    assert cut("a\ud800b") == "a?b"  # a lone surrogate JSON cannot carry
    worst = Actor(*(["\x01" * 1000] * 4)).header()
    assert len(worst) <= MAX_ACTOR_BYTES
    assert isinstance(parse(worst), Actor)


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b"x" * (MAX_ACTOR_BYTES + 1), "over"),
        (b"not json", "not JSON"),
        (b'["alice"]', "not an object"),
        (b'{"principal":"alice","admin":true}', "not an object"),
        (b'{"principal":7}', "field principal"),
        (orjson.dumps({"source": "x" * (FIELD_BYTES + 1)}), "field source"),
    ],
)
def test_a_header_the_edge_could_not_have_written_is_refused(raw: bytes, why: str):
    problem = parse(raw)
    assert isinstance(problem, str) and why in problem


def test_told_names_the_role_only_when_the_principal_has_one():
    assert told(ALICE.fields()) == "admin:alice from 10.0.0.5"
    assert told({"principal": "alice"}) == "alice"
    assert told({"source": "10.0.0.5", "request_id": "r"}) == "from 10.0.0.5"
    assert told({"request_id": "r"}) is None
    assert told(None) is None


# -- the audit record ---------------------------------------------------------------


def test_the_audit_record_carries_by_sealed_and_replayed_identically():
    log = cancel_log(ALICE)
    trail = processed(log)
    cancel = orjson.loads(trail[1].value or b"")
    assert cancel["kind"] == "event" and cancel["what"]["state"] == "cancelled"
    assert cancel["by"] == ALICE.fields()
    assert list(cancel).index("by") == list(cancel).index("state") - 1
    assert all(intact(t.value or b"") for t in trail)
    validator("audit.json").validate(cancel)
    # `by` is sealed: altered, the digest no longer matches.
    value = trail[1].value or b""
    assert not intact(value.replace(b'"alice"', b'"mallo"'))
    report = replayed(log, trail)
    assert (report.verified, report.different, report.findings) == (2, 0, [])


def test_a_record_without_the_header_is_as_it_was():
    log = cancel_log(None)
    assert all("by" not in audit for audit in _audits(log))
    with_actor = [t.value or b"" for t in processed(cancel_log(ALICE))]
    without = [t.value or b"" for t in processed(log)]
    assert with_actor[0] == without[0]
    # The same record, but for `by` (and the digest that seals it).
    cut_by = with_actor[1].replace(b',"by":' + orjson.dumps(ALICE.fields()), b"")
    assert cut_by.rsplit(b',"digest"', 1)[0] == without[1].rsplit(b',"digest"', 1)[0]


def test_a_replay_whose_input_names_someone_else_differs():
    log = cancel_log(ALICE)
    trail = processed(log)
    forged = [log[0], _with(log[1], Actor("mallory", None, "10.6.6.6", "req-1"))]
    report = replayed(forged, trail)
    assert report.different == 1


def test_requests_and_commands_carry_by_too():
    key = key_of(JOB)
    request = _with(rec(REQ, 0, T0, JOB, key), Actor("bob", None, "10.0.0.7", "r-9"))
    command = LogRecord(
        REQ, 0, 1, T0 + 1, wire.queue_key("email"),
        queue_command("email", True, (T0, "c1")),
        {wire.KIND_HEADER: wire.QUEUE_COMMAND, wire.ACTOR_HEADER: ALICE.header()},
    )  # fmt: skip
    decided, paused = _audits([request, command])
    assert decided["kind"] == "request" and decided["by"]["principal"] == "bob"
    assert paused["kind"] == "command" and paused["by"] == ALICE.fields()
    for audit in (decided, paused):
        validator("audit.json").validate(audit)
    assert explain_record(decided).by == "bob from 10.0.0.7"
    assert explain_record(paused).by == "admin:alice from 10.0.0.5"


def test_a_record_with_an_unreadable_header_is_refused_before_it_is_read():
    key = key_of(JOB)
    [audit] = _audits([_with(rec(REQ, 0, T0, JOB, key), b'{"principal":7}')])
    assert audit["outcome"] == "invalid" and "by" not in audit
    assert audit["error"]["message"].startswith("the actor header field principal")
    # An event so refused changes nothing, so it leaves no audit record.
    log = cancel_log(b"[]")
    assert len(_audits(log)) == 1


# -- explain -----------------------------------------------------------------------


def test_explain_tells_who_cancelled():
    trail = processed(cancel_log(ALICE))
    told_cancel = explain_record(orjson.loads(trail[1].value or b""))
    assert told_cancel.by == "admin:alice from 10.0.0.5"
    assert told_cancel.reason[0].endswith("→ cancelled by admin:alice from 10.0.0.5")
    anonymous = processed(cancel_log(Actor(source="10.0.0.5", request_id="r")))
    told_anonymous = explain_record(orjson.loads(anonymous[1].value or b""))
    assert told_anonymous.reason[0].endswith("→ cancelled from 10.0.0.5")
    plain = explain_record(orjson.loads(processed(cancel_log(None))[1].value or b""))
    assert plain.by is None and plain.reason[0].endswith("→ cancelled")
