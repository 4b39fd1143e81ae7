"""The SDK's Kafka side: one producer of `requests`, the reply consumer, and the I/O
thread that serves the producer's delivery reports and hands each reply to the call
waiting for it (client.py is the API over it).

A request that wants its decision carries `reply_to` (the catalogue's `replies` topic)
and a `correlation_id`; the processor writes the committed decision there with that
header.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import orjson
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from gateway import catalogue, config, wire
from gateway.partitioner import PRODUCER_SETTING
from gateway.randomness import random_hex
from gateway.sdk.errors import (
    INVALID_REPLY,
    KAFKA,
    UNKNOWN_TOPIC,
    ClientClosed,
    ClientError,
    DeliveryFailed,
)
from gateway.sdk.prepare import Outgoing
from gateway.sdk.result import Sent
from gateway.sdk.ticket import Ticket

log = logging.getLogger("gateway.sdk")

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

# What a reply record becomes for the call waiting for it.
ParseReply = Callable[[Any], Any]


class Transport:
    """Produces a client's items and routes their replies. Thread-safe."""

    def __init__(
        self, bootstrap: str | None, namespace: str | None, kafka_settings: dict[str, Any]
    ) -> None:
        cat = catalogue.load(namespace=namespace)
        self.replies_topic = cat.name("replies")
        # Everything goes to `requests`, keyed as prepare.py says.
        self.topics = {role: cat.name(role) for role in ("requests",)}
        self._settings: dict[str, Any] = config.client_config(bootstrap) | {
            librdkafka_name(k): v for k, v in kafka_settings.items()
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
        self._lock = threading.Lock()  # guards pending and _closed
        self._ready_lock = threading.Lock()  # one caller at a time checks topics
        # correlation id -> (the call's ticket, its slot, what the reply becomes)
        self.pending: dict[str, tuple[Ticket, int, ParseReply]] = {}
        self._closed = False
        self.ready: set[str] = set()
        self._consumer: Consumer | None = None
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="gateway-sdk-io", daemon=True)
        self._thread.start()

    def partitions(self, timeout: float) -> int:
        """How many partitions `requests` has: a queue command goes to each."""
        topic = self.topics["requests"]
        metadata = self._producer.list_topics(topic, timeout=timeout)
        found = metadata.topics.get(topic)
        if found is None or found.error is not None or not found.partitions:
            raise ClientError(
                UNKNOWN_TOPIC, f"topic {topic} is not readable: {found and found.error}"
            )
        return len(found.partitions)

    def close(self, timeout: float) -> None:
        """Deliver what is still queued, stop the I/O thread, release the clients; every
        call still waiting for a reply gets ClientClosed."""
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
            pending, self.pending = self.pending, {}
        for ticket, index, _ in pending.values():
            ticket.fill(index, ClientClosed())

    def forget_replies(self, ticket: Ticket) -> None:
        """A call gave up: its outstanding replies go unrouted."""
        with self._lock:
            for correlation_id in ticket.correlation_ids:
                self.pending.pop(correlation_id, None)

    # -- producing ---------------------------------------------------------------

    def produce(
        self,
        ticket: Ticket,
        index: int,
        out: Outgoing,
        wait: bool,
        extra_headers: tuple[tuple[str, bytes], ...],
        parse_reply: ParseReply,
        block: bool = True,
    ) -> bool:
        """Produce one item; False (and nothing registered) if the local queue is full
        and the caller would rather not wait."""
        topic = self.topics[out.role]
        headers: list[tuple[str, str | bytes | None]] = [
            (wire.REQUEST_ID_HEADER, out.request_id.encode()), *extra_headers, *out.headers,
        ]  # fmt: skip
        correlation_id = None
        if wait:
            correlation_id = random_hex()
            headers += [
                (wire.REPLY_TO_HEADER, self.replies_topic.encode()),
                (wire.CORRELATION_ID_HEADER, correlation_id.encode()),
            ]
            ticket.correlation_ids.append(correlation_id)
            with self._lock:
                if self._closed:
                    raise ClientClosed()
                self.pending[correlation_id] = (ticket, index, parse_reply)
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
                self.pending.pop(correlation_id, None)

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
            entry = self.pending.pop(correlation_id, None)
        if entry is not None:
            ticket, index, _sent = entry
            ticket.fill(index, DeliveryFailed(err.str()))

    # -- getting ready: topics exist, reply positions resolved -----------------------

    def is_ready(self, topics: set[str], wait: bool) -> bool:
        """Whether producing needs no check first (read without the lock: a stale
        answer only sends the caller the slow way)."""
        ready = self.ready
        return not self._closed and topics <= ready and (not wait or self.replies_topic in ready)

    def get_ready(self, topic: str, wait: bool, deadline: float) -> None:
        """Check once that the topics exist; before the first wait, start reading replies.

        The reply consumer is positioned at the end of every partition before
        the first request asking for a reply is produced, so no reply is missed.
        """
        needed = [topic] + ([self.replies_topic] if wait else [])
        with self._lock:
            if self._closed:
                raise ClientClosed()
        with self._ready_lock:
            if all(t in self.ready for t in needed):
                return
            try:
                for topic in needed:
                    self._check_topic(topic, deadline)
                if wait and self._consumer is None:
                    self._consumer = self._reply_consumer(deadline)
            except KafkaException as exc:
                where = self._settings["bootstrap.servers"]
                raise ClientError(KAFKA, f"Kafka at {where}: {exc.args[0].str()}") from exc
            self.ready.update(needed)

    def _check_topic(self, topic: str, deadline: float) -> None:
        if topic in self.ready:
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
            metadata = consumer.list_topics(self.replies_topic, timeout=_remaining(deadline))
            positions = []
            for partition in sorted(metadata.topics[self.replies_topic].partitions):
                tp = TopicPartition(self.replies_topic, partition)
                end = _end_offset(consumer, tp, deadline)
                positions.append(TopicPartition(self.replies_topic, partition, end))
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
            entry = self.pending.pop(correlation_id, None)
        if entry is None:
            return  # another client's reply, or a call that gave up waiting
        ticket, index, parse_reply = entry
        try:
            answer: Any = parse_reply(orjson.loads(msg.value() or b"null"))
        except (KeyError, TypeError, ValueError) as exc:
            answer = ClientError(INVALID_REPLY, f"the reply is not a reply record: {exc!r}")
        ticket.fill(index, answer)


def librdkafka_name(name: str) -> str:
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
