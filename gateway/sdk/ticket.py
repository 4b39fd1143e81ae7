"""One enqueue call's answers, filled in (from any thread) as they arrive."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

_EMPTY = object()


class Ticket:
    """One slot per job of the call, in input order; done when every slot is filled."""

    def __init__(self, size: int) -> None:
        self._lock = threading.Lock()
        self._slots: list[Any] = [_EMPTY] * size
        self._remaining = size
        self._done = threading.Event()
        self._callbacks: list[Callable[[], None]] = []
        # Correlation ids this call registered, to forget them if it gives up.
        self.correlation_ids: list[str] = []
        if size == 0:
            self._done.set()

    def fill(self, index: int, value: Any) -> None:
        """Set a slot once; later values for it (a late ack after the reply) are ignored."""
        with self._lock:
            if self._slots[index] is not _EMPTY:
                return
            self._slots[index] = value
            self._remaining -= 1
            if self._remaining:
                return
            callbacks, self._callbacks = self._callbacks, []
            self._done.set()
        for callback in callbacks:
            callback()

    def wait(self, timeout: float) -> bool:
        return self._done.wait(max(timeout, 0.0))

    def add_done_callback(self, callback: Callable[[], None]) -> None:
        """Call `callback` (from the filling thread) when done, or now if already done."""
        with self._lock:
            if not self._done.is_set():
                self._callbacks.append(callback)
                return
        callback()

    @property
    def missing(self) -> int:
        with self._lock:
            return self._remaining

    def values(self) -> list[Any]:
        """The slots in input order, None where nothing has arrived."""
        with self._lock:
            return [None if v is _EMPTY else v for v in self._slots]
