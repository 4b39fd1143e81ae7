"""The prune schedule, over an in-memory stand-in for the partition store."""

from __future__ import annotations

from typing import Any

from gateway.core import Entry, State
from gateway.processor.metrics import Metrics
from gateway.processor.sweep import SCHEDULE_PREFIX, KeyStore

RETENTION = 8_000  # buckets of 1 s


class Store:
    def __init__(self) -> None:
        self.data: dict[tuple[bytes, str], Any] = {}

    def __call__(self, prefix: bytes) -> Any:
        store = self

        class PrefixState:
            def get(self, key: str, default: Any = None) -> Any:
                return store.data.get((prefix, key), default)

            def set(self, key: str, value: Any) -> None:
                store.data[(prefix, key)] = value

            get_bytes, set_bytes = get, set

            def delete(self, key: str) -> None:
                store.data.pop((prefix, key), None)

        return PrefixState()

    def keys(self) -> set[bytes]:
        return {p for p, _ in self.data if p != SCHEDULE_PREFIX}


def entry(job_id: str, state: State, at: int) -> Entry:
    return Entry(job_id, state, at, at, "t", "default")


def test_a_finished_key_nobody_touches_is_deleted_after_the_retention() -> None:
    store, keys = Store(), KeyStore(RETENTION, Metrics())
    done = (entry("a", State.COMPLETED, 1_000),)
    keys.store(store, "k1", (), done)
    keys.store(store, "k2", (), (entry("b", State.ACTIVE, 1_000),))
    keys.sweep(store, 1_000 + RETENTION - 1)
    assert keys.load(store, "k1") == done
    keys.sweep(store, 1_000 + RETENTION + 1_000)
    assert keys.load(store, "k1") == ()
    assert store.keys() == {b"k2"}  # the live key stays; k1 left a delete behind


def test_sweeping_is_bounded_per_record_and_resumes() -> None:
    store, keys = Store(), KeyStore(RETENTION, Metrics(), per_record=10)
    for i in range(25):
        keys.store(store, f"k{i}", (), (entry(str(i), State.DISCARDED, 0),))
    later = RETENTION + 2_000
    keys.sweep(store, later)
    assert len(store.keys()) == 15
    keys.sweep(store, later)
    keys.sweep(store, later)
    assert store.keys() == set()


def test_a_key_touched_again_is_rescheduled_only_when_its_expiry_moves() -> None:
    store, keys = Store(), KeyStore(RETENTION, Metrics())
    first = (entry("a", State.COMPLETED, 0),)
    keys.store(store, "k", (), first)
    second = (*first, entry("b", State.AVAILABLE, 10))
    keys.store(store, "k", first, second)  # same expiry: no second schedule item
    items = [k for p, k in store.data if p == SCHEDULE_PREFIX and k.startswith("k:")]
    assert len(items) == 1
    keys.sweep(store, RETENTION + 2_000)
    assert keys.load(store, "k") == (second[1],)
