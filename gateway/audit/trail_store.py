"""One partition's state as a replay rebuilds it, on disk, so memory is bounded by nothing
the log's length decides.

A replay knows a value once an audit record carried it (it was read) or a replayed record
wrote it; a value it never saw is unknown, which is not the same as absent: the next audit
record that reads it says what it was. Expiry is the processor's (store.py): a value with a
stamp reads as absent once the partition's time reaches it.

Values: 0x00 + bytes, 0x01 + stamp (8 bytes) + bytes, or 0x02: known to be absent.
"""

from __future__ import annotations

import struct
from datetime import timedelta
from pathlib import Path

from rocksdict import BlockBasedOptions, Options, Rdict, WriteBatch

_PLAIN, _STAMPED, _ABSENT = b"\x00", b"\x01", b"\x02"
_STAMP = struct.Struct(">q")
_SEP = b"\xff"
_MS = timedelta(milliseconds=1)
# Writes wait in memory until this many have gathered, then go to RocksDB in one batch.
FLUSH_EVERY = 4_096


class TrailStore:
    def __init__(self, path: Path) -> None:
        self._path = path
        self._db = self._open()
        self._pending: dict[bytes, bytes] = {}
        self.now_ms = self.time_ms = 0

    def _open(self) -> Rdict:
        options = Options(raw_mode=True)
        options.create_if_missing(True)
        options.set_write_buffer_size(16 << 20)  # a replay runs one store per process
        # Most reads are of values never seen (the first record of each key): a bloom filter
        # answers those without reading the files.
        table = BlockBasedOptions()
        table.set_bloom_filter(10, False)
        options.set_block_based_table_factory(table)
        return Rdict(str(self._path), options)

    def forget(self) -> None:
        """Know nothing again (what follows seeds the store afresh)."""
        self._pending.clear()
        self._db.close()
        Rdict.destroy(str(self._path))
        self._db = self._open()

    def at(self, timestamp_ms: int) -> None:
        """Before each record: its time stamps writes, and moves the partition's time on."""
        self.now_ms = timestamp_ms
        self.time_ms = max(self.time_ms, timestamp_ms)

    def state(self, route: bytes) -> TrailKeyState:
        return TrailKeyState(self, route + _SEP)

    def raw(self, key: bytes) -> bytes | None:
        value = self._pending.get(key)
        return self._db.get(key) if value is None else value

    def known(self, key: bytes) -> bool:
        return self.raw(key) is not None

    def held(self, key: bytes) -> tuple[bytes | None, int | None] | None:
        """What the replay holds as the value (get_stamped), or None when it never saw it."""
        value = self.raw(key)
        return None if value is None else self._decoded(value)

    def get_stamped(self, key: bytes) -> tuple[bytes | None, int | None]:
        value = self.raw(key)
        return (None, None) if value is None else self._decoded(value)

    def _decoded(self, value: bytes) -> tuple[bytes | None, int | None]:
        if value[:1] == _ABSENT:
            return None, None
        if value[:1] == _STAMPED:
            stamp = _STAMP.unpack_from(value, 1)[0]
            return (None, None) if stamp <= self.time_ms else (value[9:], stamp)
        return value[1:], None

    def put_stamped(self, key: bytes, value: bytes | None, stamp: int | None) -> None:
        """Write a value (None: known absent) that expires at `stamp` (None: never)."""
        if value is None:
            self._pending[key] = _ABSENT
        elif stamp is None:
            self._pending[key] = _PLAIN + value
        else:
            self._pending[key] = _STAMPED + _STAMP.pack(stamp) + value
        if len(self._pending) >= FLUSH_EVERY:
            self.flush()

    def flush(self) -> None:
        batch = WriteBatch(raw_mode=True)
        for key, value in self._pending.items():
            batch.put(key, value)
        self._db.write(batch)
        self._pending.clear()

    def close(self) -> None:
        self._db.close()


class TrailKeyState:
    """One route's values, with the calls the processor makes on its state."""

    __slots__ = ("_store", "_prefix")

    def __init__(self, store: TrailStore, prefix: bytes) -> None:
        self._store = store
        self._prefix = prefix

    def known(self, name: str) -> bool:
        return self._store.known(self._prefix + name.encode())

    def held(self, name: str) -> tuple[bytes | None, int | None] | None:
        return self._store.held(self._prefix + name.encode())

    def get_bytes(self, name: str) -> bytes | None:
        return self.get_stamped(name)[0]

    def get_stamped(self, name: str) -> tuple[bytes | None, int | None]:
        return self._store.get_stamped(self._prefix + name.encode())

    def put_stamped(self, name: str, value: bytes | None, stamp: int | None) -> None:
        self._store.put_stamped(self._prefix + name.encode(), value, stamp)

    def set_bytes(self, name: str, value: bytes, ttl: timedelta | None = None) -> None:
        stamp = None if ttl is None else self._store.now_ms + ttl // _MS
        self.put_stamped(name, value, stamp)

    def delete(self, name: str) -> None:
        self.put_stamped(name, None, None)
