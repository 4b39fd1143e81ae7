"""Following `job_states` into the view, and telling when the view is live.

Right after the topics are created, the brokers' metadata may list none or
only some of the topic's partitions, so the follower asks again until it lists
as many as the catalogue says the topic has. It is `live` once it reads all of
them and has reached the end offsets they had when it started; until then
`reason` says what it waits for, and health answers 503 with it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from confluent_kafka import Consumer, KafkaException, Message, TopicPartition

from gateway import follow
from gateway.catalogue import Catalogue
from gateway.view.store import JobView

log = logging.getLogger("gateway.view")

_POLL_S = 0.02
_BATCH = 500
_SWEEP_EVERY_S = 1.0
_METADATA_RETRY_S = 0.5
_METADATA_TIMEOUT_S = 5.0


class _Reader(follow.Reader, Protocol):
    """What the view's follower needs of a Kafka consumer (a fake one in unit tests)."""

    def list_topics(self, topic: str, timeout: float) -> Any: ...
    def get_watermark_offsets(
        self, partition: TopicPartition, timeout: float, cached: bool
    ) -> tuple[int, int]: ...
    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]: ...


class Follower:
    """A background thread copying committed `job_states` records into the view, from
    where the view stopped (the start, for a new view); a batch it fails on is skipped,
    so the thread outlives any one bad batch."""

    def __init__(
        self,
        view: JobView,
        cat: Catalogue,
        settings: Mapping[str, Any],
        consumer: _Reader | None = None,
        on_live: Callable[[], None] | None = None,
    ) -> None:
        self._view = view
        self._on_live = on_live
        self._topic = cat.name("job_states")
        self._expected = cat.by_role("job_states").partitions
        # Never commits: the offsets live in the view, with the data.
        self._consumer: _Reader = consumer or Consumer(
            follow.reader_settings(settings, "gateway-http")
        )
        self._swept_at = 0.0
        self._behind: dict[int, int] = {}  # partition -> the end offset it must reach
        self.live = threading.Event()
        self.reason = "the job view has not started reading job_states"
        self._follower = follow.Follower(
            self._consumer, self._topic, self, what="the job view", thread="gateway-http-view",
            batch=_BATCH, poll_s=_POLL_S, reread=False,
        )  # fmt: skip

    def start(self) -> None:
        self._follower.start()

    def stop(self) -> None:
        self._follower.stop()

    def offsets(self) -> dict[int, int]:
        return self._view.offsets()

    def partitions(self, stopping: threading.Event) -> list[int] | None:
        """Every partition once metadata lists them all, and the end offsets each must
        reach to be live; None if stopped first."""
        partitions = self._await_partitions(stopping)
        if partitions is None:
            return None
        stored = self._view.offsets()
        ends = self._await_ends(partitions, stopping)
        if ends is None:
            return None
        self._behind = {p: end for p, end in ends.items() if end > stored.get(p, 0)}
        self.reason = (
            f"the job view is reading {self._topic} up to the end offsets it saw at start "
            f"({len(self._behind)} of {len(partitions)} partitions to go)"
        )
        return partitions

    def take(self, messages: list[Message]) -> None:
        records = [r for r in map(self._record, messages) if r is not None]
        if records:
            self._view.apply(records, time.time_ns() // 1_000_000)
        if not self.live.is_set():
            self._check_caught_up()
        if time.monotonic() - self._swept_at >= _SWEEP_EVERY_S:
            self._swept_at = time.monotonic()
            self._view.sweep(time.time_ns() // 1_000_000)

    def _await_partitions(self, stopping: threading.Event) -> list[int] | None:
        while not stopping.is_set():
            try:
                metadata = self._consumer.list_topics(self._topic, timeout=_METADATA_TIMEOUT_S)
                topic = metadata.topics.get(self._topic)
                listed = [] if topic is None or topic.error is not None else topic.partitions
                found = sorted(listed)
                problem = f"its metadata lists {len(found)} of its {self._expected} partitions"
            except KafkaException as exc:
                found, problem = [], f"Kafka did not answer: {exc.args[0].str()}"
            if found and len(found) >= self._expected:
                return found
            self.reason = f"the job view waits for topic {self._topic}: {problem}"
            log.info("the job view waits for %s: %s", self._topic, problem)
            stopping.wait(_METADATA_RETRY_S)
        return None

    def _await_ends(
        self, partitions: list[int], stopping: threading.Event
    ) -> dict[int, int] | None:
        ends: dict[int, int] = {}
        while not stopping.is_set():
            try:
                for p in partitions:
                    if p not in ends:
                        _, ends[p] = self._consumer.get_watermark_offsets(
                            TopicPartition(self._topic, p), timeout=_METADATA_TIMEOUT_S,
                            cached=False,
                        )  # fmt: skip
                return ends
            except KafkaException as exc:
                self.reason = (
                    f"the job view could not read the end offsets of {self._topic}: "
                    f"{exc.args[0].str()}"
                )
                stopping.wait(_METADATA_RETRY_S)
        return None

    def _check_caught_up(self) -> None:
        """Live once every partition has reached the end offset it had at start
        (a read_committed position moves past transaction markers too)."""
        if self._behind:
            asked = [TopicPartition(self._topic, p) for p in self._behind]
            for tp in self._consumer.position(asked):
                if tp.offset >= 0 and tp.offset >= self._behind[tp.partition]:
                    del self._behind[tp.partition]
        if self._behind:
            self.reason = (
                f"the job view is reading {self._topic} up to the end offsets it saw at start "
                f"({len(self._behind)} partitions to go)"
            )
            return
        self.reason = ""
        self.live.set()
        if self._on_live is not None:
            self._on_live()

    def _record(self, msg: Message) -> tuple[int, int, bytes, bytes | None] | None:
        error, partition, offset = msg.error(), msg.partition(), msg.offset()
        if error is not None or partition is None or offset is None:
            log.warning("reading job_states failed", extra={"error": error and error.str()})
            return None
        return (partition, offset, msg.key() or b"", msg.value())
