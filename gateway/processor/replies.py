"""Where the processor may send a reply: `reply_to` is an address, not a weapon.

A record's `reply_to` header is input like its value. Producing to a topic
the gateway owns would put foreign records in its own logs; to one of
Kafka's (`__consumer_offsets`, `__transaction_state`) would break the
transaction; to a missing topic would fail it on every replay. So a reply
goes only to the catalogue's replies topic or to a topic under the
deployment's reply prefix (by default `<replies topic>.`), never to a topic
of the catalogue, an internal or a changelog one, and only once the topic is
known to exist. Anything else is not produced, is counted and logged, and the
decision stands on `decisions`.

Which topics exist is learnt from cluster metadata by a thread of its own:
no admin call runs on the processing path, inside an open transaction. A
reply topic created after the processor started is seen within REFRESH_S.

Early answers (the default): a reply is sent the moment its record's handling
has succeeded, by a producer of its own outside the transaction, rather than
with the commit. A decision is a pure function of the log and the committed
state, so a successor that takes over after a crash decides the uncommitted
records again and sends the same replies (a caller ignores the second: the
SDK answers each correlation id once). Nothing else leaves the transaction.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

log = logging.getLogger("gateway.processor")

# Kafka's own rule for topic names.
_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")
REFRESH_S = 5.0
MIN_GAP_S = 1.0  # replies to missing topics must not turn into a metadata storm

NOT_ALLOWED = "not_allowed"
UNKNOWN_TOPIC = "unknown_topic"
NOT_DELIVERED = "not_delivered"
# The early producer's local queue is full: serve its deliveries this long, then try again.
_FULL_WAIT_S = 0.05


def reply_refusal(name: str, replies: str, prefix: str, owned: frozenset[str]) -> str | None:
    """Why a reply may not go to `name` (NOT_ALLOWED), or None when the address is allowed."""
    if not _TOPIC_NAME.fullmatch(name) or name.startswith(("__", "changelog__")):
        return NOT_ALLOWED
    if name == replies:
        return None
    if name in owned or not prefix or not name.startswith(prefix):
        return NOT_ALLOWED
    return None


class ReplyTopics:
    """The allowed reply addresses, and which of them exist (refreshed in the background)."""

    def __init__(
        self, replies: str, prefix: str, owned: Iterable[str], list_topics: Callable[[], set[str]]
    ) -> None:
        self._replies = replies
        self._prefix = prefix
        self._owned = frozenset(owned)
        self._list_topics = list_topics
        self._existing: frozenset[str] = frozenset({replies})
        self._wake = threading.Event()
        self._stopped = False

    def start(self) -> None:
        threading.Thread(target=self._refresh, name="reply-topics", daemon=True).start()

    def stop(self) -> None:
        self._stopped = True
        self._wake.set()

    def refusal(self, name: str) -> str | None:
        """None when a reply may be produced to `name` now; else why not."""
        why = reply_refusal(name, self._replies, self._prefix, self._owned)
        if why is None and name not in self._existing:
            self._wake.set()  # look again soon: it may have just been created
            return UNKNOWN_TOPIC
        return why

    def _refresh(self) -> None:
        while not self._stopped:
            try:
                self._existing = frozenset(self._list_topics())
            except Exception as exc:  # the broker may be away for a while; keep the last view
                log.warning("could not list topics for replies", extra={"error": str(exc)})
            time.sleep(MIN_GAP_S)
            self._wake.wait(REFRESH_S - MIN_GAP_S)
            self._wake.clear()


class EarlyReplies:
    """The replies' own producer: idempotent, no transaction, so a reply is readable at once
    (a reply inside an open transaction would wait for its commit, and hold back, for a
    read_committed reader, every later record of its partition)."""

    def __init__(self, client_config: dict[str, Any], on_lost: Callable[[], None]) -> None:
        # Only a reply that failed is reported: a report of each delivered one cost the
        # processor a callback and librdkafka an event per decision, for nothing.
        self._producer = Producer(
            {**client_config, "enable.idempotence": True, "linger.ms": 1,
             "delivery.report.only.error": True, "logger": logging.getLogger("librdkafka")}
        )  # fmt: skip
        self._on_lost = on_lost

    def send(self, topic: str, key: bytes | None, value: bytes | None, headers: Any) -> None:
        while True:
            try:
                self._producer.produce(
                    topic, value, key, headers=headers, on_delivery=self._delivered
                )  # fmt: skip
                break
            except BufferError:  # back-pressure: the processor waits for the broker
                self._producer.poll(_FULL_WAIT_S)
            except KafkaException as exc:  # the caller times out; the decision stands
                self._lost(topic, exc.args[0])
                break
        self._producer.poll(0)

    def close(self, timeout: float = 5.0) -> None:
        self._producer.flush(timeout)

    def _delivered(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self._lost(msg.topic() or "", err)

    def _lost(self, topic: str, err: KafkaError) -> None:
        self._on_lost()
        log.warning(
            "early reply not delivered", extra={"reply_to": topic[:255], "error": err.str()}
        )
