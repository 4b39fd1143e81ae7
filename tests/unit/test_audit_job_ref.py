"""A duplicate's audit record names the job it met (`job_ref`: its record's name in the key's
`state.before`, which carries it as read) instead of carrying it a second time as `job`.

Records written before that carry `job`: the recorded differential log's trail, turned back
into that form (each reference replaced by the job it names, the chain sealed again, which
is byte for byte the trail the code before references wrote), replays with no difference,
and explain and the history route tell each such record as they tell the record that
references its job. The caller's reply keeps the job.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.audit.explain import explain_record
from gateway.audit.history import Item, as_json
from gateway.audit.log import LogRecord
from gateway.audit.verify import SOUND, seal_of
from gateway.core.decision_records import JOB_REF, job_shown
from gateway.stage.parsing import Limits
from gateway.stage.trail import DIGEST_FIELD, digest
from gateway.wire import REPLY_TO_HEADER
from tests import differential_log as recorded
from tests.differential_log import RecordedLog
from tests.unit.test_canonical import json_values
from tests.unit.test_differential import DATA, decide_log
from tests.unit.test_ids import Gateway
from tests.unit.test_trail_replay import Partitioned, _decisions, _inputs, replay_requests

Trail = tuple[Partitioned, Partitioned]


@pytest.fixture(scope="module")
def log() -> RecordedLog:
    return recorded.load(DATA)


@pytest.fixture(scope="module")
def trail(log: RecordedLog) -> Trail:
    outputs = decide_log(log, Limits(**log.limits))
    return _inputs(log, "requests"), _decisions(log, outputs)


def carrying(
    value: bytes, prev: bytes | None, alter: Callable[[bytes], bytes] = lambda job: job
) -> tuple[bytes, bytes | None]:
    """An audit record as written before references: the job its `job_ref` names in its
    place (as `alter` makes it), chained after `prev`; and its digest (a record without one
    is as it was)."""
    if DIGEST_FIELD not in value:
        return value, prev
    record = orjson.loads(value)
    if JOB_REF in record:
        start = value.index(b',"%b":' % JOB_REF.encode())
        end = value.index(b',"kind":"request"')
        job = alter(orjson.dumps(job_shown(record)))
        value = b'%b,"job":%b%b' % (value[:start], job, value[end:])
    cut = value.rindex(b',"prev":')
    after = value[cut + len(b',"prev":') :]
    after = after[4:] if after.startswith(b"null") else after[34:]  # null, or "<32 hex>"
    mark = after[: after.rindex(DIGEST_FIELD)]  # `,"sealed_by":…` when keyed
    shown_prev = b"null" if prev is None else b'"%b"' % prev
    body = b'%b,"prev":%b%b}' % (value[:cut], shown_prev, mark)
    sealed = digest(body).encode()
    return b'%b%b%b"}' % (body[:-1], DIGEST_FIELD, sealed), sealed


def carried_trail(
    decisions: Partitioned, alter: Callable[[bytes], bytes] = lambda job: job
) -> Partitioned:
    """The trail as the code before references wrote it (each job as `alter` makes it)."""
    out: Partitioned = {}
    for partition, records in decisions.items():
        prev, mine = None, out.setdefault(partition, [])
        for r in records:
            value, prev = carrying(r.value or b"", prev, alter)
            mine.append(LogRecord(r.topic, r.partition, r.offset, r.timestamp_ms, r.key, value))
    return out


def _referencing(decisions: Partitioned) -> list[tuple[bytes, bytes]]:
    """Each record that references its job, beside the same record in the old form."""
    old = carried_trail(decisions)
    return [
        (new.value or b"", was.value or b"")
        for p in decisions for new, was in zip(decisions[p], old[p], strict=True)
        if b'"%b"' % JOB_REF.encode() in (new.value or b"")
    ]  # fmt: skip


def test_duplicates_reference_the_job_they_met_unless_their_record_wrote_it_first(
    trail: Trail,
) -> None:
    _, decisions = trail
    pairs = _referencing(decisions)
    assert len(pairs) > 30
    for new, old in pairs:
        record = orjson.loads(new)
        assert "job" not in record and record["outcome"] in ("rejected", "ignored")
        assert seal_of(new, record, None) == SOUND
        assert len(new) < len(old) - len(orjson.dumps(orjson.loads(old)["job"])) + 64
    # A duplicate whose own record expired the job before reading it (a due lease) shows
    # the job it read, not the one its state carries as it found it: it carries `job`.
    carried = [
        r for p in decisions.values() for r in (orjson.loads(d.value or b"") for d in p)
        if r.get("outcome") in ("rejected", "ignored") and "digest" in r and r.get("job")
    ]  # fmt: skip
    assert carried and all(JOB_REF not in r for r in carried)


def test_a_trail_written_before_references_replays_as_it_did(
    log: RecordedLog, trail: Trail
) -> None:
    requests, decisions = trail
    limits = Limits(**log.limits)
    now = replay_requests(requests, decisions, limits)
    before = replay_requests(requests, carried_trail(decisions), limits)
    assert (before.differences, before.findings, before.unverifiable) == ([], [], {})
    assert before.verified == now.verified > 900 and before.different == 0


def test_a_job_altered_in_a_record_that_carries_it_is_a_difference(
    log: RecordedLog, trail: Trail
) -> None:
    requests, decisions = trail
    # Every job the records show is altered, each record sealed again and chained, as one
    # who rewrote the trail would: only the replay tells.
    forged = carried_trail(decisions, lambda job: job.replace(b'"priority":', b'"priority":1'))
    report = replay_requests(requests, forged, Limits(**log.limits))
    assert report.findings == []
    altered = {d.request_id for d in report.differences if d.field == "job"}
    assert report.different == len(altered) == len(_referencing(decisions))


def test_explain_and_the_history_route_tell_both_forms_alike(trail: Trail) -> None:
    _, decisions = trail
    for new, old in _referencing(decisions):
        referencing, carrying_it = orjson.loads(new), orjson.loads(old)
        assert job_shown(referencing) == carrying_it["job"] == job_shown(carrying_it)
        assert orjson.dumps(job_shown(referencing)) in old
        assert explain_record(referencing) == explain_record(carrying_it)
        items = [as_json(_item(r), "decisions") for r in (referencing, carrying_it)]
        assert items[0]["job"] == carrying_it["job"]
        assert {**items[0], "record": None} == {**items[1], "record": None}


def _item(record: dict[str, Any]) -> Item:
    return Item((0, 0), record, explain_record(record), 0)


def test_a_reference_that_names_nothing_carried_shows_no_job() -> None:
    too_large = {"digest": "00", "bytes": 9}
    record = {"unique_key": "k", "existing_job_state": "active", JOB_REF: "job/1",
              "state": {"before": [["k", "job/1", too_large, None]]}}  # fmt: skip
    assert job_shown(record) is None
    assert job_shown({**record, JOB_REF: "job/2"}) is None
    assert job_shown({**record, "state": None}) is None
    shown = {"id": "1", "state": "available", "route": "k", "partition": 0}
    found = {**record, "state": {"before": [["k", "job/1", shown, None]]}}
    assert job_shown(found) == {"id": "1", "state": "active"}
    assert job_shown({"job": {"id": "1"}}) == {"id": "1"}


def test_the_caller_s_reply_keeps_the_job_its_audit_record_names() -> None:
    gateway = Gateway()
    job = {"type": "mail", "args": [1], "unique": {"keys": ["type", "args"]}}
    gateway.send(job)
    gateway.send(job, **{REPLY_TO_HEADER: b"replies"})
    gateway.run()
    reply = next(orjson.loads(o.value or b"") for o in gateway.sent if o.topic == "replies")
    audit = gateway.decisions[-1]
    assert reply["outcome"] == audit["outcome"] == "rejected"
    assert JOB_REF not in reply and reply["job"] == job_shown(audit)
    assert audit[JOB_REF] == f"job/{reply['existing_job_id']}" and "job" not in audit


@settings(max_examples=300, deadline=None)
@given(
    ref=json_values,
    rows=st.lists(
        st.one_of(json_values, st.tuples(st.just("k"), json_values, json_values).map(list)),
        max_size=4,
    ),  # fmt: skip
    state=json_values,
)
def test_a_forged_reference_or_state_is_told_never_a_crash(ref: Any, rows: Any, state: Any) -> None:
    """A record as anyone could write it to the audit topic: explain and the history route
    tell it (the trail's check names it forged), whatever its reference and rows hold."""
    record = {"outcome": "rejected", "unique_key": "k", "existing_job_state": state,
              JOB_REF: ref, "kind": "request", "state": {"before": rows}}  # fmt: skip
    job_shown(record)
    as_json(_item(record), "decisions")
    job_shown({**record, "state": rows})
