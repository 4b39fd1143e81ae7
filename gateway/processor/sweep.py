"""Prune keys that nothing touches again, so state does not grow with history.

`decide` and `apply_event` prune a key's entries whenever it is touched, but a
key whose jobs all finished may never be touched again. Each partition's store
therefore keeps a schedule: when a key's next expiry (`core.prune_due_at`)
changes, the key is written into the time bucket of that expiry. Each record
processed on the partition then sweeps a bounded number of keys from buckets
whose time has passed (by the record's timestamp, so replays sweep alike):
the key is pruned through the core and, once empty, deleted, which writes a
tombstone to the changelog.

The schedule lives in the same store under a prefix no fingerprint can take,
as numbered items per bucket, so scheduling is O(1) and needs no iteration.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway.core import Entry, dump_entries, load_entries, prune, prune_due_at
from gateway.processor.metrics import Metrics

SCHEDULE_PREFIX = b"__gateway_prune_schedule__"
ENTRIES = "entries"  # the state name under each fingerprint

States = Callable[[bytes], Any]  # a prefix's state in the current partition transaction


class KeyStore:
    """A fingerprint's entries in the partition's state, with their prune schedule."""

    def __init__(self, retention_ms: int, metrics: Metrics, per_record: int = 50) -> None:
        self.retention_ms = retention_ms
        # Buckets much shorter than the retention, so keys go soon after expiry.
        self.bucket_ms = max(1000, min(3_600_000, retention_ms // 8))
        self.metrics = metrics
        self.per_record = per_record

    def load(self, states: States, key: str) -> tuple[Entry, ...]:
        return load_entries(states(key.encode()).get_bytes(ENTRIES))

    def store(
        self, states: States, key: str, before: tuple[Entry, ...], after: tuple[Entry, ...]
    ) -> None:
        """Write a key's entries; an empty key is deleted, leaving a changelog tombstone."""
        if after == before:
            return
        state = states(key.encode())
        if after:
            state.set_bytes(ENTRIES, dump_entries(after))
            if not before:
                self.metrics.state_keys.inc()
        else:
            state.delete(ENTRIES)
            self.metrics.state_keys.dec()
        due = prune_due_at(after, self.retention_ms)
        if due is not None and due != prune_due_at(before, self.retention_ms):
            self._schedule(states(SCHEDULE_PREFIX), key, due)

    def _schedule(self, schedule: Any, key: str, due_ms: int) -> None:
        bucket = due_ms // self.bucket_ms + 1  # swept once the whole bucket has passed
        count = schedule.get(f"n:{bucket}", 0)
        schedule.set(f"k:{bucket}:{count}", key)
        schedule.set(f"n:{bucket}", count + 1)
        cursor = schedule.get("cursor")
        if cursor is None or bucket < cursor[0]:
            schedule.set("cursor", [bucket, 0])

    def sweep(self, states: States, now_ms: int) -> None:
        """Prune up to `per_record` scheduled keys whose bucket has passed."""
        schedule = states(SCHEDULE_PREFIX)
        cursor = schedule.get("cursor")
        if cursor is None:
            return
        bucket, position = cursor
        budget = self.per_record
        while budget > 0 and bucket * self.bucket_ms <= now_ms:
            count = schedule.get(f"n:{bucket}", 0)
            while position < count and budget > 0:
                key = schedule.get(f"k:{bucket}:{position}")
                if key is not None:
                    schedule.delete(f"k:{bucket}:{position}")
                    entries = self.load(states, key)
                    self.store(states, key, entries, prune(entries, now_ms, self.retention_ms))
                position += 1
                budget -= 1
            if position < count:
                break
            schedule.delete(f"n:{bucket}")
            bucket, position = bucket + 1, 0
            budget -= 1  # an empty bucket costs a read too
        if [bucket, position] != cursor:
            schedule.set("cursor", [bucket, position])
