"""The audit index: which routes a record names, positions kept per route with the offsets
read, and one key's history a page at a time from it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.audit import history
from gateway.audit.index import AuditIndex, DecisionAt, IndexUnavailable, named, open_index
from gateway.processor.state_identity import Identity
from gateway.stage.schedule import LEASES
from tests.unit import test_explain as processed

KEY = "a" * 64
OTHER = "b" * 64
JOB = "0199aaaa-0000-7000-8000-000000000001"
QUEUE = "\x00queue\x00default"


def request(job_id: str, key: str | None, outcome: str = "accepted", **more: Any) -> dict:
    route = key or job_id
    state = {
        "routes": [route],
        "before": [[route, "entries", None, None]],
        "jobs": [[job_id, None, "available"]] if outcome == "accepted" else [],
        "after": "0",
    }
    return {
        "kind": "request",
        "outcome": outcome,
        "unique_key": key,
        "job_id": job_id,
        "request_id": "r",
        "decided_at": "2026-01-01T00:00:00Z",
        "state": state,
        **more,
    }


def event(job_id: str, key: str) -> dict:
    job = {"id": job_id, "state": "available", "unique_key": key}
    what = {"job_id": job_id, "outcome": "applied", "previous_state": "available",
            "state": "active", "reason": None, "error": None}  # fmt: skip
    before = [[QUEUE, "queue", None, None], [key, f"job/{job_id}", job, None]]
    state = {"routes": [QUEUE, key], "before": before,
             "jobs": [[job_id, "available", "active"]], "after": "0"}  # fmt: skip
    return {"kind": "event", "at": "2026-01-01T00:00:01Z", "key": key, "what": what, "state": state}


def tick(job_id: str, key: str) -> dict:
    job = {"id": job_id, "state": "completed", "unique_key": key}
    state = {"routes": [key], "before": [[key, f"job/{job_id}", job, None]],
             "jobs": [[job_id, "completed", None]], "after": "0"}  # fmt: skip
    return {"kind": "tick", "at": "2026-01-01T00:00:02Z", "what": None, "state": state}


def test_a_record_names_its_routes_and_each_job_s_key():
    # A job with a unique key is found through its key; an event by its job's id too.
    assert named(event(JOB, KEY)) == ({KEY, QUEUE, JOB}, {JOB: KEY})
    assert named(tick(JOB, KEY)) == ({KEY}, {JOB: KEY})
    assert named(request(JOB, KEY)) == ({KEY}, {JOB: KEY})
    # A job without a unique key is its own route.
    assert named(request(JOB, None)) == ({JOB}, {})
    # Written before records carried state: its own fields name the key and the jobs.
    old = {"outcome": "replaced", "unique_key": KEY, "job_id": "new", "existing_job_id": JOB,
           "cancelled_job_ids": [JOB]}  # fmt: skip
    assert named(old) == ({KEY}, {"new": KEY, JOB: KEY})
    # Nothing a record could hold makes a route of a name no route can have.
    odd = {"state": {"routes": ["x" * 300, 5, None], "jobs": [["", None, None], "j", [7]]},
           "what": [1], "unique_key": {"no": 1}}  # fmt: skip
    assert named(odd) == (set(), {})


def values(*records: tuple[int, int, dict]) -> list[tuple[int, int, bytes | None]]:
    return [(p, o, orjson.dumps(r)) for p, o, r in records]


def test_positions_are_kept_per_route_in_log_order_with_the_offsets_read(tmp_path: Path):
    index = AuditIndex(tmp_path / "i")
    read = values((3, 7, event(JOB, KEY)), (3, 2, request(JOB, KEY)), (1, 0, request("j", OTHER)))
    index.add(read, {3: 8, 1: 1})
    index.add([(3, 8, b"not json"), (3, 9, None), (3, 10, b"[1]")], {3: 11, 1: 0})
    assert list(index.positions(KEY)) == [(3, 2), (3, 7)]
    assert list(index.positions(KEY, (3, 3))) == [(3, 7)]
    assert list(index.positions(JOB)) == [(3, 7)]  # the event; the key holds the rest
    assert list(index.positions("a")) == [] and list(index.positions(KEY[:-1])) == []
    assert index.unique_key(JOB) == KEY and index.unique_key("j") == OTHER
    assert index.unique_key(KEY) is None
    # An offset never goes back (a batch that read nothing new of partition 1).
    assert index.offsets() == {3: 11, 1: 1}
    index.close()
    again = AuditIndex(tmp_path / "i")
    assert again.offsets() == {3: 11, 1: 1} and list(again.positions(KEY)) == [(3, 2), (3, 7)]
    again.close()


def test_an_index_another_process_holds_is_refused_with_a_message(tmp_path: Path):
    held = AuditIndex(tmp_path / "i")
    with pytest.raises(IndexUnavailable, match=f"cannot open the audit index {tmp_path}/i: "):
        AuditIndex(tmp_path / "i")
    held.close()


def test_an_index_built_from_another_cluster_topic_or_layout_is_read_anew(tmp_path: Path):
    one = Identity("cluster-1", {"decisions": "topic-1"}, 1)
    index = open_index(tmp_path, one)
    index.add(values((0, 0, request(JOB, KEY))), {0: 1})
    index.close()
    index = open_index(tmp_path, one)
    assert index.offsets() == {0: 1}
    index.close()
    for other in (Identity("cluster-2", {"decisions": "topic-1"}, 1),
                  Identity("cluster-1", {"decisions": "topic-2"}, 1),
                  Identity("cluster-1", {"decisions": "topic-1"}, 2)):  # fmt: skip
        index = open_index(tmp_path, other)
        assert index.offsets() == {} and list(index.positions(KEY)) == []
        index.add(values((0, 0, request(JOB, KEY))), {0: 1})
        index.close()


class Log:
    """decisions as a reader finds it: some records, the first `start` offsets deleted."""

    def __init__(self, records: Mapping[DecisionAt, dict], start: int = 0) -> None:
        self.records, self.start = records, start
        self.asked: list[list[DecisionAt]] = []

    def read(self, positions: Sequence[DecisionAt]) -> tuple[dict, dict]:
        self.asked.append(list(positions))
        found = {p: orjson.dumps(self.records[p]) if p[1] >= self.start else None
                 for p in positions}  # fmt: skip
        return found, {p: self.start for p, _ in positions}


@pytest.fixture
def filled(tmp_path: Path) -> Any:
    records = {(0, 4 * n): request(f"j{n}", KEY, "accepted" if n == 0 else "rejected")
               for n in range(5)}  # fmt: skip
    records[(0, 1)] = event("j0", KEY)
    records[(0, 2)] = request("lone", None)
    index = AuditIndex(tmp_path / "i")
    index.add(values(*((p, o, r) for (p, o), r in sorted(records.items()))), {0: 17})
    yield index, Log(records)
    index.close()


def test_a_key_s_history_is_read_a_page_at_a_time_and_only_its_records(filled: Any):
    index, log = filled
    page = history.page(index, KEY, (0, 0), 4, log.read)
    assert page is not None and page.unique_key == KEY and page.next == (0, 12)
    assert [i.position for i in page.items] == [(0, 0), (0, 1), (0, 4), (0, 8)]
    assert log.asked == [[(0, 0), (0, 1), (0, 4), (0, 8)]]  # never (0, 2), another job's
    assert [i.told.kind for i in page.items if i.told] == ["request", "event", "request", "request"]
    rest = history.page(index, KEY, page.next, 4, log.read)
    assert rest is not None and rest.next is None
    assert [i.position for i in rest.items] == [(0, 12), (0, 16)]
    # A job's id finds its key's history; a job without a key has its own.
    by_job = history.page(index, "j0", (0, 0), 100, log.read)
    assert by_job is not None and by_job.unique_key == KEY and len(by_job.items) == 6
    lone = history.page(index, "lone", (0, 0), 100, log.read)
    assert lone is not None and lone.unique_key is None and len(lone.items) == 1
    assert history.page(index, KEY.upper(), (0, 0), 1, log.read) is not None
    assert history.page(index, "nobody", (0, 0), 1, log.read) is None


def test_a_record_the_log_no_longer_holds_is_said_to_be_gone(filled: Any):
    index, log = filled
    log.start = 2
    page = history.page(index, KEY, (0, 0), 3, log.read)
    assert page is not None
    gone = page.items[0]
    assert gone.record is None and gone.told is None
    assert history.gone(gone, "d") == (
        "the audit record at d[0]@0 is gone: the topic's retention deleted it (the partition "
        "now starts at offset 2)"
    )
    answered = history.as_json(gone, "d")
    assert answered["record"] is None and answered["kind"] is None
    assert answered["reason"].startswith("the audit record at d[0]@0 is gone")
    shown = history.as_json(page.items[2], "d")
    assert shown["position"] == {"topic": "d", "partition": 0, "offset": 4}
    assert shown["kind"] == "request" and shown["outcome"] == "rejected"


@pytest.mark.parametrize(
    ("key", "problem"),
    [("", "is empty"), ("x" * 256, "longer than 255 bytes"), ("é" * 128, "longer than 255"),
     ("a\x00b", "control character"), ("\udcff", "control character"),
     ("a\ufffd", "not UTF-8")],
)  # fmt: skip
def test_a_key_no_route_can_have_is_refused(key: str, problem: str):
    assert problem in (history.key_problem(key) or "")


def test_cursors_are_positions_in_plain_digits():
    assert history.parse_cursor("3:1042") == (3, 1042)
    assert history.format_cursor((3, 1042)) == "3:1042"
    for bad in ("", "3", "3:", "-1:2", "01:2", "3:1_000", "3:٣", "3:2:1", "x" * 5000):
        assert isinstance(history.parse_cursor(bad), str), bad
    assert "beyond" in str(history.parse_cursor(f"{2**31}:0"))


def test_the_records_the_processor_writes_index_a_job_under_its_key(tmp_path: Path):
    T0 = processed.T0
    log = processed.Log()
    first = log.request(processed.job(), T0)
    log.event(first, T0 + 1, type="job.started", visibility_timeout_ms=1_000)
    log.tick(LEASES.seen_at(T0 + 1_001))
    log.request(processed.job(), T0 + 2_000)
    lone = log.request({"type": "t", "args": [], "id": "0199ffff-0000-7000-8000-000000000001"},
                       T0 + 2_001)  # fmt: skip
    records = [o.value for o in log.out if o.role == "decisions"]
    index = AuditIndex(tmp_path / "i")
    index.add([(0, n, v) for n, v in enumerate(records)], {0: len(records)})
    key, jid = first["unique_key"], first["job_id"]
    assert index.unique_key(jid) == key
    assert list(index.positions(key)) == [(0, 0), (0, 1), (0, 2), (0, 3)]
    # Its id is a route where a record read it (its home, its event); the rest via its key.
    assert list(index.positions(jid)) == [(0, 0), (0, 1)]
    assert history.routes_of(index, jid) == (key, [key, jid])
    assert history.routes_of(index, lone["job_id"]) == (None, [lone["job_id"]])
    index.close()
