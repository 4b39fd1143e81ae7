"""Time as records: a tick to each owned partition of `requests`, twice a second.

Event time only moves when records arrive, so on a partition without traffic
leases would never end and tombstones never be written. A tick is a record
like any other (it gets its LogAppendTime from the broker, sits in the log,
and replay reads it back), on which the dedup stage does what its time made
due and nothing else: no decision, no reply, nothing counted as a request.

The loop waits for records, not for time, so a thread of the processor process writes
them with a producer of its own. It needs no transaction: a tick carries no
decision, and a tick lost or doubled only moves time a little later or twice.
Which partitions it ticks follows the loop's assignment (readiness.py).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

from confluent_kafka import KafkaException, Producer

from gateway import wire

log = logging.getLogger("gateway.processor")
INTERVAL_S = 0.5


class Ticker:
    def __init__(
        self,
        client_config: dict[str, str],
        topic: str,
        owned: Callable[[], Iterable[int]],
        interval_s: float = INTERVAL_S,
    ) -> None:
        self._producer = Producer(
            {**client_config, "enable.idempotence": True, "linger.ms": 5,
             "logger": logging.getLogger("librdkafka")}
        )  # fmt: skip
        self._topic = topic
        self._owned = owned
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ticks", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2 * self._interval_s)
        self._producer.flush(1.0)

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                for partition in sorted(self._owned()):
                    self._producer.produce(
                        self._topic, b"", wire.TICK_KEY, partition=partition,
                        headers=[(wire.KIND_HEADER, wire.TICK)],
                    )  # fmt: skip
                self._producer.poll(0)
            except (BufferError, KafkaException) as exc:
                # The next tick follows soon; time is only a little late.
                log.warning("tick not sent", extra={"error": str(exc)})
            except Exception:  # the thread must outlive anything: idle partitions need it
                log.exception("tick failed")
