"""A rewrite changes nothing but cost: a recorded log decided by the current code gives, record
by record, byte-identical outputs (decisions with their audit trail, job records, rejections,
cancellations, replies, forwards, id reports, dead letters) to those the code at the commit
meta.json names gave, and leaves the same stores, the audit chain's head included.

The log and its golden outputs are in tests/data/differential; tests/differential_log.py
says what the log holds and how both were made.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

import pytest

from gateway.catalogue import Catalogue, TopicSpec
from gateway.processor.metrics import Metrics
from gateway.processor.stages import Stages, Stores
from gateway.processor.store import PartitionStore
from gateway.stage.parsing import Limits
from gateway.stage.records import Output, Source
from tests import differential_log as recorded
from tests.differential_log import Out, Record, RecordAt, RecordedLog, StoreContents
from tests.support import Consumed, MemoryTransaction, changelogged, commit_stores

# -- the driver: the one place that says which code decides the log -------------------------

# The loop commits every so many records; halfway through, the runtime "crashes": its
# stores are deleted and restored from the changelog its commits wrote.
COMMIT_EVERY = 40


def decide_log(
    log: RecordedLog, limits: Limits, states: StoreContents | None = None
) -> dict[RecordAt, list[Out]]:
    """Every output the processor's stages emit for each input record, in order.

    The processor's own stages (gateway/processor/stages.py) over real RocksDB stores,
    each partition's records in offset order. Every COMMIT_EVERY records the stores commit
    as the loop commits them (gateway/processor/task.py: expired values swept, changes to a
    changelog, here in memory, then the store's batch); halfway the stores are deleted and
    restored from that changelog, as a successor would after a crash, and the records since
    the last commit are decided again (their outputs are those of the second time).
    `states`, if given, receives each store's live contents once the log is decided.
    """
    outputs: dict[RecordAt, list[Out]] = {}
    current: list[Out] = []

    def emit(output: Output, _source: Source) -> None:
        current.append(recorded.output_of(output))

    catalogue = Catalogue(
        tuple(TopicSpec(role, log.topics[role], count, 1) for role, count in log.partitions.items())
    )
    root = Path(tempfile.mkdtemp(prefix="differential-"))
    stores = Stores(root)
    stages = Stages(catalogue, emit, Metrics(), limits, stores)
    changelogs = MemoryTransaction()

    def commit() -> None:
        commit_stores(stores.open, changelogs)

    def crash_and_restore() -> None:
        stores.close(list(stores.open))
        shutil.rmtree(root / "requests", ignore_errors=True)
        for (role, partition), changelog in changelogs.logs.items():
            stores.get(role, partition).restore(changelogged(changelog))

    records = sorted(log.records, key=lambda r: r.position)
    crash, n = len(records) // 2, 0
    try:
        while n < len(records):
            record = records[n]
            current = outputs[record.position] = []
            stages.handle([_consumed(record, log.topics[record.role])])
            n += 1
            if n % COMMIT_EVERY == 0:
                commit()
            elif n == crash:
                # Uncommitted: the successor decides these records again, from the last commit.
                crash_and_restore()
                n, crash = n - n % COMMIT_EVERY, -1
        commit()
        if states is not None:
            states.update(_live(stores.open))
    finally:
        stores.close(list(stores.open))
        shutil.rmtree(root, ignore_errors=True)
    return outputs


def _consumed(record: Record, topic: str) -> Consumed:
    return Consumed(
        topic, record.partition, record.offset, record.timestamp_ms, record.key, record.value,
        list(record.headers) or None,
    )  # fmt: skip


def _live(stores: dict[tuple[str, int], PartitionStore]) -> StoreContents:
    return {where: sorted(store.live()) for where, store in sorted(stores.items())}


# -- the comparison ---------------------------------------------------------------------------

DATA = Path(__file__).resolve().parents[1] / "data" / "differential"


@pytest.fixture(scope="module")
def log() -> RecordedLog:
    return recorded.load(DATA)


@pytest.fixture(scope="module")
def decided(log: RecordedLog) -> tuple[dict[RecordAt, list[Out]], StoreContents]:
    states: StoreContents = {}
    return decide_log(log, Limits(**log.limits), states), states


def test_the_current_code_decides_every_record_as_the_recording_code_did(
    log: RecordedLog, decided: tuple[dict[RecordAt, list[Out]], StoreContents]
) -> None:
    outputs, _ = decided
    assert len(log.records) == log.meta["records"] > 1_000
    for record in log.records:  # by topic role, partition and offset
        want, got = log.outputs[record.position], outputs[record.position]
        if got != want:
            pytest.fail(_first_difference(record, want, got), pytrace=False)
    assert outputs.keys() == log.outputs.keys()


def test_the_stores_end_as_they_did(
    log: RecordedLog, decided: tuple[dict[RecordAt, list[Out]], StoreContents]
) -> None:
    _, states = decided
    assert states.keys() == log.stores.keys()
    for where, want in log.stores.items():
        got = states[where]
        if got != want:
            only_want, only_got = sorted(set(want) - set(got)), sorted(set(got) - set(want))
            pytest.fail(
                f"store {where}: recorded only {only_want[:1]}, decided only {only_got[:1]}",
                pytrace=False,
            )


# Every outcome and event result the processor can give, and what time alone does.
COVERED = [
    *(f"decision {o}" for o in ("accepted", "rejected", "ignored", "replaced", "updated")),
    "decision invalid",
    *(f"dialect {d}" for d in ("ojs", "oban", "oban-py", "zizq", "faktory", "unknown")),
    "error invalid invalid_request",
    "error invalid payload_too_large",
    "error rejected duplicate",
    "error rejected NOTUNIQUE",
    "event applied",
    "event ignored unknown_job",
    "event ignored unchanged",
    "event refused not_allowed",
    "event refused already_terminal",
    "event invalid invalid_event",
    "event invalid payload_too_large",
    *(f"job {s}" for s in recorded.ALL_STATES),
    "job tombstone",
    "tick retryable",
    "tick discarded",
    "tick tombstone",
    # Records that are no request but read or changed state leave an audit record of their own.
    *(f"audit {k}" for k in ("event", "tick", "forwarded", "id_report")),
    # (A dead letter is the processor failing on a record, a bug: no record of the log
    # makes one; tests/unit/test_total.py makes the processor fail on purpose.)
    *(f"output {r}" for r in ("cancellations", "rejections", "reply")),
    *(f"output {r}" for r in ("intake", "requests")),
    "input intake request",
    "input job_events request",
    "input requests id_report",
    "input requests request",
    "input requests job_event",
    "input requests tick",
]


def test_the_log_covers_every_outcome_and_event_result(log: RecordedLog) -> None:
    counts = recorded.coverage(log)
    assert [name for name in COVERED if not counts[name]] == []
    assert dict(sorted(counts.items())) == log.meta["coverage"]


def test_the_log_speaks_the_wire_the_code_speaks() -> None:
    from gateway import wire

    assert (recorded.KIND, recorded.JOB_EVENT, recorded.TICK, recorded.ID_REPORT) == (
        wire.KIND_HEADER,
        wire.JOB_EVENT,
        wire.TICK,
        wire.ID_REPORT,
    )
    assert (recorded.ID_CLAIM, recorded.CLAIMED, recorded.CLAIMED_ID) == (
        wire.ID_CLAIM_HEADER,
        wire.ID_CLAIMED,
        wire.CLAIMED_ID_HEADER,
    )
    assert recorded.TICK_KEY == wire.TICK_KEY


def _first_difference(record: recorded.Record, want: list[Out], got: list[Out]) -> str:
    at = next(
        (i for i, (w, g) in enumerate(zip(want, got, strict=False)) if w != g),
        min(len(want), len(got)),
    )
    return (
        f"input {record.position} (role {record.role}, t={record.timestamp_ms}, "
        f"key {_text(record.key)}, headers {_pairs(record.headers)}):\n"
        f"  value    {_text(record.value)}\n"
        f"  output #{at} of {len(want)} recorded / {len(got)} decided\n"
        f"  recorded {_show(want[at] if at < len(want) else None)}\n"
        f"  decided  {_show(got[at] if at < len(got) else None)}"
    )


def _show(out: Out | None) -> str:
    if out is None:
        return "(none)"
    role, topic, key, value, headers = out
    return (
        f"to {role or 'topic ' + str(topic)}, key {_text(key)}, "
        f"headers {_pairs(headers or ())}, value {_text(value)}"
    )


def _pairs(headers: Iterable[tuple[str, bytes]]) -> str:
    return "[" + ", ".join(f"{name}={_text(value)}" for name, value in headers) + "]"


def _text(data: bytes | None) -> str:
    return "None" if data is None else repr(data.decode(errors="backslashreplace")[:4_000])
