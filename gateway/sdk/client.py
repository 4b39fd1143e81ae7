"""The producer SDK: validate and fingerprint locally, produce to `requests`, await decisions.

A request that wants its decision carries `reply_to` (the catalogue's
`replies` topic) and a `correlation_id`; the processor writes the committed
decision there with that header. One background thread per client serves the
producer's delivery reports and reads the replies, and hands each answer to
the call waiting for it, so any number of threads may enqueue at once.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal, overload

import orjson
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from gateway import catalogue, config, wire
from gateway.core import GatewayError
from gateway.core.idempotency import key_problem
from gateway.partitioner import PRODUCER_SETTING
from gateway.randomness import random_hex
from gateway.sdk.errors import (
    INVALID_REPLY,
    KAFKA,
    UNKNOWN_TOPIC,
    ClientClosed,
    ClientError,
    DeliveryFailed,
    EnqueueTimeout,
    Invalid,
    InvalidEvent,
    InvalidJob,
)
from gateway.sdk.prepare import Outgoing, idempotent, prepare, prepare_event
from gateway.sdk.result import EnqueueResult, EventAck, Sent
from gateway.sdk.ticket import Ticket

log = logging.getLogger("gateway.sdk")

DEFAULT_TIMEOUT = 30.0
DEFAULT_MANY_TIMEOUT = 120.0
_IDLE_POLL_S = 0.05
# librdkafka's RD_KAFKA_PARTITION_UA: the configured partitioner picks (by the key).
_ANY_PARTITION = -1
_REPLY_BATCH = 1000
# How long the producer holds a request to batch it with the next ones. A caller
# waiting for its answer waits this long first; librdkafka's 5 ms was half of a
# typical early answer. Busy clients still batch: requests that arrive within a
# millisecond go together.
_LINGER_MS = 1
# confluent-kafka names that really contain underscores; every other name's
# underscores are read as dots, as for GATEWAY_KAFKA_<NAME>.
_UNDERSCORED = {"log_level", "logger"}

# Errors a just-created topic gives until its partition leaders are known.
_LEADERSHIP_SETTLING = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE}

Job = Any  # an OJS job as a mapping: the envelope or the HTTP form
Event = Any  # a job-state event as a mapping: job_id, unique_key, state or type


@dataclass(frozen=True)
class _Kind:
    """What the client sends: how to check it, where it goes, what its reply becomes."""

    prepare: Callable[[Any], Outgoing | GatewayError]
    invalid: Callable[[GatewayError], Invalid]
    parse_reply: Callable[[Any], Any]
    headers: tuple[tuple[str, bytes], ...] = ()


@dataclass
class _Call:
    """One call's items on their way: the ticket, and the prepared items not yet produced."""

    kind: _Kind
    ticket: Ticket
    unsent: deque[tuple[int, Outgoing]]


class Client:
    """Enqueue jobs through the gateway. Thread-safe; close it, or use it as a context manager.

    `bootstrap` and `namespace` default as for the `gateway` command (see
    gateway.config); `kafka_settings` are librdkafka settings for the
    client's producer and reply consumer (`linger_ms=10` or
    `**{"linger.ms": 10}`; the producer's linger is 1 ms unless set).
    """

    def __init__(
        self, bootstrap: str | None = None, namespace: str | None = None, **kafka_settings: Any
    ) -> None:
        cat = catalogue.load(namespace=namespace)
        self._jobs = _Kind(prepare, InvalidJob, EnqueueResult.from_record)
        # Events go on `requests` beside the key's requests, marked as events, so
        # the processor applies them in the order this client sent them.
        self._events = _Kind(
            prepare_event, InvalidEvent, EventAck.from_record, ((wire.KIND_HEADER, wire.JOB_EVENT),)
        )
        # Commands (sdk/commands.py) come prepared, and their replies stay records.
        self._commands = _Kind(lambda out: out, Invalid, dict)
        self._replies_topic = cat.name("replies")
        # Everything goes to `requests`, keyed as prepare.py says.
        self._topics = {role: cat.name(role) for role in ("requests",)}
        self._settings: dict[str, Any] = config.client_config(bootstrap) | {
            _librdkafka_name(k): v for k, v in kafka_settings.items()
        }
        # Idempotent, and murmur2 like every producer of `requests`, so a key's
        # requests land where the processor owns it, once each, in order. Never
        # auto-create: a topic made on the fly would have the wrong partitions.
        self._producer = Producer(
            {
                "linger.ms": _LINGER_MS,
                **self._settings,
                **PRODUCER_SETTING,
                "enable.idempotence": True,
                "allow.auto.create.topics": False,
            }
        )
        self._lock = threading.Lock()  # guards _pending and _closed
        self._ready_lock = threading.Lock()  # one caller at a time checks topics
        # correlation id -> (the call's ticket, its slot, what the reply becomes)
        self._pending: dict[str, tuple[Ticket, int, Callable[[Any], Any]]] = {}
        self._closed = False
        self._ready: set[str] = set()
        self._consumer: Consumer | None = None
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="gateway-sdk-io", daemon=True)
        self._thread.start()

    # -- public API -----------------------------------------------------------

    @overload
    def enqueue(
        self,
        job: Job,
        wait: Literal[False] = ...,
        timeout: float = ...,
        idempotency_key: str | None = ...,
    ) -> Sent: ...
    @overload
    def enqueue(
        self,
        job: Job,
        wait: Literal[True],
        timeout: float = ...,
        idempotency_key: str | None = ...,
    ) -> EnqueueResult: ...
    @overload
    def enqueue(
        self, job: Job, wait: bool, timeout: float = ..., idempotency_key: str | None = ...
    ) -> EnqueueResult | Sent: ...

    def enqueue(
        self, job: Job, wait: bool = False, timeout: float = DEFAULT_TIMEOUT,
        idempotency_key: str | None = None,
    ) -> EnqueueResult | Sent:  # fmt: skip
        """Send one job. Raises InvalidJob before sending anything if the job is invalid.

        With `wait`, return the committed decision; else return once Kafka has
        acknowledged the request. Raises EnqueueTimeout after `timeout` seconds.

        `idempotency_key` (1 to 256 printable characters): a retry with the same key and
        the same job, within the processor's window (24 hours by default), gets the first
        one's decision again, the same record, and makes no new job; the same key with
        another job is decided `invalid` with `idempotency_key_reused`.
        """
        deadline = time.monotonic() + timeout
        ticket = self._submit([job], wait, deadline, idempotency=naming(idempotency_key, False))
        [answer] = self._wait_for(ticket, wait, deadline)
        if isinstance(answer, ClientError):
            raise answer
        return answer  # type: ignore[no-any-return]

    @overload
    def enqueue_many(
        self,
        jobs: Sequence[Job],
        wait: Literal[False] = ...,
        timeout: float = ...,
        idempotency_key: str | None = ...,
    ) -> list[Sent | ClientError]: ...
    @overload
    def enqueue_many(
        self,
        jobs: Sequence[Job],
        wait: Literal[True],
        timeout: float = ...,
        idempotency_key: str | None = ...,
    ) -> list[EnqueueResult | ClientError]: ...
    @overload
    def enqueue_many(
        self,
        jobs: Sequence[Job],
        wait: bool,
        timeout: float = ...,
        idempotency_key: str | None = ...,
    ) -> list[EnqueueResult | Sent | ClientError]: ...

    def enqueue_many(
        self, jobs: Sequence[Job], wait: bool = False, timeout: float = DEFAULT_MANY_TIMEOUT,
        idempotency_key: str | None = None,
    ) -> list[Any]:  # fmt: skip
        """Send many jobs at once; one answer per job, in input order.

        An invalid job is not sent: its answer is the InvalidJob that `enqueue`
        would raise, and the other jobs go ahead. A job Kafka refused gets a
        DeliveryFailed. Raises EnqueueTimeout (with the answers that did
        arrive) if some are still missing after `timeout` seconds.

        `idempotency_key` names the whole call: retried with the same key and the same
        jobs, in the same order, it gets every job's first decision again; with other jobs,
        or another number of them, each job it had named before is decided `invalid` with
        `idempotency_key_reused` (see `enqueue`).
        """
        deadline = time.monotonic() + timeout
        ticket = self._submit(jobs, wait, deadline, idempotency=naming(idempotency_key, True))
        return self._wait_for(ticket, wait, deadline)

    def publish_event(
        self, event: Event, wait: bool = True, timeout: float = DEFAULT_TIMEOUT
    ) -> EventAck | Sent:
        """Send one job-state event, keyed by its unique_key, onto the key's log.

        With `wait` (the default), return once the processor has applied it and
        committed, so the next decision on the key sees it. Raises InvalidEvent,
        before sending anything, if the core refuses the event.
        """
        deadline = time.monotonic() + timeout
        ticket = self._submit([event], wait, deadline, self._events)
        [answer] = self._wait_for(ticket, wait, deadline)
        if isinstance(answer, ClientError):
            raise answer
        return answer  # type: ignore[no-any-return]

    def send_commands(
        self, commands: Sequence[Outgoing], timeout: float = DEFAULT_TIMEOUT
    ) -> list[dict[str, Any] | ClientError]:
        """Send prepared queue or cron commands (sdk/commands.py) and wait for the
        processor's answer to each: a record whose `outcome` says what became of it."""
        deadline = time.monotonic() + timeout
        ticket = self._submit(commands, True, deadline, self._commands)
        return self._wait_for(ticket, True, deadline)

    def partitions(self, timeout: float = DEFAULT_TIMEOUT) -> int:
        """How many partitions `requests` has: a queue command goes to each."""
        topic = self._topics["requests"]
        metadata = self._producer.list_topics(topic, timeout=timeout)
        found = metadata.topics.get(topic)
        if found is None or found.error is not None or not found.partitions:
            raise ClientError(
                UNKNOWN_TOPIC, f"topic {topic} is not readable: {found and found.error}"
            )
        return len(found.partitions)

    def close(self, timeout: float = 10.0) -> None:
        """Deliver what is still queued, stop the background thread, release the clients."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._producer.flush(timeout)
        self._stopping.set()
        self._thread.join()
        if self._consumer is not None:
            self._consumer.close()
        with self._lock:
            pending, self._pending = self._pending, {}
        for ticket, index, _ in pending.values():
            ticket.fill(index, ClientClosed())

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:  # fmt: skip
        self.close()

    # -- the two halves of a call, shared with AsyncClient ------------------------

    def _submit(
        self, items: Sequence[Any], wait: bool, deadline: float, kind: _Kind | None = None,
        idempotency: Idempotency | None = None,
    ) -> Ticket:  # fmt: skip
        """Validate every item, then produce the valid ones; answers fill the ticket."""
        call = self._prepare(items, kind, idempotency)
        self._send(call, wait, deadline, block=True)
        return call.ticket

    def _prepare(
        self, items: Sequence[Any], kind: _Kind | None, idempotency: Idempotency | None = None
    ) -> _Call:
        """Check every item (jobs unless `kind` says otherwise); an invalid one's answer is
        filled in at once. Jobs under an idempotency key (its key, and whether they are a
        batch) are keyed by the key's home; a bad key raises InvalidJob, nothing sent."""
        kind = kind or self._jobs
        call = _Call(kind, Ticket(len(items)), deque())
        if idempotency is not None:
            problem = key_problem(idempotency.key, "idempotency_key")
            if problem is not None:
                raise InvalidJob(problem)
        for index, item in enumerate(items):
            if idempotency is None:
                verdict = kind.prepare(item)
            else:
                verdict = prepare(item, mint_id=False)
                if not isinstance(verdict, GatewayError):
                    of = f"{index}/{len(items)}" if idempotency.batch else None
                    verdict = idempotent(verdict, idempotency.key, of)
            if isinstance(verdict, GatewayError):
                call.ticket.fill(index, kind.invalid(verdict))
            else:
                call.unsent.append((index, verdict))
        return call

    def _send(self, call: _Call, wait: bool, deadline: float, block: bool) -> bool:
        """Produce the call's unsent items in order. Without `block`, stop instead of
        waiting (topics not checked yet, the local queue full) and return False; the
        rest stays in `call.unsent` for a blocking send to finish."""
        topics = {self._topics[out.role] for _, out in call.unsent}
        if not self._is_ready(topics, wait):
            if not block:
                return False
            for topic in topics:
                self._get_ready(topic, wait, deadline)
        while call.unsent:
            index, out = call.unsent[0]
            topic = self._topics[out.role]
            if not self._produce(call.ticket, index, out, wait, topic, call.kind, block):
                return False
            call.unsent.popleft()
        return True

    def _wait_for(self, ticket: Ticket, wait: bool, deadline: float) -> list[Any]:
        if not ticket.wait(deadline - time.monotonic()):
            raise self._give_up(ticket, wait)
        return ticket.values()

    def _give_up(self, ticket: Ticket, wait: bool) -> EnqueueTimeout:
        """Forget a call's outstanding replies; the error says how many are missing."""
        with self._lock:
            for correlation_id in ticket.correlation_ids:
                self._pending.pop(correlation_id, None)
        results = ticket.values()
        missing = sum(r is None for r in results)
        waiting_for = "replies" if wait else "delivery acknowledgements"
        return EnqueueTimeout(missing, len(results), waiting_for, results)

    # -- producing ---------------------------------------------------------------

    def _produce(
        self,
        ticket: Ticket,
        index: int,
        out: Outgoing,
        wait: bool,
        topic: str,
        kind: _Kind,
        block: bool = True,
    ) -> bool:
        """Produce one item; False (and nothing registered) if the local queue is full
        and the caller would rather not wait."""
        headers: list[tuple[str, str | bytes | None]] = [
            (wire.REQUEST_ID_HEADER, out.request_id.encode()), *kind.headers, *out.headers,
        ]  # fmt: skip
        correlation_id = None
        if wait:
            correlation_id = random_hex()
            headers += [
                (wire.REPLY_TO_HEADER, self._replies_topic.encode()),
                (wire.CORRELATION_ID_HEADER, correlation_id.encode()),
            ]
            ticket.correlation_ids.append(correlation_id)
            with self._lock:
                if self._closed:
                    raise ClientClosed()
                self._pending[correlation_id] = (ticket, index, kind.parse_reply)
            on_delivery = functools.partial(self._on_request_delivery, correlation_id)
        else:
            sent = Sent(out.request_id, out.unique_key)
            on_delivery = functools.partial(self._on_ack, ticket, index, sent)
        while True:
            try:
                self._producer.produce(
                    topic, out.value, out.key, headers=headers, on_delivery=on_delivery,
                    partition=_ANY_PARTITION if out.partition is None else out.partition,
                )  # fmt: skip
                return True
            except BufferError:
                if not block:
                    self._forget(ticket, correlation_id)
                    return False
                time.sleep(0.01)  # the local queue is full; the I/O thread drains it
            except KafkaException as exc:
                on_delivery(exc.args[0], None)
                return True

    def _forget(self, ticket: Ticket, correlation_id: str | None) -> None:
        """Undo the registration of a reply that will not come: it was never produced."""
        if correlation_id is not None:
            ticket.correlation_ids.remove(correlation_id)
            with self._lock:
                self._pending.pop(correlation_id, None)

    def _on_ack(
        self, ticket: Ticket, index: int, sent: Sent, err: KafkaError | None, _: Message | None
    ) -> None:
        ticket.fill(index, sent if err is None else DeliveryFailed(err.str()))

    def _on_request_delivery(
        self, correlation_id: str, err: KafkaError | None, _: Message | None
    ) -> None:
        if err is None:
            return  # the reply will answer the call
        with self._lock:
            entry = self._pending.pop(correlation_id, None)
        if entry is not None:
            ticket, index, _sent = entry
            ticket.fill(index, DeliveryFailed(err.str()))

    # -- getting ready: topics exist, reply positions resolved -----------------------

    def _is_ready(self, topics: set[str], wait: bool) -> bool:
        """Whether producing needs no check first (read without the lock: a stale
        answer only sends the caller the slow way)."""
        ready = self._ready
        return not self._closed and topics <= ready and (not wait or self._replies_topic in ready)

    def _get_ready(self, topic: str, wait: bool, deadline: float) -> None:
        """Check once that the topics exist; before the first wait, start reading replies.

        The reply consumer is positioned at the end of every partition before
        the first request asking for a reply is produced, so no reply is missed.
        """
        needed = [topic] + ([self._replies_topic] if wait else [])
        with self._lock:
            if self._closed:
                raise ClientClosed()
        with self._ready_lock:
            if all(t in self._ready for t in needed):
                return
            try:
                for topic in needed:
                    self._check_topic(topic, deadline)
                if wait and self._consumer is None:
                    self._consumer = self._reply_consumer(deadline)
            except KafkaException as exc:
                where = self._settings["bootstrap.servers"]
                raise ClientError(KAFKA, f"Kafka at {where}: {exc.args[0].str()}") from exc
            self._ready.update(needed)

    def _check_topic(self, topic: str, deadline: float) -> None:
        if topic in self._ready:
            return
        metadata = self._producer.list_topics(topic, timeout=_remaining(deadline))
        found = metadata.topics.get(topic)
        if found is None or found.error is not None:
            raise ClientError(
                UNKNOWN_TOPIC,
                f"topic {topic} does not exist; create the catalogue's topics with "
                "`gateway topics apply` (same --namespace)",
            )

    def _reply_consumer(self, deadline: float) -> Consumer:
        consumer = Consumer(
            {
                **self._settings,
                # Never joins a group (partitions are assigned), never commits.
                "group.id": f"gateway-sdk-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
            }
        )
        try:
            metadata = consumer.list_topics(self._replies_topic, timeout=_remaining(deadline))
            positions = []
            for partition in sorted(metadata.topics[self._replies_topic].partitions):
                tp = TopicPartition(self._replies_topic, partition)
                end = _end_offset(consumer, tp, deadline)
                positions.append(TopicPartition(self._replies_topic, partition, end))
            consumer.assign(positions)
        except BaseException:
            consumer.close()
            raise
        return consumer

    # -- the I/O thread ------------------------------------------------------------

    def _serve(self) -> None:
        while not self._stopping.is_set():
            try:
                consumer = self._consumer
                if consumer is None:
                    self._producer.poll(_IDLE_POLL_S)
                    continue
                first = consumer.poll(_IDLE_POLL_S)
                if first is not None:
                    for msg in [first, *consumer.consume(_REPLY_BATCH, 0)]:
                        self._on_reply(msg)
                self._producer.poll(0)
            except Exception:  # the thread must outlive any one bad record
                log.exception("the SDK's I/O thread failed on a record; continuing")

    def _on_reply(self, msg: Message) -> None:
        error = msg.error()
        if error is not None:
            log.warning("reading replies failed", extra={"error": error.str()})
            return
        correlation = dict(msg.headers() or []).get(wire.CORRELATION_ID_HEADER)
        correlation_id = (
            correlation.decode(errors="replace") if isinstance(correlation, bytes) else ""
        )
        with self._lock:
            entry = self._pending.pop(correlation_id, None)
        if entry is None:
            return  # another client's reply, or a call that gave up waiting
        ticket, index, parse_reply = entry
        try:
            answer: Any = parse_reply(orjson.loads(msg.value() or b"null"))
        except (KeyError, TypeError, ValueError) as exc:
            answer = ClientError(INVALID_REPLY, f"the reply is not a reply record: {exc!r}")
        ticket.fill(index, answer)


@dataclass(frozen=True)
class Idempotency:
    """What an enqueue call is named by: the caller's key, for one job or a batch."""

    key: str
    batch: bool


def naming(key: str | None, batch: bool) -> Idempotency | None:
    """What a call under `key` (None: no key) is named by."""
    return None if key is None else Idempotency(key, batch)


def _librdkafka_name(name: str) -> str:
    if name in _UNDERSCORED or name.endswith("_cb"):
        return name
    return name.replace("_", ".")


def _remaining(deadline: float) -> float:
    """Seconds left, with a floor so a Kafka call never gets a zero timeout."""
    return max(deadline - time.monotonic(), 0.1)


def _end_offset(consumer: Consumer, tp: TopicPartition, deadline: float) -> int:
    """A partition's end offset, retrying while its leadership settles (a new topic)."""
    while True:
        try:
            _, end = consumer.get_watermark_offsets(tp, timeout=_remaining(deadline), cached=False)
            return int(end)
        except KafkaException as exc:
            error = exc.args[0]
            settling = error.retriable() or error.code() in _LEADERSHIP_SETTLING
            if not settling or _remaining(deadline) <= 0.2:
                raise
            time.sleep(0.2)
