"""Finished jobs leave `job_states` with a tombstone when they leave the processor's store."""

from __future__ import annotations

from typing import Any

import orjson

from gateway.core import DEFAULT_RETENTION_MS
from gateway.processor.metrics import Metrics
from gateway.stage.dedup import Dedup
from gateway.stage.parsing import Limits
from gateway.stage.records import Output, Source
from gateway.stage.schedule import TOMBSTONES
from gateway.wire import CLAIMED_ID_HEADER, ID_CLAIM_HEADER, ID_CLAIMED, JOB_EVENT, KIND_HEADER
from tests.memory_store import Store

T0 = 1_770_000_000_000
RETENTION = DEFAULT_RETENTION_MS
JOB_ID = "019b0a4c-1f00-7000-8000-000000000001"


class Partition:
    """One partition's log through the processor's own code, over an in-memory store."""

    def __init__(self) -> None:
        self.out: list[Output] = []
        self.store = Store()
        self.offset = 0
        self.dedup = Dedup(
            1, lambda o, _: self.out.append(o), Metrics(), Limits(),
            lambda _, key: self.store.state(key),
        )  # fmt: skip

    def record(self, value: dict[str, Any], at: int, event: bool = False) -> list[Output]:
        # A request's client id as its home sends it on: claimed for this route.
        claimed = {ID_CLAIM_HEADER: ID_CLAIMED, CLAIMED_ID_HEADER: str(value.get("id")).encode()}
        headers = {KIND_HEADER: JOB_EVENT} if event else claimed
        key = str(value.get("job_id") or value.get("id")).encode()
        self.store.at(at)
        before = len(self.out)
        source = Source("requests", 0, self.offset, at, headers)
        self.dedup.on_record(orjson.dumps(value), key, source, self.store.state(key))
        self.offset += 1
        return self.out[before:]

    def job(self, job_id: str, at: int) -> None:
        self.record({"type": "report.build", "args": [], "id": job_id}, at)

    def complete(self, job_id: str, at: int) -> None:
        for event in ("job.started", "job.completed"):
            self.record({"job_id": job_id, "type": event}, at, event=True)


def tombstones(outputs: list[Output]) -> list[bytes | None]:
    return [o.key for o in outputs if o.role == "job_states" and o.value is None]


def states(outputs: list[Output]) -> list[str]:
    return [orjson.loads(o.value)["state"] for o in outputs if o.role == "job_states" and o.value]


def test_a_finished_job_gets_its_tombstone_once_time_passes_its_expiry() -> None:
    log = Partition()
    log.job(JOB_ID, T0)
    log.complete(JOB_ID, T0 + 1_000)
    gone = T0 + 1_000 + RETENTION
    other = "019b0a4c-1f00-7000-8000-0000000000ff"
    # Until the expiry's bucket has ended, nothing; then exactly one tombstone.
    assert tombstones(log.record({"type": "t", "args": [], "id": other}, gone - 1)) == []
    next_bucket = (gone // TOMBSTONES.bucket_ms + 1) * TOMBSTONES.bucket_ms
    assert tombstones(log.record({"job_id": other, "type": "job.started"}, next_bucket, True)) == [
        JOB_ID.encode()
    ]
    later = next_bucket + 10 * TOMBSTONES.bucket_ms
    assert tombstones(log.record({"job_id": other, "type": "job.completed"}, later, True)) == []


def test_a_live_job_never_gets_a_tombstone() -> None:
    log = Partition()
    log.job(JOB_ID, T0)
    log.record({"job_id": JOB_ID, "type": "job.started"}, T0 + 1, event=True)
    assert (
        tombstones(log.record({"job_id": "x", "type": "job.started"}, T0 + 30 * RETENTION, True))
        == []
    )


def test_an_id_taken_again_after_its_expiry_keeps_the_new_job() -> None:
    log = Partition()
    log.job(JOB_ID, T0)
    log.complete(JOB_ID, T0 + 1_000)
    # The old record is gone from the store at its expiry; the id is free, and a new
    # job takes it before the schedule's bucket ends: no tombstone may remove it.
    freed = T0 + 1_000 + RETENTION
    assert states(log.record({"type": "report.build", "args": [], "id": JOB_ID}, freed)) == [
        "available"
    ]
    assert (
        tombstones(
            log.record(
                {"job_id": "x", "type": "job.started"}, freed + 2 * TOMBSTONES.bucket_ms, True
            )
        )
        == []
    )


def test_a_long_idle_partition_sweeps_its_backlog_over_several_records() -> None:
    log = Partition()
    ids = [f"019b0a4c-1f00-7000-8000-{i:012x}" for i in range(3)]
    for n, job_id in enumerate(ids):
        log.job(job_id, T0)
        # Each job's expiry falls two days apart.
        log.complete(job_id, T0 + n * 2 * 86_400_000)
    far = T0 + 30 * RETENTION
    swept: list[bytes | None] = []
    for i in range(10):
        swept += tombstones(log.record({"job_id": "x", "type": "job.started"}, far + i, True))
    assert swept == [i.encode() for i in ids]


def test_what_a_schedule_is_known_to_hold_follows_the_store() -> None:
    """The memo that spares a record the schedule reads is exact: it keeps only what a
    handling that succeeded saw, reads again once an entry is added, and starts over when
    the epoch changes (the stores' epoch: a rebalance, an abandoned transaction)."""
    from gateway.stage.schedule import Known

    epoch = [object()]
    known = Known(lambda: epoch[0])
    assert not known.nothing_due(TOMBSTONES, 0, T0)  # nothing known: read the store
    known.saw(TOMBSTONES, 0, None)
    known.settle(False)  # the handling failed: what it saw is not kept
    assert not known.nothing_due(TOMBSTONES, 0, T0)
    known.saw(TOMBSTONES, 0, None)
    known.settle(True)
    assert known.nothing_due(TOMBSTONES, 0, T0)  # never scheduled: nothing can be due
    assert not known.nothing_due(TOMBSTONES, 1, T0)  # another partition: unknown
    known.forget(TOMBSTONES, 0)  # an entry is added in this handling
    assert not known.nothing_due(TOMBSTONES, 0, T0)
    known.settle(True)
    assert not known.nothing_due(TOMBSTONES, 0, T0)
    bucket = T0 // TOMBSTONES.bucket_ms
    known.saw(TOMBSTONES, 0, bucket)
    known.settle(True)
    assert known.nothing_due(TOMBSTONES, 0, T0)
    assert not known.nothing_due(TOMBSTONES, 0, T0 + TOMBSTONES.bucket_ms)  # a bucket ended
    epoch[0] = object()  # a rebalance: the store may be another's now
    assert not known.nothing_due(TOMBSTONES, 0, T0)
