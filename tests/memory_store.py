"""One partition's store in memory, with the processor's event-time expiry: a value set with
a ttl reads as gone once the partition's time reaches its stamp. Tests drive the processor's
per-record code over it, and test_store.py checks the RocksDB store against it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta


class Store:
    """One partition's store, in memory, with the store's event-time expiry: a value set
    with a ttl reads as gone once the partition's time reaches its stamp."""

    def __init__(self) -> None:
        self.items: dict[tuple[bytes, str], tuple[bytes, int | None]] = {}
        self.now_ms = 0
        self.high_water_ms = 0

    def at(self, timestamp_ms: int) -> None:
        """Before each record: its time stamps writes, and moves the partition's time on."""
        self.now_ms = timestamp_ms
        self.high_water_ms = max(self.high_water_ms, timestamp_ms)

    def state(self, key: bytes) -> KeyState:
        return KeyState(self, key)


@dataclass(frozen=True, slots=True)
class KeyState:
    """One key's state, with the calls the processor makes on it."""

    store: Store
    key: bytes

    def get_bytes(self, name: str) -> bytes | None:
        return self.get_stamped(name)[0]

    def get_stamped(self, name: str) -> tuple[bytes | None, int | None]:
        value, stamp = self.store.items.get((self.key, name), (None, None))
        if stamp is not None and stamp <= self.store.high_water_ms:
            return None, None
        return value, stamp

    def set_bytes(self, name: str, value: bytes, ttl: timedelta | None = None) -> None:
        stamp = None if ttl is None else self.store.now_ms + ttl // timedelta(milliseconds=1)
        self.put_stamped(name, value, stamp)

    def put_stamped(self, name: str, value: bytes, stamp: int | None) -> None:
        self.store.items[(self.key, name)] = (value, stamp)

    def delete(self, name: str) -> None:
        self.store.items.pop((self.key, name), None)
