"""The job records the view read last, with when: what an answer that waits for the view
looks for (http/caught_up.py)."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterable

# A waiting answer looks at what was read since its request was sent (milliseconds, under
# load a little more); past this much read meanwhile, it waits for its whole timeout instead.
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
