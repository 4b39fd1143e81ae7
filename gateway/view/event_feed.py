"""The events a serve process keeps: its window, persisted with its job view.

Each event is kept with its place in the log (partition, offset, index: see
event_cursor.py), so a reader's cursor means the same on every process. The
view derives them as it applies `job_states` records (it alone has each job's
previous version) and writes them in the same RocksDB batch as the jobs and
the offsets (`stage`), so a restarted process has its window back exactly as
its view stopped, and never derives an event twice or loses one in between.

The window is the last `size` events in the order read. Per partition it also
knows where it starts: a reader whose cursor is older than that has missed the
events in between, and is told so. A new view reads each partition from the
start of the log, so its window starts at (0, 0); a view written before windows
were kept starts at the offsets it had reached.

Keys under the view's RocksDB (apart from the view's own prefixes):
    e/<seq>          -> [partition, offset, index, the event], seq in order read
    ew/<partition>   -> [offset, index]: where the window starts on the partition
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.view.apply import Change
from gateway.view.event_cursor import START, Cursor, EventAt, position
from gateway.view.events import derive

MAX_EVENTS = 10_000
_EVICT_EVERY = 256  # evicted in runs, so a full window costs no list shift per event
EVENT_PREFIX = b"e/"
WINDOW_PREFIX = b"ew/"

Write = tuple[bytes, bytes | None]  # a key to put (or, with None, to delete)


@dataclass(frozen=True, slots=True)
class Kept:
    seq: int
    partition: int
    offset: int
    index: int
    event: dict[str, Any]


@dataclass
class Resumed:
    """What a reader at a cursor gets: the kept events from there in the order read,
    the cursor they start from, the partitions where it was older than the window
    (what was missed: partition -> where the window starts), and the last seq seen."""

    events: list[Kept]
    start: Cursor
    missed: dict[int, EventAt] = field(default_factory=dict)
    seq: int = -1


def _event_key(seq: int) -> bytes:
    return EVENT_PREFIX + seq.to_bytes(8, "big")


def _window_key(partition: int) -> bytes:
    return WINDOW_PREFIX + str(partition).encode()


class EventFeed:
    """Thread-safe: the view's follower stages, request handlers read."""

    def __init__(self, size: int = MAX_EVENTS) -> None:
        self._size = size
        self._events: list[Kept] = []  # _events[k].seq == _base + k
        self._base = 0
        self._first: Cursor = {}  # partition -> where the window starts
        self._read: dict[int, int] = {}  # partition -> the next offset the view reads
        self._lock = threading.Lock()

    def load(
        self, stored: Iterable[tuple[bytes, bytes]], windows: Iterable[tuple[bytes, bytes]],
        offsets: Mapping[int, int],
    ) -> list[Write]:  # fmt: skip
        """Take back what the view kept (its `e/` and `ew/` entries and its offsets);
        returns the window starts to write for partitions that had none."""
        with self._lock:
            for key, value in windows:
                offset, index = orjson.loads(value)
                self._first[int(key[len(WINDOW_PREFIX) :])] = (offset, index)
            self._read = dict(offsets)
            # Read by a version that kept no window: it holds nothing before its offsets.
            missing = {p: (o, 0) for p, o in offsets.items() if p not in self._first}
            self._first.update(missing)
            for key, value in stored:
                partition, offset, index, event = orjson.loads(value)
                self._events.append(
                    Kept(int.from_bytes(key[len(EVENT_PREFIX) :], "big"), partition, offset,
                         index, event)
                )  # fmt: skip
            self._base = self._events[0].seq if self._events else 0
            return [(_window_key(p), orjson.dumps(at)) for p, at in missing.items()]

    def stage(self, changes: Iterable[Change], ends: Mapping[int, int]) -> list[Write]:
        """Keep the events of `changes` (records the view applies, reading each partition
        up to `ends`); returns what the view writes with them, in its batch."""
        derived = [
            (partition, offset, index, event)
            for partition, offset, before, after in changes
            for index, event in enumerate(derive((partition, offset, before, after)))
        ]
        writes: list[Write] = []
        with self._lock:
            for partition in ends:
                if partition not in self._first:  # read from the start of the log
                    self._first[partition] = START
                    writes.append((_window_key(partition), orjson.dumps(START)))
            self._read.update(ends)
            for partition, offset, index, event in derived:
                kept = Kept(self._base + len(self._events), partition, offset, index, event)
                self._events.append(kept)
                stored = orjson.dumps([partition, offset, index, event])
                writes.append((_event_key(kept.seq), stored))
            if len(self._events) >= self._size + _EVICT_EVERY:
                writes.extend(self._evict(len(self._events) - self._size))
        return writes

    def _evict(self, count: int) -> Iterator[Write]:
        gone, self._events = self._events[:count], self._events[count:]
        self._base += count
        moved: set[int] = set()
        for kept in gone:
            yield _event_key(kept.seq), None
            self._first[kept.partition] = max(
                position(self._first, kept.partition), (kept.offset, kept.index + 1)
            )
            moved.add(kept.partition)
        for partition in moved:
            yield _window_key(partition), orjson.dumps(self._first[partition])

    def read_up_to(self, partition: int) -> int:
        with self._lock:
            return self._read.get(partition, 0)

    def resume(self, cursor: Cursor) -> Resumed:
        """The kept events at or after `cursor`, in the order read. Where `cursor` is
        older than the window, from the window's start, named in `missed`."""
        with self._lock:
            start = dict(cursor)
            missed: dict[int, EventAt] = {}
            for partition, first in self._first.items():
                if position(start, partition) < first:
                    missed[partition] = first
                    start[partition] = first
                else:
                    start.setdefault(partition, START)
            events = [
                k for k in self._events if (k.offset, k.index) >= position(start, k.partition)
            ]
            return Resumed(events, start, missed, self._base + len(self._events) - 1)

    def since(self, seq: int) -> list[Kept] | None:
        """The events read after `seq`; None if some of them are no longer kept."""
        with self._lock:
            if seq + 1 < self._base:
                return None
            return self._events[seq + 1 - self._base :]

    def kept(self) -> tuple[list[Kept], Cursor]:
        """Every event kept, in the order read, and the cursor past them all."""
        with self._lock:
            return list(self._events), {p: (offset, 0) for p, offset in self._read.items()}
