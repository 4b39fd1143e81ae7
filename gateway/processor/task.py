"""One task per owned input partition, and the commit that carries the tasks' work.

A task is all the loop (loop.py) knows of one input partition it owns: the role of its
topic, its store and changelog when the role is stateful (the store is opened and closed
through stages.Stores, where the stages read it), its position (the offset after the last
record handled, not yet committed) and its state:

    RESTORING  its store is behind its changelog: the input is paused, and the restore
               (restore.py) alone writes the store
    RUNNING    its records are decided
    SUSPENDED  revoked: its last transaction commits (or, lost, aborts) before it closes
    CLOSED     gone, its store closed

    assigned -> RUNNING, or RESTORING -> RUNNING;  RUNNING -> SUSPENDED -> CLOSED;
    RESTORING -> CLOSED (it holds nothing of the open transaction)

`commit` is the one way a transaction's work is committed, whoever drives it: the loop
over Kafka, the tests over a changelog in memory. In order:

    prepare      sweep the expired values of the deciding tasks' stores; produce each
                 changed store's writes to its changelog, noting the offset the last one
                 reaches
    commit       send the tasks' positions with the transaction; flush (the changelog's
                 delivery reports); commit the transaction
    post-commit  only then write each changed store, in one batch with the changelog
                 offset it reached (store.py); the positions are committed

A crash before the post-commit leaves a store behind its changelog: the restore brings it up.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from enum import Enum
from typing import Any, Protocol

from confluent_kafka import KafkaError, KafkaException

from gateway.processor.store import PartitionStore

InputOffset = tuple[str, int, int]  # input topic, partition, offset of the next record


class State(Enum):
    RESTORING = "restoring"
    RUNNING = "running"
    SUSPENDED = "suspended"
    CLOSED = "closed"


class Transaction(Protocol):
    """What a commit drives: the loop's transactional producer (loop.py), or a changelog in
    memory (the tests'). A changelog record's delivery report says the offset it got."""

    def produce(
        self, topic: str, key: bytes | None, value: bytes | None, headers: Any = None,
        partition: int = -1, on_delivery: Callable[..., None] | None = None,
    ) -> None: ...  # fmt: skip
    def send_offsets(self, offsets: list[InputOffset]) -> None: ...
    def flush(self) -> None: ...
    def commit_transaction(self) -> None: ...


class PartitionTask:
    __slots__ = ("topic", "partition", "role", "store", "changelog", "state", "position",
                 "_logged", "_reached")  # fmt: skip

    def __init__(
        self, topic: str, partition: int, role: str, store: PartitionStore | None = None,
        changelog: str | None = None,
    ) -> None:  # fmt: skip
        """A task of an input partition just assigned; `store` and its `changelog` topic
        for a stateful role."""
        self.topic = topic
        self.partition = partition
        self.role = role
        self.store = store
        self.changelog = changelog
        self.state = State.RUNNING
        self.position: int | None = None
        # This commit's: None, the store is unchanged; False, it is written under the offset
        # it has (only local work); True, at the offset its last changelog record reached.
        self._logged: bool | None = None
        self._reached: int | None = None

    def __repr__(self) -> str:
        return f"PartitionTask({self.topic}[{self.partition}] {self.state.value})"

    # -- the lifecycle ---------------------------------------------------------------

    @property
    def owned(self) -> bool:
        return self.state in (State.RESTORING, State.RUNNING)

    def restoring(self) -> None:
        """Its store is behind (as it is assigned): nothing of it is decided until restored."""
        self._move(State.RESTORING, State.RUNNING)
        assert self.position is None, "a restoring task has handled no record"

    def restored(self) -> None:
        self._move(State.RUNNING, State.RESTORING)

    def suspend(self) -> None:
        """Revoked or lost: the open transaction's end decides what of it is kept."""
        self._move(State.SUSPENDED, State.RUNNING)

    def abandon(self) -> None:
        """The open transaction aborted: forget its writes and its position."""
        if self.store is not None:
            self.store.abandon()
        self.position = None

    def close(self) -> None:
        self._move(State.CLOSED, State.RESTORING, State.SUSPENDED)
        self.position = None

    def _move(self, to: State, *allowed: State) -> None:
        assert self.state in allowed, f"{self!r} cannot become {to.value}"
        self.state = to

    # -- the commit (see the module's docstring) ---------------------------------------

    def sweep(self) -> None:
        if self.store is not None:
            self.store.sweep_expired()

    def prepare(self, transaction: Transaction) -> None:
        """Produce the store's writes to its changelog, noting the offset the last one gets."""
        self._logged = self._reached = None
        store = self.store
        if store is None or not store.dirty:
            return
        assert self.changelog is not None, "a stateful task has its changelog"
        changes = list(store.changes())
        self._logged = bool(changes)  # False: a sweep that only tidied its local expiry index
        if not changes:
            return
        produce, topic, partition = transaction.produce, self.changelog, self.partition
        for key, value in changes[:-1]:
            produce(topic, key, value, None, partition)

        def delivered(err: Any, message: Any) -> None:
            if err is None:
                self._reached = message.offset()

        key, value = changes[-1]
        produce(topic, key, value, None, partition, delivered)

    def post_commit(self) -> None:
        self.position = None
        logged, self._logged = self._logged, None
        if logged is None:
            return
        assert self.store is not None
        offset = self._reached if logged else self.store.changelog_offset
        if offset is None:
            # Its last changelog record had no delivery report by the commit: it failed.
            raise KafkaException(KafkaError(KafkaError._FAIL, "changelog offset unknown"))
        self.store.committed(offset)


def commit(tasks: Iterable[PartitionTask], transaction: Transaction) -> None:
    """Prepare, commit, post-commit (see the module's docstring)."""
    # A store still restoring is written by its restore alone: a sweep's deletes would move
    # its changelog offset past records it has yet to read.
    deciding = [task for task in tasks if task.state in (State.RUNNING, State.SUSPENDED)]
    for task in deciding:
        task.sweep()
    for task in deciding:
        task.prepare(transaction)
    offsets = [(t.topic, t.partition, t.position) for t in deciding if t.position is not None]
    if offsets:
        transaction.send_offsets(offsets)
    transaction.flush()
    transaction.commit_transaction()
    for task in deciding:
        task.post_commit()
