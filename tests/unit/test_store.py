"""A partition's store reads as an in-memory model of it (tests/memory_store.py) does,
whatever is written and committed (as the loop commits, task.py) or abandoned, and a store
restored from its changelog holds what the original held."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.processor import store as store_module
from gateway.processor.store import PartitionStore
from tests.memory_store import Store as Model
from tests.support import MemoryTransaction, changelogged, commit_stores

ROUTES = [b"a", b"b\xff", b"", b"\x00tick"]
NAMES = ["entries", "job/1", "job/\u00e9", "claim"]

Op = tuple[str, int, int, int, int]  # kind, route, name, time step, ttl ms
ops = st.lists(
    st.tuples(
        st.sampled_from(["put", "put_ttl", "delete", "commit", "abandon", "sweep"]),
        st.integers(0, len(ROUTES) - 1),
        st.integers(0, len(NAMES) - 1),
        st.integers(-5, 50),
        st.integers(1, 80),
    ),
    max_size=60,
)


def _check(tmp: Path, script: list[Op], restore_bytes: int) -> None:
    store = PartitionStore(tmp / "a", counted="entries")
    model, committed = Model(), Model()
    transaction = MemoryTransaction()
    now = 1_000
    for n, (kind, r, k, step, ttl) in enumerate(script):
        now += step
        store.at(now)
        model.at(now)
        state, expected = store.state(ROUTES[r]), model.state(ROUTES[r])
        value = f"{n}".encode()
        if kind == "put":
            state.set_bytes(NAMES[k], value)
            expected.set_bytes(NAMES[k], value)
        elif kind == "put_ttl":
            state.set_bytes(NAMES[k], value, ttl=timedelta(milliseconds=ttl))
            expected.set_bytes(NAMES[k], value, ttl=timedelta(milliseconds=ttl))
        elif kind == "delete":
            state.delete(NAMES[k])
            expected.delete(NAMES[k])
        elif kind == "sweep":
            store.sweep_expired()  # deletes only what reads as absent already
        elif kind == "commit":
            commit_stores({("requests", 0): store}, transaction)
            committed.items, committed.high_water_ms = dict(model.items), model.high_water_ms
        else:  # abandon: back to the last commit
            store.abandon()
            model.items, model.high_water_ms = dict(committed.items), committed.high_water_ms
            model.now_ms = committed.high_water_ms
        for route in ROUTES:
            for name in NAMES:
                got = store.state(route).get_bytes(name)
                assert got == model.state(route).get_bytes(name), (route, name)
    store.abandon()
    changelog = transaction.log("requests", 0)
    live = sorted(store.live())
    # Counted: the routes whose `entries` the committed writes left stored (expired or not).
    held = {key: value for key, value in changelog}
    counted = sum(v is not None and k.endswith(b"\xffentries") for k, v in held.items())
    assert store.count == counted
    store.close()
    reopened = PartitionStore(tmp / "a", counted="entries")
    assert reopened.count == counted  # kept across a start
    reopened.close()
    store_module.RESTORE_BYTES, before = restore_bytes, store_module.RESTORE_BYTES
    try:
        restored = PartitionStore(tmp / "b", counted="entries")
        restored.restore(changelogged(changelog))
        restored.restored()
    finally:
        store_module.RESTORE_BYTES = before
    assert sorted(restored.live()) == live
    assert restored.changelog_offset == len(changelog) - 1
    assert restored.count == counted
    restored.close()


@settings(max_examples=150, deadline=None)
@given(script=ops, restore_bytes=st.sampled_from([1, 40, 8 << 20]))
def test_reads_follow_the_model_and_a_restore_holds_the_same(
    tmp_path_factory, script: list[Op], restore_bytes: int
) -> None:
    _check(tmp_path_factory.mktemp("store"), script, restore_bytes)


def test_a_restore_interrupted_between_batches_goes_on_from_the_last_one(tmp_path: Path):
    original = PartitionStore(tmp_path / "a")
    original.at(10)
    for n in range(100):
        original.state(b"r").set_bytes(f"job/{n}", b"x" * 10)
    changelog = list(original.changes())
    store_module.RESTORE_BYTES, before = 50, store_module.RESTORE_BYTES
    try:
        half = PartitionStore(tmp_path / "b")
        half.restore(changelogged(changelog[:37]))
        half.close()
        again = PartitionStore(tmp_path / "b")  # a new start reads where the store got to
        assert again.changelog_offset == 36
        start = again.changelog_offset + 1
        again.restore(changelogged(changelog[start:], start))
    finally:
        store_module.RESTORE_BYTES = before
    assert again.time_ms == 10
    assert sorted(again.live()) == sorted((b"r", f"job/{n}", b"x" * 10) for n in range(100))


def test_a_changelog_written_without_counts_is_counted_once_restored(tmp_path: Path):
    uncounted = PartitionStore(tmp_path / "a")  # as a version before counts wrote it
    uncounted.at(10)
    for n in range(5):
        uncounted.state(b"r%d" % n).set_bytes("entries", b"e")
        uncounted.state(b"r%d" % n).set_bytes(f"job/{n}", b"j")
    uncounted.state(b"r0").delete("entries")
    changelog = list(uncounted.changes())
    assert all(key != store_module.COUNT for key, _ in changelog)
    restored = PartitionStore(tmp_path / "b", counted="entries")
    restored.restore(changelogged(changelog))
    restored.restored()
    assert restored.count == 4
    restored.close()
    reopened = PartitionStore(tmp_path / "b", counted="entries")
    assert reopened.count == 4  # written: not counted again
    reopened.close()


def test_a_sweep_can_leave_only_local_work_which_a_commit_writes_without_a_changelog_record(
    tmp_path: Path,
):
    store = PartitionStore(tmp_path / "s")
    store.at(10)
    for n in range(3):  # values with a ttl, then overwritten: their expiry entries go stale
        store.state(b"r").set_bytes(f"job/{n}", b"x", ttl=timedelta(milliseconds=5))
    store.committed(0)
    for n in range(3):
        store.state(b"r").set_bytes(f"job/{n}", b"y")
    store.committed(1)
    store.at(20)
    store.committed(2)  # the time moved
    store_module.SWEEP_LIMIT, before = 2, store_module.SWEEP_LIMIT
    transaction = MemoryTransaction()
    try:
        for _ in range(2):  # two entries a sweep: nothing for the changelog, work for the store
            store.sweep_expired()
            assert store.dirty and list(store.changes()) == []
            # The commit writes it under the offset the store already has.
            commit_stores({("requests", 0): store}, transaction)
            assert transaction.logs == {}
        store.sweep_expired()
    finally:
        store_module.SWEEP_LIMIT = before
    assert store.changelog_offset == 2 and not store.dirty
    assert sorted(store.live()) == [(b"r", f"job/{n}", b"y") for n in range(3)]


def test_a_crash_leaves_the_store_at_a_batch_it_committed(tmp_path: Path):
    # No write-ahead log: a process that dies loses the batches RocksDB still held in
    # memory, whole, and the store's offset says how far it got (the restore goes on).
    import subprocess
    import sys

    script = f"""
import os
from pathlib import Path
from gateway.processor.store import PartitionStore
store = PartitionStore(Path({str(tmp_path / "s")!r}))
for offset in range(50):
    store.at(1_000 + offset)
    store.state(b"route").set_bytes("n", b"%d" % offset)
    store.committed(offset)
os._exit(0)  # as kill -9: nothing closed, nothing flushed
"""
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    store = PartitionStore(tmp_path / "s")
    value = store.state(b"route").get_bytes("n")
    if store.changelog_offset == -1:
        assert value is None
    else:
        assert value == b"%d" % store.changelog_offset
    store.close()
