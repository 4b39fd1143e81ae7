"""Following a topic into a local store: a thread reading committed records as they come.

The job view (view/follower.py) and a serve process's audit index
(audit/follow.py) each keep a store of one topic, with how far they read
beside the data. Each follows it with a consumer of its own: a fresh group id
it never joins (partitions are assigned), read_committed, and nothing
committed, since where to resume is the store's. The store says which
partitions to read (`Store.partitions`, which may wait for them) and from
where (`Store.offsets`: the start of the log where it has read nothing), and
takes every batch consumed (`Store.take`, an empty one too).
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Mapping
from typing import Any, Protocol

from confluent_kafka import OFFSET_BEGINNING, KafkaException, Message, TopicPartition

log = logging.getLogger("gateway.follow")

# After a failure, a follower that reads again (`reread`) waits this long first.
RETRY_S = 1.0


def reader_settings(settings: Mapping[str, Any], group: str) -> dict[str, Any]:
    """A consumer's settings for a follower: its own group `group`-<random> (never joined:
    partitions are assigned), read_committed, nothing committed."""
    return {
        **settings,
        "group.id": f"{group}-{uuid.uuid4().hex}",
        "enable.auto.commit": False,
        "isolation.level": "read_committed",
    }


class Reader(Protocol):
    """What a follower needs of a Kafka consumer (a fake one in unit tests)."""

    def assign(self, partitions: list[TopicPartition]) -> None: ...
    def consume(self, num_messages: int, timeout: float) -> list[Message]: ...
    def close(self) -> None: ...


class Store(Protocol):
    def partitions(self, stopping: threading.Event) -> list[int] | None:
        """The partitions to read; None if `stopping` was set first."""

    def offsets(self) -> Mapping[int, int]:
        """Per partition, the next offset to read (none: from the start of the log)."""

    def take(self, messages: list[Message]) -> None:
        """A batch consumed (empty when nothing came within the poll)."""


class Follower:
    """A daemon thread feeding `store` what `consumer` reads of `topic`, from where the
    store stopped. After a failure it goes on with the next batch, or, if `reread` (or
    it failed to assign), waits RETRY_S and assigns again from where the store stopped,
    so a batch it could not take is read again, never skipped. `what` names it in the
    log."""

    def __init__(
        self, consumer: Reader, topic: str, store: Store, *, what: str, thread: str,
        batch: int, poll_s: float, reread: bool,
    ) -> None:  # fmt: skip
        self._consumer, self._topic, self._store = consumer, topic, store
        self._what, self._batch, self._poll_s, self._reread = what, batch, poll_s, reread
        self.stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=thread, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.stopping.set()
        if self._thread.is_alive():
            self._thread.join()
        self._consumer.close()

    def _assign(self) -> bool:
        """Assign every partition the store names, from its offsets; False if stopped first."""
        partitions = self._store.partitions(self.stopping)
        if partitions is None:
            return False
        stored = self._store.offsets()
        self._consumer.assign([
            TopicPartition(self._topic, p, stored.get(p, OFFSET_BEGINNING)) for p in partitions
        ])  # fmt: skip
        return True

    def _run(self) -> None:
        assigned = False
        while not self.stopping.is_set():
            try:
                if not assigned:
                    if not self._assign():
                        return
                    assigned = True
                    self._store.take([])
                self._store.take(self._consumer.consume(self._batch, self._poll_s))
            except Exception as exc:  # the thread must outlive any one failure
                if assigned and not self._reread:
                    log.exception("%s failed on a batch; continuing", self._what)
                    continue
                if isinstance(exc, KafkaException):
                    log.warning("%s cannot read %s: %s", self._what, self._topic, exc.args[0])
                else:
                    log.exception("%s failed on a batch; reading it again", self._what)
                assigned = False
                self.stopping.wait(RETRY_S)
