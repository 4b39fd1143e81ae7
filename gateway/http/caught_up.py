"""Read your writes for a job the processor changed in place: waiting for the view.

An answer that changes a stored job (an update, or the job a replace cancelled)
comes before this process's view has read the job's new record, and the binding
cannot build that record itself (the processor merges the change into the record
it stores). So the answer waits until the view has read the decision's record:
the view applies a job's records in log order, so a GET then shows that record or
a later one.

The decision's record is the one holding the values it set: the record before
it differs in every field it changed. It is looked for among the job's records
the view read since the request was sent, not only in the one it shows now: a
later decision of the same job may have replaced those fields already (several
updates of one key at once), and the view may read both in one batch.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

VIEW_WAIT_S = 5.0
_POLL_S = 0.01
# A waiting answer looks at what was read since its request was sent (milliseconds, under
# load a little more); past this much read meanwhile, it waits for VIEW_WAIT_S instead.
MAX_BYTES = 8 * 1024 * 1024


class ReadVersions:
    """The job records the view read last, with when (time.monotonic()), up to MAX_BYTES.
    Thread-safe: the view's follower adds, request handlers look."""

    def __init__(self, max_bytes: int = MAX_BYTES) -> None:
        self._max_bytes = max_bytes
        self._bytes = 0
        self._by_job: dict[str, deque[tuple[float, bytes]]] = {}
        self._order: deque[str] = deque()  # job ids, oldest record first
        self._lock = threading.Lock()

    def read(self, records: Iterable[tuple[str, bytes]]) -> None:
        """(job id, record) read, in order; the view calls it once they show in `get`."""
        now = time.monotonic()
        with self._lock:
            for job_id, value in records:
                self._by_job.setdefault(job_id, deque()).append((now, value))
                self._order.append(job_id)
                self._bytes += len(value)
            while self._bytes > self._max_bytes:
                oldest = self._order.popleft()
                kept = self._by_job[oldest]
                self._bytes -= len(kept.popleft()[1])
                if not kept:
                    del self._by_job[oldest]

    def since(self, job_id: str, at: float) -> list[bytes]:
        """The job's records read at or after `at`, in the order read."""
        with self._lock:
            return [value for read_at, value in self._by_job.get(job_id, ()) if read_at >= at]


def caught_up(versions: ReadVersions, job_id: str, values: Mapping[str, Any], sent: float) -> bool:
    """Whether the view read, since `sent`, a record of the job holding `values` (a field
    that is None: absent)."""
    for raw in versions.since(job_id, sent):
        job = orjson.loads(raw)
        if all(job.get(field) == value for field, value in values.items()):
            return True
    return False


async def wait(
    versions: ReadVersions,
    job_id: str,
    values: Mapping[str, Any],
    sent: float,
    timeout: float = VIEW_WAIT_S,
) -> None:
    """Until `caught_up` (or `timeout`)."""
    deadline = time.monotonic() + timeout
    while not caught_up(versions, job_id, values, sent) and time.monotonic() < deadline:
        await asyncio.sleep(_POLL_S)
