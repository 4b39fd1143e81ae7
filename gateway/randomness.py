"""Random ids for requests, correlations and claims, read from the OS in blocks.

One getrandom call per 256 ids rather than one per id: ids are taken on every
request, and the call was a measurable share of the HTTP binding's CPU. The
bytes are the same (the OS's CSPRNG); a child process after fork starts afresh,
so parent and child never hand out the same bytes.
"""

from __future__ import annotations

import os
import threading
import uuid

_BLOCK = 4096
_lock = threading.Lock()
_pool = b""
_taken = 0


def _forget_pool() -> None:
    global _pool, _taken
    _pool, _taken = b"", 0


os.register_at_fork(after_in_child=_forget_pool)


def random_bytes(n: int) -> bytes:
    """`n` (at most 4096) fresh random bytes; no two calls return the same bytes."""
    global _pool, _taken
    with _lock:
        if _taken + n > len(_pool):
            _pool, _taken = os.urandom(_BLOCK), 0
        start, _taken = _taken, _taken + n
        return _pool[start:_taken]


def random_hex() -> str:
    """128 random bits as 32 hex digits, as `uuid.uuid4().hex` is used for: a unique name."""
    return random_bytes(16).hex()


def random_uuid4() -> str:
    """A random (version 4) UUID in its usual text form."""
    return str(uuid.UUID(bytes=random_bytes(16), version=4))
