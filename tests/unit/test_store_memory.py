"""Every RocksDB store of a process keeps within one budget: one block cache, and one
write-buffer manager charging every memtable to it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gateway import store_memory
from gateway.processor.store import PartitionStore


def test_every_store_of_a_process_shares_one_budget(tmp_path: Path) -> None:
    budget = store_memory.configure(32)
    assert store_memory.shared() is budget
    stores = [PartitionStore(tmp_path / str(i)) for i in range(8)]
    for i, store in enumerate(stores):
        store.at(1_000)
        for n in range(2_000):
            store.state(b"route-%d" % n).set_bytes("value", b"x" * 200)
        store.committed(changelog_offset=i)
    # Every store's memtable is charged to the one manager, and through it to the one cache.
    used = budget.buffers.get_usage()
    assert used >= 8 * 2_000 * 200 and budget.cache.get_usage() >= used
    assert budget.buffers.get_buffer_size() == (32 << 20) // 3
    store_memory.configure(store_memory.DEFAULT_MB)


@pytest.mark.parametrize("megabytes", [0, store_memory.MIN_MB - 1, store_memory.MAX_MB + 1])
def test_a_budget_out_of_range_is_refused(megabytes: int) -> None:
    with pytest.raises(ValueError, match="--store-memory-mb must be from"):
        store_memory.configure(megabytes)


@pytest.mark.parametrize("command", ["process", "serve"])
def test_the_commands_refuse_a_budget_out_of_range_before_starting(command: str) -> None:
    ran = subprocess.run(
        [sys.executable, "-m", "gateway", command, "--bootstrap", "127.0.0.1:9",
         "--store-memory-mb", "1"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert ran.returncode != 0 and "--store-memory-mb must be from 16" in ran.stderr
