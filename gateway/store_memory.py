"""One memory budget for every RocksDB store of a process.

Left to itself each RocksDB instance keeps memtables of its own (64 MB each, two before a
flush) and a block cache of its own, so a process's memory grows with the stores it opens:
a processor runtime with one store per owned partition, a serve process with its job view
and its audit index. A runtime owning 64 partitions would hold gigabytes before its first
flush. As Kafka Streams bounds it (its `RocksDBConfigSetter` with one cache and one
write-buffer manager), every store of a process shares one LRU block cache, and one
write-buffer manager charges all their memtables to that cache: the process's stores keep
within `--store-memory-mb` together, however many there are. A third of it may be
memtables; when they fill it, the largest is flushed to disk, where the cache reads it.
"""

from __future__ import annotations

import threading

from rocksdict import BlockBasedOptions, Cache, Options, WriteBufferManager

DEFAULT_MB = 128
MIN_MB = 16
MAX_MB = 1 << 20
# Of the budget, what memtables may take before a flush (a third); the rest caches blocks.
_MEMTABLE_SHARE = 3
# A store's memtable is flushed at a quarter of that share, so that no one store holds it
# all; and it grows by blocks of this size, so an idle store (a partition with little
# traffic) holds little more: the default, a tenth of the memtable, times 64 stores, would be
# more than the budget.
_ARENA_BLOCK = 256 << 10


class StoreMemory:
    def __init__(self, megabytes: int) -> None:
        self.megabytes = megabytes
        total = megabytes << 20
        self.cache = Cache(total)
        self.memtables = total // _MEMTABLE_SHARE
        self.buffers = WriteBufferManager.new_write_buffer_manager_with_cache(
            self.memtables, False, self.cache
        )

    def apply(self, options: Options, tables: BlockBasedOptions | None = None) -> None:
        """Make a store's options use the budget: its memtables and its blocks, indexes and
        filters all counted in the shared cache (the first level's filters and indexes kept
        there, as reads of new keys ask them every time)."""
        tables = tables or BlockBasedOptions()
        tables.set_block_cache(self.cache)
        tables.set_cache_index_and_filter_blocks(True)
        tables.set_pin_l0_filter_and_index_blocks_in_cache(True)
        options.set_block_based_table_factory(tables)
        options.set_write_buffer_manager(self.buffers)
        options.set_write_buffer_size(self.memtables // 4)
        options.set_arena_block_size(_ARENA_BLOCK)


_lock = threading.Lock()
_budget: StoreMemory | None = None


def configure(megabytes: int) -> StoreMemory:
    """The process's budget, set at start before any store opens (stores opened before keep
    the budget they opened with)."""
    global _budget
    if not MIN_MB <= megabytes <= MAX_MB:
        raise ValueError(f"--store-memory-mb must be from {MIN_MB} to {MAX_MB}")
    with _lock:
        if _budget is None or _budget.megabytes != megabytes:
            _budget = StoreMemory(megabytes)
        return _budget


def shared() -> StoreMemory:
    """The process's budget (the default one, if the process set none)."""
    with _lock:
        budget = _budget
    return budget if budget is not None else configure(DEFAULT_MB)
