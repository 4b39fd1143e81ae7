"""A serve process's audit index of decisions: followed as records come, read by position.

Each serve process keeps it beside its job view (index.py), follows
`decisions` into it (follow.py's Follower) and reads exactly a key's records by
their positions (follow.read_at); GET /ojs/v1/admin/unique-jobs/{key}/history
(http/history.py) serves a page of them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient

from gateway.audit import follow, history
from gateway.audit.index import AuditIndex, DecisionAt, open_index
from gateway.audit.verify import PLAIN, Verifier
from gateway.processor.state_identity import Identity

SETTLE_S = 2.0
_SETTLE_POLL_S = 0.02


def audit_dir(view_dir: Path) -> Path:
    """Beside the view, one per serve process as the view is (so `kafka down --purge`,
    which deletes the views of its cluster, finds it too)."""
    return view_dir.parent / f"{view_dir.name}-audit"


class KeyHistory:
    """A serve process's audit index, what follows `decisions` into it, and a reader.

    `read` reads records by position (one reader: calls are serialised) and `ends`
    gives each partition's committed end now."""

    def __init__(
        self,
        index: AuditIndex,
        topic: str,
        read: history.Read,
        ends: Callable[[], Mapping[int, int]],
        follower: follow.Follower | None = None,
        verifier: Verifier = PLAIN,
    ) -> None:
        self.index, self.topic, self._read, self._ends = index, topic, read, ends
        self._follower = follower
        self.verifier = verifier
        self._lock = threading.Lock()

    @staticmethod
    def open(
        directory: Path, identity: Identity, topic: str, settings: Mapping[str, Any],
        admin: AdminClient, verifier: Verifier,
    ) -> KeyHistory:  # fmt: skip
        index = open_index(directory, identity)
        reader = follow.consumer(settings, seeking=True)

        def ends() -> Mapping[int, int]:
            listed = admin.list_topics(topic, timeout=follow.TIMEOUT_S).topics[topic].partitions
            return follow.committed_ends(admin, topic, listed)

        follower = follow.Follower(index, topic, follow.consumer(settings))
        read: history.Read = lambda p: follow.read_at(reader, topic, p)  # noqa: E731
        return KeyHistory(index, topic, read, ends, follower, verifier)

    def start(self) -> None:
        if self._follower is not None:
            self._follower.start()

    def close(self) -> None:
        if self._follower is not None:
            self._follower.stop()
        self.index.close()

    def settle(self) -> int:
        """Wait (up to SETTLE_S) for the index to reach the committed ends as they are now;
        how many offsets it is behind them then."""
        ends = self._ends()
        deadline = time.monotonic() + SETTLE_S
        while True:
            held = self.index.offsets()
            behind = sum(max(0, end - held.get(p, 0)) for p, end in ends.items())
            if behind == 0 or time.monotonic() >= deadline:
                return behind
            time.sleep(_SETTLE_POLL_S)

    def page(self, key: str, start: DecisionAt, limit: int) -> history.Page | None:
        with self._lock:
            return history.page(self.index, key, start, limit, self._read, self.verifier)

    def count(self, key: str) -> int:
        return history.count(self.index, key)
