"""The processor's consume–decide–produce loop, exactly-once (librdkafka's KIP-447 pattern).

Kafka does the distributed work: the consumer group assigns partitions, a
stable transactional id per runtime fences a predecessor at once, and one
transaction carries every output, every changelog record and the input
offsets. The loop only decides:

    consume a batch (whatever has arrived, up to BATCH records)
    begin a transaction if none is open
    hand the records to the stages, each partition's in log order; their
        outputs are produced into the transaction as they come
    once the commit interval has passed:
        produce each changed store's writes to its changelog
        send the consumed offsets with the group's metadata
        commit
        only then write each store (one RocksDB batch with its changelog offset)

On revoke the open transaction is committed before the partitions go (the
group waits for it); on a lost assignment it is aborted and its writes
forgotten. On assign each stateful partition whose store is behind its
changelog is paused, and restored a chunk per step (restore.py), before any
of its records is handled; the other partitions decide meanwhile. Any Kafka error on the way
ends the run: the supervisor starts a successor, which fences this one and
resumes from the last commit.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from gateway.processor.changelogs import STATEFUL
from gateway.processor.metrics import Metrics
from gateway.processor.restore import Restorer
from gateway.processor.stages import Stores
from gateway.processor.store import PartitionStore

log = logging.getLogger("gateway.processor")

BATCH = 1_000  # records taken from the consumer at once
IDLE_WAIT_S = 0.05  # how long an idle loop waits for a record
# How long a restore waits for changelog records: alone, or beside partitions that decide.
RESTORE_WAIT_S = 0.1
SHARED_WAIT_S = 0.005
_FULL_WAIT_S = 0.05  # the producer's queue is full: serve deliveries this long, then retry


class Handler(Protocol):
    """What decides a batch's records (stages.Stages; the bench floor's empty decision)."""

    def handle(self, records: list[Message]) -> None: ...


@dataclass(frozen=True)
class Topics:
    """Topic names the loop needs: its inputs and each stateful input's changelog."""

    inputs: list[str]
    roles: dict[str, str]  # input topic -> catalogue role
    changelogs: dict[str, str]  # stateful role -> its changelog topic


class Loop:
    def __init__(
        self,
        consumer_config: dict[str, Any],
        producer_config: dict[str, Any],
        restore_config: dict[str, Any],
        topics: Topics,
        stores: Stores,
        commit_interval: float,
        metrics: Metrics,
    ) -> None:
        self._consumer = Consumer(consumer_config)
        self._producer = Producer(producer_config)
        self._restorer = Restorer(
            restore_config, str(consumer_config["group.id"]), metrics.observe_consumer_stats
        )
        # Changelog partition -> the input partition paused until its store is restored.
        self._paused: dict[tuple[str, int], TopicPartition] = {}
        self._topics = topics
        self._stores = stores
        # Set once built (they emit through `produce`): they handle every record.
        self.stages: Handler | None = None
        self._commit_interval = commit_interval
        self._metrics = metrics
        self._open = False
        self._due = 0.0
        self._positions: dict[tuple[str, int], int] = {}
        self.owned: set[tuple[str, int]] = set()
        self.stopping = False
        self.failed = False

    # -- producing -----------------------------------------------------------------

    def produce(
        self, topic: str, key: bytes | None, value: bytes | None, headers: Any = None,
        partition: int = -1, on_delivery: Callable[..., None] | None = None,
    ) -> None:  # fmt: skip
        """Produce into the open transaction, waiting while the local queue is full."""
        while True:
            try:
                if headers is None:  # the keyword alone costs confluent-kafka 0.2 µs a record
                    self._producer.produce(topic, value, key, partition, on_delivery)
                else:
                    self._producer.produce(
                        topic, value, key, partition, on_delivery, headers=headers
                    )
                return
            except BufferError:
                self._producer.poll(_FULL_WAIT_S)

    # -- the loop ------------------------------------------------------------------

    def run(self) -> None:
        """Run until `stop()`; raise on any Kafka error (the run's transaction is then
        aborted by the successor's fencing, or by the broker's timeout)."""
        try:
            self._producer.init_transactions(30)
            self._consumer.subscribe(
                self._topics.inputs,
                on_assign=self._assigned, on_revoke=self._revoked, on_lost=self._lost,
            )  # fmt: skip
            while not self.stopping:
                self._step()
            if self._open:
                self._commit()
        except BaseException:
            self.failed = True
            raise
        finally:
            self._close()

    @property
    def restoring(self) -> bool:
        """Whether a store of this run's partitions is still behind its changelog."""
        return bool(self._restorer.pending)

    def stop(self) -> None:
        """End the run after the current batch (from any thread: a flag)."""
        self.stopping = True

    def _step(self) -> None:
        consumer = self._consumer
        if self._restorer.pending:
            self._restore_chunk()
        messages = consumer.consume(BATCH, 0)
        if not messages and not self._restorer.pending:
            wait = IDLE_WAIT_S
            if self._open:
                wait = max(0.0, min(wait, self._due - time.monotonic()))
            first = consumer.poll(wait)
            messages = [] if first is None else [first, *consumer.consume(BATCH - 1, 0)]
        if messages:
            self._handle(messages)
        if self._open and time.monotonic() >= self._due:
            self._commit()

    def _handle(self, messages: list[Message]) -> None:
        records = []
        positions = self._positions
        for message in messages:
            error = message.error()
            if error is not None:
                if error.fatal() or error.code() != KafkaError._PARTITION_EOF:
                    raise KafkaException(error)
                continue
            records.append(message)
            positions[(message.topic(), message.partition())] = message.offset() + 1  # type: ignore[index,operator]
        if not records:
            return
        if not self._open:
            self._producer.begin_transaction()
            self._open = True
            self._due = time.monotonic() + self._commit_interval
        assert self.stages is not None, "the loop runs with its stages"
        self.stages.handle(records)
        processed = self._metrics.processed
        for (topic, partition), position in positions.items():
            processed(topic, partition, position - 1)

    # -- committing ------------------------------------------------------------------

    def _commit(self) -> None:
        """Changelogs, offsets, commit; then the stores (see the module's docstring)."""
        reached: dict[tuple[str, int], int] = {}
        # A store still restoring is written by its restore alone: a sweep's deletes would
        # move its changelog offset past records it has yet to read.
        restoring = {r.store for r in self._restorer.pending.values()}
        for store in self._stores.open.values():
            if store not in restoring:
                store.sweep_expired()
        changed = [(key, store) for key, store in self._stores.open.items() if store.dirty]
        logged = {key for key, store in changed if self._log_changes(*key, store, reached)}
        offsets = [TopicPartition(t, p, o) for (t, p), o in self._positions.items()]
        if offsets:
            self._producer.send_offsets_to_transaction(
                offsets, self._consumer.consumer_group_metadata(), 30
            )
        self._producer.flush(30)  # serves the changelog's delivery reports
        self._producer.commit_transaction(30)
        self._open = False
        self._positions.clear()
        for key, store in changed:
            offset = reached.get(key) if key in logged else store.changelog_offset
            if offset is None:
                raise KafkaException(KafkaError(KafkaError._FAIL, "changelog offset unknown"))
            store.committed(offset)
        self._count_keys()

    def _count_keys(self) -> None:
        """The state's fingerprints, read from the stores whenever they are written, opened or
        closed: at most a commit interval old."""
        self._metrics.state_keys.set(self._stores.fingerprints())

    def _log_changes(
        self, role: str, partition: int, store: PartitionStore, reached: dict[tuple[str, int], int]
    ) -> bool:
        """Produce a store's writes to its changelog, and note the offset the last one gets;
        False when it has none (a sweep that only tidied its local expiry index)."""
        topic = self._topics.changelogs[role]
        changes = list(store.changes())
        if not changes:
            return False
        for key, value in changes[:-1]:
            self.produce(topic, key, value, None, partition)

        def delivered(err: KafkaError | None, message: Message) -> None:
            if err is None:
                reached[(role, partition)] = message.offset()  # type: ignore[assignment]

        key, value = changes[-1]
        self.produce(topic, key, value, None, partition, delivered)
        return True

    # -- rebalances ------------------------------------------------------------------

    def _restore_chunk(self) -> None:
        """One chunk of the restore; resume the inputs whose stores it brought up to date."""
        deciding = self.owned - self._paused_inputs()
        done = self._restorer.step(SHARED_WAIT_S if deciding else RESTORE_WAIT_S)
        resumed = [self._paused.pop(where) for where in done if where in self._paused]
        if resumed:
            self._consumer.resume(resumed)
        self._count_keys()
        if not self._restorer.pending:
            log.info("processing partitions", extra={"partitions": len(self.owned)})

    def _paused_inputs(self) -> set[tuple[str, int]]:
        return {(tp.topic, tp.partition) for tp in self._paused.values()}

    def _assigned(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        """Open the stores; pause each input whose store is behind until it is restored."""
        consumer.assign(partitions)
        stateful, inputs = [], {}
        for tp in partitions:
            role = self._topics.roles[tp.topic]
            if role in STATEFUL:
                changelog = (self._topics.changelogs[role], tp.partition)
                stateful.append((*changelog, self._stores.get(role, tp.partition)))
                inputs[changelog] = tp
        self._restorer.add(stateful)
        behind = [inputs[where] for where in self._restorer.pending if where in inputs]
        if behind:
            consumer.pause(behind)
            self._paused |= {where: inputs[where] for where in self._restorer.pending}
        self.owned |= {(tp.topic, tp.partition) for tp in partitions}
        self._count_keys()
        if not self._restorer.pending:
            log.info("processing partitions", extra={"partitions": len(self.owned)})

    def _revoked(self, _consumer: Any, partitions: list[TopicPartition]) -> None:
        """The group waits for this: finish the open transaction before the partitions go."""
        self.owned -= {(tp.topic, tp.partition) for tp in partitions}
        if self._open and not self.failed:
            self._commit()
        self._forget(partitions)

    def _lost(self, _consumer: Any, partitions: list[TopicPartition]) -> None:
        """Another member may own them already: nothing of this transaction may commit."""
        self.owned -= {(tp.topic, tp.partition) for tp in partitions}
        if self._open:
            self._producer.abort_transaction(30)
            self._open = False
        self._positions.clear()
        self._stores.abandon()
        self._forget(partitions)

    def _forget(self, partitions: list[TopicPartition]) -> None:
        roles, changelogs = self._topics.roles, self._topics.changelogs
        gone = [
            (changelogs[roles[tp.topic]], tp.partition)
            for tp in partitions
            if roles[tp.topic] in STATEFUL
        ]
        self._restorer.drop(gone)
        for where in gone:
            self._paused.pop(where, None)
        for tp in partitions:
            self._positions.pop((tp.topic, tp.partition), None)
        self._stores.close((roles[tp.topic], tp.partition) for tp in partitions)
        self._count_keys()

    def _close(self) -> None:
        try:
            self._consumer.close()
        finally:
            self._restorer.close()
            self._stores.close(list(self._stores.open))
