"""The processor's consume–decide–produce loop, exactly-once (librdkafka's KIP-447 pattern).

Kafka does the distributed work: the consumer group assigns partitions, a
stable transactional id per runtime fences a predecessor at once, and one
transaction carries every output, every changelog record and the input
offsets. The loop only decides:

    consume a batch (whatever has arrived, up to BATCH records)
    begin a transaction if none is open
    hand the records to the stages, each partition's in log order; their
        outputs are produced into the transaction as they come
    once the commit interval has passed, commit (task.commit):
        produce each changed store's writes to its changelog
        send the consumed offsets with the group's metadata
        commit
        only then write each store (one RocksDB batch with its changelog offset)

Each owned input partition is a task (task.py), which holds its store, its
position and its state. On revoke the open transaction is committed before the
partitions go (the group waits for it); on a lost assignment it is aborted and
its writes forgotten. On assign each stateful partition whose store is behind
its changelog is paused, and restored a chunk per step (restore.py), before any
of its records is handled; the other partitions decide meanwhile. Any Kafka
error on the way ends the run: the supervisor starts a successor, which fences
this one and resumes from the last commit.
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
from gateway.processor.task import InputOffset, PartitionTask, State, commit

log = logging.getLogger("gateway.processor")

BATCH = 1_000  # records taken from the consumer at once
IDLE_WAIT_S = 0.05  # how long an idle loop waits for a record
# How long a restore waits for changelog records: alone, or beside partitions that decide.
RESTORE_WAIT_S = 0.1
SHARED_WAIT_S = 0.005
_FULL_WAIT_S = 0.05  # the producer's queue is full: serve deliveries this long, then retry


class BatchDecider(Protocol):
    """What decides a batch's records (stages.Stages; the bench floor's empty decision)."""

    def handle(self, records: list[Message]) -> None: ...


@dataclass(frozen=True)
class Topics:
    """Topic names the loop needs: its inputs and each stateful input's changelog."""

    inputs: list[str]
    roles: dict[str, str]  # input topic -> catalogue role
    changelogs: dict[str, str]  # stateful role -> its changelog topic


class KafkaTransaction:
    """The loop's transactional producer, as the stages produce into it and a commit drives
    it (task.Transaction)."""

    def __init__(self, producer: Producer, consumer: Consumer) -> None:
        self._producer = producer
        self._consumer = consumer
        self.open = False

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

    def begin(self) -> None:
        self._producer.begin_transaction()
        self.open = True

    def send_offsets(self, offsets: list[InputOffset]) -> None:
        self._producer.send_offsets_to_transaction(
            [TopicPartition(t, p, o) for t, p, o in offsets],
            self._consumer.consumer_group_metadata(), 30,
        )  # fmt: skip

    def flush(self) -> None:
        self._producer.flush(30)  # serves the changelog's delivery reports

    def commit_transaction(self) -> None:
        self._producer.commit_transaction(30)
        self.open = False

    def abort(self) -> None:
        self._producer.abort_transaction(30)
        self.open = False


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
        self._transaction = KafkaTransaction(self._producer, self._consumer)
        # Produce into the open transaction (what the stages emit through).
        self.produce = self._transaction.produce
        self._restorer = Restorer(
            restore_config, str(consumer_config["group.id"]), metrics.observe_consumer_stats
        )
        self._topics = topics
        self._stores = stores
        # Set once built (they emit through `produce`): they handle every record.
        self.stages: BatchDecider | None = None
        self._commit_interval = commit_interval
        self._metrics = metrics
        self._due = 0.0
        # (input topic, partition) -> its task, from its assignment until it goes.
        self._tasks: dict[tuple[str, int], PartitionTask] = {}
        # What the tasks own, as other threads read it (readiness, the ticks): replaced
        # whole when a rebalance callback is done with its tasks, never seen halfway.
        self._owned: tuple[tuple[str, int], ...] = ()
        self.stopping = False
        self.failed = False

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
            if self._transaction.open:
                self._commit()
        except BaseException:
            self.failed = True
            raise
        finally:
            self._close()

    @property
    def owned(self) -> tuple[tuple[str, int], ...]:
        """The input partitions this run owns (read from any thread)."""
        return self._owned

    @property
    def restoring(self) -> bool:
        """Whether a store of this run's partitions is still behind its changelog."""
        return any(task.state is State.RESTORING for task in list(self._tasks.values()))

    def stop(self) -> None:
        """End the run after the current batch (from any thread: a flag)."""
        self.stopping = True

    def _step(self) -> None:
        consumer = self._consumer
        restoring = self.restoring
        if restoring:
            self._restore_chunk()
            restoring = self.restoring
        messages = consumer.consume(BATCH, 0)
        if not messages and not restoring:
            wait = IDLE_WAIT_S
            if self._transaction.open:
                wait = max(0.0, min(wait, self._due - time.monotonic()))
            first = consumer.poll(wait)
            messages = [] if first is None else [first, *consumer.consume(BATCH - 1, 0)]
        if messages:
            self._handle(messages)
        if self._transaction.open and time.monotonic() >= self._due:
            self._commit()

    def _handle(self, messages: list[Message]) -> None:
        records = []
        tasks = self._tasks
        for message in messages:
            error = message.error()
            if error is not None:
                if error.fatal() or error.code() != KafkaError._PARTITION_EOF:
                    raise KafkaException(error)
                continue
            records.append(message)
            tasks[(message.topic(), message.partition())].position = message.offset() + 1  # type: ignore[index,operator]
        if not records:
            return
        if not self._transaction.open:
            self._transaction.begin()
            self._due = time.monotonic() + self._commit_interval
        assert self.stages is not None, "the loop runs with its stages"
        self.stages.handle(records)
        processed = self._metrics.processed
        for task in tasks.values():
            if task.position is not None:
                processed(task.topic, task.partition, task.position - 1)

    def _commit(self) -> None:
        commit(self._tasks.values(), self._transaction)
        self._count_keys()

    def _count_keys(self) -> None:
        """The state's fingerprints, read from the stores whenever they are written, opened or
        closed: at most a commit interval old."""
        self._metrics.state_keys.set(self._stores.fingerprints())

    # -- rebalances ------------------------------------------------------------------

    def _restore_chunk(self) -> None:
        """One chunk of the restore; resume the inputs whose stores it brought up to date."""
        tasks = self._tasks.values()
        deciding = any(task.state is State.RUNNING for task in tasks)
        done = set(self._restorer.step(SHARED_WAIT_S if deciding else RESTORE_WAIT_S))
        resumed = []
        for task in tasks:
            if task.state is State.RESTORING and (task.changelog, task.partition) in done:
                task.restored()
                resumed.append(TopicPartition(task.topic, task.partition))
        if resumed:
            self._consumer.resume(resumed)
        self._count_keys()
        if not self.restoring:
            log.info("processing partitions", extra={"partitions": len(self.owned)})

    def _assigned(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        """Open the stores; pause each input whose store is behind until it is restored."""
        consumer.assign(partitions)
        assigned: dict[tuple[str, int], PartitionTask] = {}
        stateful: dict[tuple[str, int], PartitionTask] = {}  # by changelog partition
        for tp in partitions:
            role = self._topics.roles[tp.topic]
            task = PartitionTask(tp.topic, tp.partition, role)
            if role in STATEFUL:
                task.store = self._stores.get(role, tp.partition)
                task.changelog = self._topics.changelogs[role]
                stateful[(task.changelog, tp.partition)] = task
            assigned[(tp.topic, tp.partition)] = task
        behind = self._restorer.add(
            [(*where, t.store) for where, t in stateful.items() if t.store is not None]
        )
        paused = [stateful[where] for where in behind]
        for task in paused:
            task.restoring()
        if paused:
            consumer.pause([TopicPartition(t.topic, t.partition) for t in paused])
        self._tasks.update(assigned)
        self._publish()
        self._count_keys()
        if not self.restoring:
            log.info("processing partitions", extra={"partitions": len(self.owned)})

    def _revoked(self, _consumer: Any, partitions: list[TopicPartition]) -> None:
        """The group waits for this: finish the open transaction before the partitions go."""
        suspended = self._going(partitions)
        if self._transaction.open and not self.failed:
            self._commit()
        self._forget(suspended)

    def _lost(self, _consumer: Any, partitions: list[TopicPartition]) -> None:
        """Another member may own them already: nothing of this transaction may commit."""
        suspended = self._going(partitions)
        if self._transaction.open:
            self._transaction.abort()
        for task in self._tasks.values():
            task.abandon()
        self._forget(suspended)  # closing stores: the stages forget what they remember of them

    def _going(self, partitions: list[TopicPartition]) -> list[PartitionTask]:
        """The tasks of partitions no longer owned. A restoring one holds nothing of the open
        transaction and closes at once; a running one is suspended until the transaction's
        end, and returned."""
        going = [self._tasks[(tp.topic, tp.partition)] for tp in partitions]
        self._close_tasks([task for task in going if task.state is State.RESTORING])
        running = [task for task in going if task.state is State.RUNNING]
        for task in running:
            task.suspend()
        self._publish()
        return running

    def _forget(self, suspended: list[PartitionTask]) -> None:
        self._close_tasks(suspended)
        self._count_keys()

    def _publish(self) -> None:
        self._owned = tuple(where for where, task in self._tasks.items() if task.owned)

    def _close_tasks(self, tasks: list[PartitionTask]) -> None:
        """Close the tasks and their stores (the stages forget what they knew of them)."""
        self._restorer.drop([(t.changelog, t.partition) for t in tasks if t.changelog is not None])
        for task in tasks:
            task.close()
            del self._tasks[(task.topic, task.partition)]
        self._publish()
        self._stores.close((task.role, task.partition) for task in tasks)

    def _close(self) -> None:
        try:
            self._consumer.close()
        finally:
            self._restorer.close()
            self._stores.close(list(self._stores.open))
