"""Restoring a store a chunk at a time reaches, byte for byte, the state the runtime's
one-record-at-a-time restore reaches, and a restore killed mid-way leaves the store at a
chunk's edge: exactly the records up to its changelog offset."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, cast

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from quixstreams.models.types import SuccessfulConfluentKafkaMessageProto
from quixstreams.state.metadata import (
    CHANGELOG_CF_MESSAGE_HEADER,
    CHANGELOG_PROCESSED_OFFSETS_MESSAGE_HEADER,
    CHANGELOG_TTL_STAMPED_HEADER,
    TTL_MIGRATION_DONE_KEY,
    TTL_SYSTEM_CF_NAME,
)
from quixstreams.state.recovery import RecoveryPartition
from quixstreams.state.rocksdb import RocksDBOptions
from quixstreams.state.rocksdb.partition import RocksDBStorePartition
from rocksdict import AccessType, Options, Rdict

from gateway.processor import quix
from gateway.processor.app import NEVER

SOURCE = "ns.gateway.requests"
COMMITTED = 10  # the source offset committed with the changelog


class Record:
    """A changelog record as the consumer hands it over."""

    def __init__(self, offset: int, key: bytes | None, value: bytes | None, headers: list) -> None:
        self._offset, self._key, self._value, self._headers = offset, key, value, headers

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def headers(self) -> list:
        return self._headers

    def topic(self) -> str:
        return "changelog"

    def partition(self) -> int:
        return 0


def store(path: Path) -> RocksDBStorePartition:
    return RocksDBStorePartition(str(path), options=RocksDBOptions(legacy_records_ttl=NEVER))


def recovering(partition: RocksDBStorePartition) -> RecoveryPartition:
    return RecoveryPartition("changelog", 0, partition, {SOURCE: COMMITTED}, 0, 1 << 40)


def contents(path: Path) -> dict[str, list[tuple[bytes, bytes]]]:
    db = Rdict(str(path), Options(raw_mode=True), access_type=AccessType.read_only())
    try:
        return {
            # Raw mode: every key and value is bytes (the stubs allow any key type).
            name: cast(list[tuple[bytes, bytes]], list(db.get_column_family(name).items()))
            for name in sorted(Rdict.list_cf(str(path)))
        }
    finally:
        db.close()


def one_by_one(partition: RocksDBStorePartition, records: list[Record]) -> Exception | None:
    """The runtime's own restore: its error, if a record makes it fail."""
    restore = recovering(partition)
    try:
        for record in records:
            # The fake has what the restore reads of a message, not all the protocol names.
            message = cast(SuccessfulConfluentKafkaMessageProto, record)
            restore.recover_from_changelog_message(changelog_message=message)
    except Exception as exc:  # noqa: BLE001 - the same failure is expected of the chunks
        return exc
    return None


def in_chunks(
    partition: RocksDBStorePartition, records: list[Record], cuts: list[int]
) -> Exception | None:
    restore = recovering(partition)
    try:
        start = 0
        for end in [*sorted(set(cuts)), len(records)]:
            quix.apply_changelog(restore, records[start:end])
            start = max(start, end)
    except Exception as exc:  # noqa: BLE001
        return exc
    return None


def _headers(cf: bytes | None, processed: bytes | None, stamped: bytes | None) -> list:
    named = (
        (CHANGELOG_CF_MESSAGE_HEADER, cf),
        (CHANGELOG_PROCESSED_OFFSETS_MESSAGE_HEADER, processed),
        (CHANGELOG_TTL_STAMPED_HEADER, stamped),
    )
    return [(name, value) for name, value in named if value is not None]


# Mostly plain records; now and then a stamped one, another column family, the stamps'
# own system record, or one the runtime refuses (no column family, no key). None leaves
# a header out.
ANY_ROW = st.tuples(
    st.sampled_from([b"a|x", b"b|x", b"c|y", b"d|y"] * 15 + [None]),
    st.one_of(st.none(), st.binary(min_size=0, max_size=24)),
    st.builds(
        _headers,
        st.sampled_from(
            [b"default"] * 30 + [b"other"] * 3 + [TTL_SYSTEM_CF_NAME.encode(), b"", None]
        ),
        st.one_of(
            st.none(),
            st.just(b"null"),
            st.integers(0, 2 * COMMITTED).map(lambda n: json.dumps({SOURCE: n}).encode()),
        ),
        st.sampled_from([None] * 5 + [b"", b"1"]),
    ),
)
MARKER = st.just((TTL_MIGRATION_DONE_KEY, b"", _headers(TTL_SYSTEM_CF_NAME.encode(), None, None)))
RECORDS = st.lists(st.one_of(*[ANY_ROW] * 15, MARKER), max_size=40).map(
    lambda rows: [Record(offset, *row) for offset, row in enumerate(rows)]
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=RECORDS,
    cuts=st.lists(st.integers(0, 40), max_size=5),
    cap=st.sampled_from([quix.RESTORE_BATCH_BYTES, 1, 40]),
)
def test_chunks_reach_the_state_of_the_runtimes_one_by_one_restore(records, cuts, cap):
    # Stamped records switch a store to expiry stamps; records without a column family
    # or a key make the runtime fail, and must make the chunks fail alike.
    with tempfile.TemporaryDirectory() as tmp:
        theirs, ours = store(Path(tmp, "theirs")), store(Path(tmp, "ours"))
        default, quix.RESTORE_BATCH_BYTES = quix.RESTORE_BATCH_BYTES, cap  # batches cut by size
        try:
            failed_theirs = one_by_one(theirs, records)
            failed_ours = in_chunks(ours, records, cuts)
            assert type(failed_ours) is type(failed_theirs)
            assert ours.uses_ttl_stamps == theirs.uses_ttl_stamps
            assert ours.get_changelog_offset() == theirs.get_changelog_offset()
        finally:
            quix.RESTORE_BATCH_BYTES = default
            theirs.close()
            ours.close()
        assert contents(Path(tmp, "ours")) == contents(Path(tmp, "theirs"))


def test_plain_records_are_written_one_batch_per_chunk(tmp_path: Path):
    partition = store(tmp_path / "s")
    writes: list[Any] = []
    write = partition._write

    def counting(batch: Any) -> None:
        writes.append(batch.len())
        write(batch)

    partition._write = counting  # type: ignore[method-assign]  # spy on its raw writes
    records = [
        Record(n, b"k%d" % n, b"v", [(CHANGELOG_CF_MESSAGE_HEADER, b"default")]) for n in range(500)
    ]
    large = [
        Record(n, b"l%d" % n, b"x" * 900_000, [(CHANGELOG_CF_MESSAGE_HEADER, b"default")])
        for n in range(500, 520)
    ]
    try:
        quix.apply_changelog(recovering(partition), records)
        assert writes == [1001] and partition.get_changelog_offset() == 499
        # Large records: a batch is written once it holds RESTORE_BATCH_BYTES.
        quix.apply_changelog(recovering(partition), large)
        assert len(writes) == 1 + 2 and partition.get_changelog_offset() == 519
    finally:
        partition.close()


# A child restores a long changelog in chunks until it is killed.
_CHILD = """
import sys
from pathlib import Path
sys.path[:0] = [{tests!r}]
from test_restore_chunks import records_for_crash, recovering, store
from gateway.processor import quix
partition = store(Path({path!r}))
records = records_for_crash()
print("ready", flush=True)
for start in range(0, len(records), 300):
    quix.apply_changelog(recovering(partition), records[start:start + 300])
print("done", flush=True)
"""


def records_for_crash() -> list[Record]:
    headers = [
        (CHANGELOG_CF_MESSAGE_HEADER, b"default"),
        (CHANGELOG_PROCESSED_OFFSETS_MESSAGE_HEADER, b'{"ns.gateway.requests": 1}'),
    ]
    return [
        Record(n, b"%d|k" % (n % 7_000), None if n % 11 == 0 else b"%d" % n * 20, headers)
        for n in range(120_000)
    ]


def test_a_restore_killed_mid_way_leaves_exactly_the_records_up_to_its_offset(tmp_path: Path):
    records = records_for_crash()
    cut_short = 0
    for attempt in range(4):
        path = tmp_path / f"killed-{attempt}"
        child = subprocess.Popen(
            [sys.executable, "-c", _CHILD.format(tests=str(Path(__file__).parent), path=str(path))],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        time.sleep(0.05 + 0.1 * attempt)
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        survivor = store(path)
        offset = survivor.get_changelog_offset()
        survivor.close()
        applied = 0 if offset is None else offset + 1
        assert applied % 300 == 0 or applied == len(records)  # a chunk's edge
        cut_short += applied < len(records)
        reference = store(tmp_path / f"reference-{attempt}")
        assert one_by_one(reference, records[:applied]) is None
        reference.close()
        assert contents(path) == contents(tmp_path / f"reference-{attempt}")
    assert cut_short, "no kill landed before the end of the restore"
