"""The audit trail verifies itself: the recorded differential log, decided by the processor's
stages (with a crash halfway), replays against its own audit records with no difference,
from its start or from any later window, and a missing, altered or reordered audit record
is reported as such, by position.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import orjson
import pytest

from gateway.audit.account import Span, Trail
from gateway.audit.findings import (
    BEFORE_TRAIL,
    BEFORE_WINDOW,
    INPUT_GONE,
    Difference,
    Finding,
    Position,
    ReplayReport,
)
from gateway.audit.log import LogRecord
from gateway.audit.replay import PartitionReplay, intake_audits, replay_intake
from gateway.audit.trail_store import TrailStore
from gateway.audit.verify import Layout
from gateway.cli.replay import verdict
from gateway.stage.parsing import Limits
from tests import differential_log as recorded
from tests.differential_log import Out, RecordAt, RecordedLog
from tests.support import validator
from tests.unit.test_differential import DATA, decide_log

Partitioned = dict[int, list[LogRecord]]
PARTITIONS = 8  # of requests, in the recorded log
LAYOUT = Layout("gateway.requests", "gateway.intake", PARTITIONS)


@pytest.fixture(scope="module")
def log() -> RecordedLog:
    return recorded.load(DATA)


@pytest.fixture(scope="module")
def trail(log: RecordedLog) -> tuple[Partitioned, Partitioned]:
    """Each partition's requests records, and its decisions as the processor wrote them."""
    outputs = decide_log(log, Limits(**log.limits))
    return _inputs(log, "requests"), _decisions(log, outputs)


def _inputs(log: RecordedLog, role: str) -> Partitioned:
    out: Partitioned = {}
    for r in sorted(log.records, key=lambda r: r.position):
        if r.role == role:
            out.setdefault(r.partition, []).append(LogRecord(
                log.topics[role], r.partition, r.offset, r.timestamp_ms, r.key, r.value,
                dict(r.headers),
            ))  # fmt: skip
    return out


def _decisions(log: RecordedLog, outputs: dict[RecordAt, list[Out]]) -> Partitioned:
    """The audit records on `decisions`, each on its source's partition, in handling order."""
    out: Partitioned = {}
    for role in ("intake", "requests"):
        for r in sorted((r for r in log.records if r.role == role), key=lambda r: r.position):
            for out_role, _, key, value, _ in outputs[r.position]:
                if out_role == "decisions":
                    part = out.setdefault(r.partition, [])
                    part.append(LogRecord("decisions", r.partition, len(part), 0, key, value))
    return out


def replay_requests(
    requests: Partitioned, decisions: Partitioned, limits: Limits, opened: bool = False
) -> ReplayReport:
    """`opened`: the requests read start at --from, not where each partition starts."""
    report = ReplayReport()
    for partition, records in sorted(requests.items()):
        with _store() as store:
            replay = PartitionReplay(PARTITIONS, limits, store, report)
            trail = Trail(partition, LAYOUT, report)
            span = Span(records[0].offset, records[-1].offset + 1, opened=opened)
            replay.run(records, trail, decisions.get(partition, []), span)
    return report


@contextmanager
def _store() -> Iterator[TrailStore]:
    with tempfile.TemporaryDirectory() as root:
        store = TrailStore(Path(root) / "replay")
        try:
            yield store
        finally:
            store.close()


def test_the_whole_log_replays_identically_record_by_record(
    log: RecordedLog, trail: tuple[Partitioned, Partitioned]
) -> None:
    requests, decisions = trail
    report = replay_requests(requests, decisions, Limits(**log.limits))
    assert (report.differences, report.findings) == ([], [])
    assert report.different == 0 and not report.unverifiable
    # Every decision and every other record that changed state was decided again.
    kinds = [orjson.loads(d.value or b"")["kind"] for p in decisions.values() for d in p
             if b'"topic":"gateway.requests"' in (d.value or b"")]  # fmt: skip
    assert report.verified == len(kinds) > 900
    assert {"request", "event", "tick", "forwarded", "id_report"} <= set(kinds)


def test_intake_decisions_replay_identically(
    log: RecordedLog, trail: tuple[Partitioned, Partitioned]
) -> None:
    _, decisions = trail
    report = ReplayReport()
    for partition, records in sorted(_inputs(log, "intake").items()):
        mine = intake_audits(decisions.get(partition, []), records[0].topic, partition)
        replay_intake(records, mine, Limits(**log.limits), report)
    assert report.verified > 0 and report.different == 0 and report.differences == []


@pytest.mark.parametrize("gone", [(0.5, 0.5), (0.2, 0.6), (0.7, 0.3), (0.95, 0.9), (0.01, 0.02)])
def test_a_window_whose_start_is_gone_replays_from_the_state_its_records_carry(
    log: RecordedLog, trail: tuple[Partitioned, Partitioned], gone: tuple[float, float]
) -> None:
    requests, decisions = trail
    # The first part of every partition of requests and of decisions is gone.
    later = {p: r[int(len(r) * gone[0]) :] for p, r in requests.items()}
    kept = {p: d[int(len(d) * gone[1]) :] for p, d in decisions.items()}
    report = replay_requests(later, kept, Limits(**log.limits))
    assert (report.differences, report.findings) == ([], [])
    assert set(report.unverifiable) <= {BEFORE_TRAIL, INPUT_GONE}
    # Of the audit records that remain beside their input, 95% at least are decided again
    # (those before each partition's first surviving audit record are not: nothing says
    # what state they were decided from).
    remaining = sum(
        1 for p, audits_of in kept.items() for d in audits_of
        if b'"topic":"gateway.requests"' in (d.value or b"")
        and orjson.loads(d.value or b"")["source"]["offset"] >= later[p][0].offset
    )  # fmt: skip
    assert report.verified >= 0.95 * remaining


def test_a_window_from_the_middle_of_a_whole_log_checks_it_all_and_names_its_context(
    log: RecordedLog, trail: tuple[Partitioned, Partitioned]
) -> None:
    requests, decisions = trail
    later = {p: r[len(r) // 2 :] for p, r in requests.items()}
    report = replay_requests(later, decisions, Limits(**log.limits), opened=True)
    assert (report.differences, report.findings) == ([], [])
    # Every audit record of an input before the window is its context, none a failure.
    assert set(report.unverifiable) == {BEFORE_WINDOW} and report.unchecked() == Counter()
    before = sum(
        1 for p, audits_of in decisions.items() for d in audits_of
        if b'"topic":"gateway.requests"' in (d.value or b"")
        and orjson.loads(d.value or b"")["source"]["offset"] < later[p][0].offset
    )  # fmt: skip
    assert report.context() == Counter({BEFORE_WINDOW: before})
    assert verdict(report).startswith("result: nothing wrong found: every decision")


def test_the_last_line_says_whether_anything_is_wrong() -> None:
    position = ("gateway.requests", 0, 7)
    report = ReplayReport(verified=3, unverifiable=Counter({INPUT_GONE: 2, BEFORE_WINDOW: 5}))
    assert verdict(report).startswith("result: nothing wrong found; 2 records could not be")
    report.different = 1
    report.differences.append(Difference("r", position, "outcome", "a", "b"))
    report.findings.append(Finding("missing", position, "gone"))
    assert verdict(report) == (
        "result: WRONG: 1 decided differently, 1 problems in the audit trail (exit 1)"
    )


def _audits_of(decisions: Partitioned, partition: int) -> list[LogRecord]:
    return [d for d in decisions[partition] if b'"topic":"gateway.requests"' in (d.value or b"")]


def _busiest(decisions: Partitioned) -> int:
    return max(decisions, key=lambda p: len(_audits_of(decisions, p)))


def test_a_missing_audit_record_is_reported_by_position_and_nothing_else(
    log: RecordedLog, trail: tuple[Partitioned, Partitioned]
) -> None:
    requests, decisions = trail
    partition = _busiest(decisions)
    mine = _audits_of(decisions, partition)
    gone = mine[len(mine) // 2]
    source = orjson.loads(gone.value or b"")["source"]
    report = replay_requests(
        {partition: requests[partition]}, {partition: [d for d in mine if d is not gone]},
        Limits(**log.limits),
    )  # fmt: skip
    assert report.differences == []
    assert {(f.kind, f.position) for f in report.findings} == {
        ("missing", ("gateway.requests", partition, source["offset"])),
        ("missing", _after(mine, gone)),
    }


def test_an_altered_audit_record_is_reported_by_position_and_nothing_else(
    log: RecordedLog, trail: tuple[Partitioned, Partitioned]
) -> None:
    requests, decisions = trail
    partition = _busiest(decisions)
    mine = list(_audits_of(decisions, partition))
    for i in range(len(mine) // 2, len(mine)):
        if b'"outcome":"rejected"' in (mine[i].value or b""):
            break
    was = mine[i]
    changed = (was.value or b"").replace(b'"outcome":"rejected"', b'"outcome":"accepted"')
    mine[i] = LogRecord(was.topic, was.partition, was.offset, 0, was.key, changed)
    report = replay_requests({partition: requests[partition]}, {partition: mine},
                             Limits(**log.limits))  # fmt: skip
    assert report.differences == []
    assert [(f.kind, f.position) for f in report.findings] == [("altered", was.position)]


def test_reordered_audit_records_are_reported(
    log: RecordedLog, trail: tuple[Partitioned, Partitioned]
) -> None:
    requests, decisions = trail
    partition = _busiest(decisions)
    mine = list(_audits_of(decisions, partition))
    i = len(mine) // 2
    mine[i], mine[i + 1] = mine[i + 1], mine[i]
    report = replay_requests({partition: requests[partition]}, {partition: mine},
                             Limits(**log.limits))  # fmt: skip
    assert report.differences == []
    assert {f.kind for f in report.findings} <= {"reordered", "missing"}
    assert any(f.kind == "reordered" for f in report.findings)


def _after(mine: list[LogRecord], gone: LogRecord) -> Position:
    following = mine[mine.index(gone) + 1]
    return following.position


def test_a_record_no_input_of_the_partition_writes_is_named_not_replayed() -> None:
    report = ReplayReport()
    elsewhere = b'{"source":{"topic":"gateway.requests","partition":1,"offset":2}}'
    nobody = b'{"source":{"topic":"t","partition":0,"offset":2}}'
    records = [LogRecord("d", 0, n, 0, None, v) for n, v in enumerate([elsewhere, nobody, b"[1"])]
    assert list(Trail(0, LAYOUT, report).audits(records)) == []
    assert [(f.kind, f.position) for f in report.findings] == [
        ("misplaced", ("d", 0, 0)), ("misplaced", ("d", 0, 1)), ("unreadable", ("d", 0, 2)),
    ]  # fmt: skip
    assert "are written to partition 1" in report.findings[0].detail
    assert "no record of gateway.requests or gateway.intake" in report.findings[1].detail


def test_every_audit_record_fits_the_decisions_schema(
    trail: tuple[Partitioned, Partitioned],
) -> None:
    audit = validator("audit.json")
    _, decisions = trail
    kinds: Counter[str] = Counter()
    for records in decisions.values():
        for record in records:
            value = orjson.loads(record.value or b"")
            audit.validate(value)
            kinds[value.get("kind", "intake")] += 1
    assert {"request", "event", "tick", "forwarded", "id_report", "intake"} <= set(kinds)
