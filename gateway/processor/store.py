"""One input partition's state: a RocksDB store, its changelog, and event-time expiry.

The processor is the single writer of each partition's store. Writes wait in
memory (`pending`) while a transaction is open: reads see them first, then the
store. When the transaction commits (task.commit), the same writes have gone to
the changelog inside it; only then are they written to RocksDB, in one batch
with the changelog offset they reach and the partition's time. A crash before that
batch loses nothing: the next start finds the store behind its changelog and
restores the difference (restore.py). For the same reason RocksDB writes no
write-ahead log (as Kafka Streams' stores): a crash that loses the batches
still in memory leaves the store as it was after an earlier batch, whose
offset it holds, and the restore brings it up. A transaction that does not
commit is abandoned: its writes never reach the store.

Layout (every key and value is what the changelog carries, byte for byte, so a
restore copies records verbatim):
    d<route>\\xff<name>  a key's named value. Names are UTF-8, which never holds
                        0xff, so the last 0xff splits route from name: no two
                        (route, name) pairs share a store key.
    m<name>             the store's own facts: `time` (the partition's event
                        time) and `count` (how many routes hold the counted
                        name, so it is known at start without reading every
                        key), changelog records like data; and `offset` (the
                        changelog offset the store reaches, local only).
    x<stamp><key>       local only: a value with a ttl, by when it expires, so
                        expired values are deleted (see sweep_expired).
A value is 0x00 + bytes, or 0x01 + its expiry (8 bytes, event-time ms) + bytes.

Expiry is event time, the processor's only clock: a value set with a ttl at a
record's time reads as absent once the partition's time (the greatest record
time it has handled) reaches its stamp. The replay's store (audit/trail_store.py)
keeps the same rule, so a replay decides as the processor did.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Protocol

from rocksdict import BlockBasedOptions, Options, Rdict, WriteBatch, WriteOptions

from gateway import store_memory

# The version of the layout above. Raise it with any change: a state directory records the
# layout its stores have (state_identity.py), and one of another layout is deleted at start
# and restored from the changelog. 1: the first recorded (with `count`).
LAYOUT = 1
DATA = b"d"
TIME = b"mtime"
OFFSET = b"moffset"  # local only
COUNT = b"mcount"
EXPIRY = b"x"
_SEP = b"\xff"
_PLAIN = b"\x00"
_STAMPED = b"\x01"
_STAMP = struct.Struct(">q")
_MS = timedelta(milliseconds=1)
# A restore writes a batch once it holds this many bytes of keys and values: large
# records (up to a megabyte each) do not make a chunk's batch a gigabyte.
RESTORE_BYTES = 8 << 20
# A commit deletes at most this many expired values per partition: time spent on a
# backlog of them is spread over commits.
SWEEP_LIMIT = 1_000


class Changelogged(Protocol):
    """A changelog record as read (confluent_kafka's Message)."""

    def key(self) -> bytes: ...
    def value(self) -> bytes | None: ...
    def offset(self) -> int: ...


def stamp_of(value: bytes) -> int | None:
    """The expiry of an encoded value, or None when it has none."""
    return _STAMP.unpack_from(value, 1)[0] if value[:1] == _STAMPED else None


def _options() -> Options:
    options = Options(raw_mode=True)
    options.create_if_missing(True)
    # Most reads of a stream of new keys find nothing: bloom filters answer those without a
    # search of the memtable (1.4 µs down to 0.4 µs a read at 300,000 values) or of every
    # table file's index once the store outgrows memory.
    options.set_memtable_prefix_bloom_ratio(0.02)
    options.set_memtable_whole_key_filtering(True)
    tables = BlockBasedOptions()
    tables.set_bloom_filter(10, False)
    store_memory.shared().apply(options, tables)
    return options


class PartitionStore:
    def __init__(self, path: Path, counted: str | None = None) -> None:
        """The store at `path`; with `counted`, it keeps how many routes hold a value of that
        name (expired ones too, until swept), in `count`."""
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._db = Rdict(str(path), _options())
        # The changelog is the store's log (see above): half the cost of a write.
        unlogged = WriteOptions()
        setattr(unlogged, "disable_wal", True)  # noqa: B010 (a property; the stub says a method)
        self._db.set_write_options(unlogged)
        offset = self._db.get(OFFSET)
        # The last changelog offset the store holds; -1: none.
        self.changelog_offset: int = -1 if offset is None else int(offset)
        self._counted = None if counted is None else _SEP + counted.encode()
        raw_count = self._db.get(COUNT)
        self.count: int = 0 if raw_count is None else int(raw_count)
        raw_time = self._db.get(TIME)
        self.time_ms: int = 0 if raw_time is None else _STAMP.unpack(raw_time)[0]
        self._committed_time = self.time_ms
        self.now_ms = self.time_ms
        # Written while the transaction is open: store key -> encoded value (None: deleted).
        self.pending: dict[bytes, bytes | None] = {}
        # The count the pending writes leave, once changes() has worked it out.
        self._next_count: int | None = None
        # Whether the store held each counted key a read found before it was written: the
        # count then needs no read of its own.
        self._held: dict[bytes, bool] = {}

    # -- the record being handled ----------------------------------------------

    def at(self, timestamp_ms: int) -> None:
        """Before each record: its time stamps writes, and moves the partition's time on."""
        self.now_ms = timestamp_ms
        if timestamp_ms > self.time_ms:
            self.time_ms = timestamp_ms

    def state(self, route: bytes) -> KeyState:
        return KeyState(self, route + _SEP)

    def get(self, key: bytes) -> bytes | None:
        return self.get_stamped(key)[0]

    def get_stamped(self, key: bytes) -> tuple[bytes | None, int | None]:
        """A value and its expiry (None: it has none); (None, None) once expired."""
        if key in self.pending:
            value = self.pending[key]
        else:
            value = self._db.get(key)
            if self._counted is not None and key.endswith(self._counted):
                self._held[key] = value is not None
        if value is None:
            return None, None
        if value[:1] == _STAMPED:
            stamp = _STAMP.unpack_from(value, 1)[0]
            if stamp <= self.time_ms:
                return None, None
            return value[9:], stamp
        return value[1:], None

    def put(self, key: bytes, value: bytes, ttl: timedelta | None) -> None:
        self.put_stamped(key, value, None if ttl is None else self.now_ms + ttl // _MS)

    def put_stamped(self, key: bytes, value: bytes, stamp: int | None) -> None:
        """Write a value that expires at `stamp` (None: never)."""
        if stamp is None:
            self.pending[key] = _PLAIN + value
        else:
            self.pending[key] = _STAMPED + _STAMP.pack(stamp) + value

    def delete(self, key: bytes) -> None:
        self.pending[key] = None

    # -- the transaction ---------------------------------------------------------

    def changes(self) -> Iterator[tuple[bytes, bytes | None]]:
        """What the open transaction must carry to the changelog: every write, and the
        partition's time and count when they moved."""
        for key, value in self.pending.items():
            if key[:1] != EXPIRY:
                yield key, value
        if self.time_ms != self._committed_time:
            yield TIME, _STAMP.pack(self.time_ms)
        self._next_count = self._count_after()
        if self._next_count != self.count:
            yield COUNT, str(self._next_count).encode()

    def _count_after(self) -> int:
        """The count once the pending writes are in (a key read before the store is written)."""
        counted, count = self._counted, self.count
        if counted is None:
            return count
        held = self._held
        for key, value in self.pending.items():
            if key[:1] == DATA and key.endswith(counted):
                was = held[key] if key in held else self._db.get(key) is not None
                count += (value is not None) - was
        return count

    @property
    def dirty(self) -> bool:
        return bool(self.pending) or self.time_ms != self._committed_time

    def sweep_expired(self) -> None:
        """Delete values whose expiry the partition's time has reached (they read as absent
        already), so a store does not keep every key it ever expired. The deletes join the
        open transaction like any write."""
        end = EXPIRY + _STAMP.pack(self.time_ms + 1)
        for swept, index in enumerate(self._db.keys(from_key=EXPIRY)):
            assert isinstance(index, bytes)  # a raw-mode store
            if index >= end or swept >= SWEEP_LIMIT:
                break
            key = index[9:]
            value = self.pending[key] if key in self.pending else self._db.get(key)
            if value is not None and stamp_of(value) == _STAMP.unpack_from(index, 1)[0]:
                self.pending[key] = None
            self.pending[index] = None  # local: changes() leaves it out of the changelog

    def committed(self, changelog_offset: int) -> None:
        """The transaction holding the pending writes committed, and with it the changelog up
        to `changelog_offset`: write them, in one batch with that offset."""
        count = self._count_after() if self._next_count is None else self._next_count
        batch = WriteBatch(raw_mode=True)
        for key, value in self.pending.items():
            _apply(batch, key, value)
        batch.put(TIME, _STAMP.pack(self.time_ms))
        batch.put(OFFSET, str(changelog_offset).encode())
        batch.put(COUNT, str(count).encode())
        self._db.write(batch)
        self.changelog_offset = changelog_offset
        self.count = count
        self._committed_time = self.time_ms
        self.pending.clear()
        self._held.clear()
        self._next_count = None

    def abandon(self) -> None:
        """The transaction did not commit: forget its writes and its time."""
        self.pending.clear()
        self._held.clear()
        self._next_count = None
        self.time_ms = self.now_ms = self._committed_time

    # -- restore -----------------------------------------------------------------

    def restore(self, records: Sequence[Changelogged]) -> None:
        """Apply changelog records in order: one batch per RESTORE_BYTES of keys and values,
        each with the offset of its last record, so a crash leaves the store at a batch's edge
        and the next restore goes on from there."""
        batch, held, last = WriteBatch(raw_mode=True), 0, None
        for record in records:
            key, value = record.key(), record.value()
            last = record
            if value is None:
                batch.delete(key)
                continue
            batch.put(key, value)
            held += len(key) + len(value)
            if value[:1] == _STAMPED and key[:1] == DATA:
                batch.put(EXPIRY + value[1:9] + key, b"")
            elif key == TIME:
                self.time_ms = self._committed_time = self.now_ms = _STAMP.unpack(value)[0]
            elif key == COUNT:
                self.count = int(value)
            if held >= RESTORE_BYTES:
                self._restored(batch, record.offset())
                batch, held, last = WriteBatch(raw_mode=True), 0, None
        if last is not None:
            self._restored(batch, last.offset())

    def _restored(self, batch: WriteBatch, offset: int) -> None:
        batch.put(OFFSET, str(offset).encode())
        self._db.write(batch)
        self.changelog_offset = offset

    def restored(self) -> None:
        """The restore reached the changelog's end. A changelog written before counts were
        (by a previous version) carries none: count the keys once, here."""
        if self._counted is None or self._db.get(COUNT) is not None:
            return
        count = 0
        for key in self._db.keys(from_key=DATA):
            assert isinstance(key, bytes)  # a raw-mode store
            if key[:1] != DATA:
                break
            count += key.endswith(self._counted)
        self.count = count
        self._db.put(COUNT, str(count).encode())

    def live(self) -> Iterator[tuple[bytes, str, bytes]]:
        """Every (route, name, value) the store holds, committed and not expired."""
        for key, value in self._db.items(from_key=DATA):
            assert isinstance(key, bytes) and isinstance(value, bytes)  # a raw-mode store
            if key[:1] != DATA:
                break
            route, _, name = key[1:].rpartition(_SEP)
            stamp = stamp_of(value)
            if stamp is None or stamp > self.time_ms:
                yield route, name.decode(), value[1:] if stamp is None else value[9:]

    def close(self) -> None:
        self._db.close()


def _apply(batch: WriteBatch, key: bytes, value: bytes | None) -> None:
    if key[:1] == EXPIRY:
        if value is None:
            batch.delete(key)
        return
    if value is None:
        batch.delete(key)
        return
    batch.put(key, value)
    if key[:1] == DATA and value[:1] == _STAMPED:
        batch.put(EXPIRY + value[1:9] + key, b"")


class KeyState:
    """One route's values, by name: what a record's handling reads and writes."""

    __slots__ = ("_store", "_prefix")

    def __init__(self, store: PartitionStore, prefix: bytes) -> None:
        self._store = store
        self._prefix = DATA + prefix

    def get_bytes(self, name: str) -> bytes | None:
        return self._store.get(self._prefix + name.encode())

    def get_stamped(self, name: str) -> tuple[bytes | None, int | None]:
        return self._store.get_stamped(self._prefix + name.encode())

    def put_stamped(self, name: str, value: bytes, stamp: int | None) -> None:
        self._store.put_stamped(self._prefix + name.encode(), value, stamp)

    def set_bytes(self, name: str, value: bytes, ttl: timedelta | None = None) -> None:
        self._store.put(self._prefix + name.encode(), value, ttl)

    def delete(self, name: str) -> None:
        self._store.delete(self._prefix + name.encode())
