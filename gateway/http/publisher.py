"""Records the binding writes itself: cancellations, and the shape of its job events.

Cancellations are keyed by the job's unique_key with the murmur2 partitioner,
like every record about a key. `send` returns once Kafka has acknowledged
every record. Job events go through the SDK (see transitions.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from confluent_kafka import KafkaError, Message, Producer

from gateway.catalogue import Catalogue
from gateway.partitioner import PRODUCER_SETTING


class Publisher:
    def __init__(self, cat: Catalogue, settings: Mapping[str, Any]) -> None:
        self._topics = {"cancellations": cat.name("cancellations")}
        self._producer = Producer(
            {
                **settings,
                **PRODUCER_SETTING,
                "enable.idempotence": True,
                "allow.auto.create.topics": False,
            }
        )

    def send(self, records: list[tuple[str, dict[str, Any]]], timeout: float) -> str | None:
        """Produce (role, record) pairs and wait for them; None, else what went wrong.

        Blocking: run it off the event loop.
        """
        failures: list[str] = []

        def on_delivery(err: KafkaError | None, _: Message | None) -> None:
            if err is not None:
                failures.append(err.str())

        for role, record in records:
            key = record.get("unique_key")
            self._producer.produce(
                self._topics[role], orjson.dumps(record),
                key=key.encode() if isinstance(key, str) else None, on_delivery=on_delivery,
            )  # fmt: skip
        left = self._producer.flush(timeout)
        if failures:
            return "; ".join(failures)
        return f"{left} records not acknowledged in {timeout}s" if left else None

    def close(self, timeout: float = 10.0) -> None:
        self._producer.flush(timeout)


def job_event(job: Mapping[str, Any], event_type: str) -> dict[str, Any]:
    """The job-state event the processor applies: the job's attempt counts decide job.failed."""
    return {
        "job_id": job["id"],
        "unique_key": job.get("unique_key"),
        "type": event_type,
        "attempt": job.get("attempt"),
        "max_attempts": job.get("max_attempts"),
    }


def cancellation(job_id: str, unique_key: str | None, previous: str, at: str) -> dict[str, Any]:
    """A cancellation record, shaped as the processor's for a replace."""
    return {
        "job_id": job_id,
        "unique_key": unique_key,
        "previous_state": previous,
        "reason": "cancelled",
        "replaced_by": None,
        "cancelled_at": at,
    }
