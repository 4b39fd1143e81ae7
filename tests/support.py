"""Helpers shared by tests."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar, cast

import orjson
import pytest
from jsonschema import Draft202012Validator
from referencing import Registry, Resource

from gateway.broker.ports import free_port_block as _block
from gateway.core import (
    DEFAULT_RETENTION_MS,
    Entry,
    EventResult,
    GatewayError,
    JobEvent,
    State,
    prune,
)
from gateway.core.lifecycle import on_key
from gateway.core.times import format_rfc3339
from gateway.processor.store import PartitionStore
from gateway.processor.task import PartitionTask, commit
from gateway.stage import requests as requests_module

_Test = TypeVar("_Test")


def compiled(module: ModuleType) -> bool:
    """Whether `module` runs as mypyc built it (gateway/compiled.py), not from its source."""
    return not str(module.__file__).endswith(".py")


def replaces_code(test: _Test) -> _Test:
    """A test that replaces a function of the request handler to make a record fail. Where
    `make install` compiled the handler, its calls never reach a replacement, so the test
    runs on the sources alone (test_compiled.py runs its file so)."""
    skip = pytest.mark.skipif(
        compiled(requests_module), reason="replaces compiled code: test_compiled.py runs it"
    )
    return cast(_Test, skip(test))


def payload(value: bytes | None) -> Any:
    """A record's JSON value (the record is not a tombstone)."""
    assert value is not None
    return orjson.loads(value)


SCHEMAS = Path(__file__).resolve().parents[1] / "topics" / "schemas"


def validator(name: str) -> Draft202012Validator:
    """A validator of a topic's schema, whose references to the others resolve."""
    schemas = [orjson.loads(path.read_bytes()) for path in sorted(SCHEMAS.glob("*.json"))]
    registry = Registry().with_resources(
        (schema["$id"], Resource.from_contents(schema)) for schema in schemas
    )
    return Draft202012Validator({"$ref": f"topics/schemas/{name}"}, registry=registry)


def is_trail(output: Any) -> bool:
    """An audit record of a record that is no request (stage/trail.py)."""
    return output.role == "decisions" and b'"kind":"request"' not in (output.value or b"")


def without_trail(outputs: Iterable[Any]) -> list[Any]:
    """The outputs besides such audit records: what a record answers and publishes."""
    return [o for o in outputs if not is_trail(o)]


def free_port_block() -> int:
    """A base port free for a three-node test cluster (base+0..2, base+100..102)."""
    return _block(brokers=3)


@dataclass(frozen=True)
class KeyEvent:
    """A job event applied to a key: the core's result, and the key's entries after it."""

    result: EventResult
    entries: tuple[Entry, ...]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.result, name)


def apply_event(
    entries: Iterable[Entry],
    event: JobEvent | GatewayError,
    now_ms: int,
    retention_ms: int = DEFAULT_RETENTION_MS,
) -> KeyEvent:
    """An event on a key known by its entries alone, as the processor applies it: the job's
    record (built from its entry) moves by `core.on_key`, the entries with it."""
    kept = prune(entries, now_ms, retention_ms)
    job_id = None if isinstance(event, GatewayError) else event.job_id
    entry = next((e for e in kept if e.job_id == job_id), None)
    job = None if entry is None else record_of(entry)
    result, after = on_key(job, kept, event, now_ms, retention_ms)
    return KeyEvent(result, after)


def record_of(entry: Entry) -> dict[str, Any]:
    """A job record for an entry: its state, times and attempts (an active job is on its
    first attempt)."""
    job: dict[str, Any] = {
        **(entry.job or {}),
        "id": entry.job_id,
        "type": entry.type,
        "queue": entry.queue,
        "state": str(entry.state),
        "attempt": 0 if entry.state in (State.AVAILABLE, State.SCHEDULED) else 1,
        "max_attempts": entry.max_attempts,
        "created_at": format_rfc3339(entry.created_at),
    }
    if entry.scheduled_at is not None:
        job["scheduled_at"] = format_rfc3339(entry.scheduled_at)
    return job


@dataclass(frozen=True)
class Changelogged:
    """A changelog record as the store's restore reads it (a Message's key, value, offset)."""

    _key: bytes
    _value: bytes | None
    _offset: int

    def key(self) -> bytes:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def offset(self) -> int:
        return self._offset


def changelogged(
    records: Sequence[tuple[bytes, bytes | None]], start: int = 0
) -> list[Changelogged]:
    """Changelog records (key, value) at offsets from `start`."""
    return [Changelogged(k, v, start + i) for i, (k, v) in enumerate(records)]


class MemoryTransaction:
    """A transaction into changelogs in memory (task.Transaction): each (topic, partition)'s
    records in order, each at its index as offset, reported delivered at the flush."""

    def __init__(self) -> None:
        self.logs: dict[tuple[str, int], list[tuple[bytes, bytes | None]]] = {}
        self.offsets: dict[tuple[str, int], int] = {}  # the input offsets committed
        self._reports: list[tuple[Callable[..., None], Changelogged]] = []

    def produce(
        self, topic: str, key: bytes | None, value: bytes | None, headers: Any = None,
        partition: int = -1, on_delivery: Callable[..., None] | None = None,
    ) -> None:  # fmt: skip
        assert key is not None, "a changelog record has a key"
        log = self.logs.setdefault((topic, partition), [])
        log.append((key, value))
        if on_delivery is not None:
            self._reports.append((on_delivery, Changelogged(key, value, len(log) - 1)))

    def send_offsets(self, offsets: list[tuple[str, int, int]]) -> None:
        self.offsets.update({(topic, partition): offset for topic, partition, offset in offsets})

    def flush(self) -> None:
        for report, record in self._reports:
            report(None, record)
        self._reports.clear()

    def commit_transaction(self) -> None:
        assert not self._reports, "flushed first"

    def log(self, role: str, partition: int) -> list[tuple[bytes, bytes | None]]:
        return self.logs.get((role, partition), [])


def commit_stores(
    stores: Mapping[tuple[str, int], PartitionStore], transaction: MemoryTransaction
) -> None:
    """Commit stores (by role and partition) as the loop commits its tasks (task.commit),
    each role's changelog being the topic named as the role."""
    tasks = [
        PartitionTask(role, partition, role, store, role)
        for (role, partition), store in stores.items()
    ]
    commit(tasks, transaction)


@dataclass(frozen=True)
class Consumed:
    """An input record as the loop hands it to the stages (a Message's accessors)."""

    _topic: str
    _partition: int
    _offset: int
    _timestamp_ms: int
    _key: bytes | None
    _value: bytes | None
    _headers: list[tuple[str, bytes]] | None = None

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def timestamp(self) -> tuple[int, int]:
        return 2, self._timestamp_ms  # LogAppendTime

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def headers(self) -> list[tuple[str, bytes]] | None:
        return self._headers
