"""Where a reader of GET /ojs/v1/events stands: one position per `job_states` partition.

An event is the `index`-th event derived from the job_states record at `offset`
of `partition`, so its place is a fact of the log, the same on every serve
process and after any restart. Kafka orders records within a partition only,
and a process reads the partitions interleaved as they come, so no single
number orders events the same everywhere; a cursor therefore holds, for each
partition, the position (offset, index) of the first event its reader has not
seen. Resuming from it sends, on each partition, exactly the events from there.

Text form: `partition:offset` or `partition:offset.index` (index 0 is left
out), comma-separated, partitions ascending, e.g. `0:1042,1:977.1,2:0`. A
partition the text does not name stands at (0, 0), the start of the log. A
served cursor names every partition it knows, so it is never empty: an
EventSource whose last id is empty sends no Last-Event-ID, and would start over
from the newest event.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

EventAt = tuple[int, int]  # (offset, index): the first event not yet seen
Cursor = dict[int, EventAt]

START: EventAt = (0, 0)
MAX_CHARS = 4096
MAX_PARTITION = 2**31 - 1  # Kafka's partition ids are int32
MAX_OFFSET = 2**63 - 1  # Kafka's offsets are int64
MAX_INDEX = 2**16 - 1
# ASCII digits only: Python's int() also reads other scripts' digits and underscores.
_ENTRY = re.compile(r"(0|[1-9][0-9]{0,18}):(0|[1-9][0-9]{0,18})(?:\.(0|[1-9][0-9]{0,4}))?")
EXAMPLE = "0:1042,1:977.1"


def parse(text: str) -> Cursor | str:
    """The cursor `text` names, or what is wrong with it (for an error message)."""
    if len(text) > MAX_CHARS:
        return f"is {len(text)} characters long; a cursor is at most {MAX_CHARS}"
    cursor: Cursor = {}
    for entry in text.split(","):
        match = _ENTRY.fullmatch(entry)
        if match is None:
            return f"is not a cursor: each entry is partition:offset[.index], as in {EXAMPLE}"
        partition, offset = int(match[1]), int(match[2])
        index = int(match[3] or 0)
        if partition > MAX_PARTITION or offset > MAX_OFFSET or index > MAX_INDEX:
            return (
                f"names partition {partition}, offset {offset}, index {index}: beyond "
                f"{MAX_PARTITION}, {MAX_OFFSET}, {MAX_INDEX}"
            )
        if cursor and partition <= max(cursor):
            return "names its partitions out of order or twice; list each once, ascending"
        cursor[partition] = (offset, index)
    return cursor


def format_cursor(cursor: Mapping[int, EventAt]) -> str:
    """The canonical text of `cursor`: every partition it holds, even at the start
    (`0:0` for none, which means the same and is not empty)."""
    entries = sorted(cursor.items()) or [(0, START)]
    return ",".join(f"{p}:{o}" if i == 0 else f"{p}:{o}.{i}" for p, (o, i) in entries)


def position(cursor: Mapping[int, EventAt], partition: int) -> EventAt:
    return cursor.get(partition, START)


def passed(cursor: Cursor, partition: int, offset: int, index: int) -> None:
    """Move `cursor` past the event at (offset, index) of `partition`."""
    cursor[partition] = max(position(cursor, partition), (offset, index + 1))
