"""The ceiling: a raw exactly-once consume→produce loop, deciding nothing.

    python -m gateway.bench.passthrough --bootstrap B --input T --outputs T1,T2,...
        --records-per-input K --group G [--commit-interval S]

Reads the input topic read_committed and writes, per input record, K records
on average (a fractional K alternates between its floor and ceiling): the
first to the first output topic, the second to the second, the rest to the
last. Outputs are keyed by the input key, so they keep its partition, and
carry the input's timestamp. Outputs, and the input offsets, commit in one
Kafka transaction every commit interval, as the processor's do. Runs until
SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import signal
import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer

from gateway.partitioner import PRODUCER_SETTING


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gateway.bench.passthrough")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--outputs", required=True, help="comma-separated topics")
    parser.add_argument("--records-per-input", type=float, required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--commit-interval", type=float, default=0.1)
    args = parser.parse_args(argv)
    outputs = args.outputs.split(",")
    stopping = False

    def stop(*_: Any) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)

    consumer = Consumer({
        "bootstrap.servers": args.bootstrap, "group.id": args.group,
        "isolation.level": "read_committed", "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    })  # fmt: skip
    producer = Producer({
        "bootstrap.servers": args.bootstrap, "transactional.id": f"{args.group}-1",
        "transaction.timeout.ms": 30_000, **PRODUCER_SETTING,
    })  # fmt: skip
    producer.init_transactions()
    consumer.subscribe([args.input])
    producer.begin_transaction()
    owed, pending, last_commit = 0.0, False, time.monotonic()
    while not stopping:
        for msg in consumer.consume(500, 0.01):
            if msg.error() is not None:
                if msg.error().code() != KafkaError._PARTITION_EOF:
                    raise SystemExit(f"consume failed: {msg.error()}")
                continue
            owed += args.records_per_input
            count = max(1, int(owed))
            owed -= count
            key, value, timestamp = msg.key(), msg.value(), msg.timestamp()[1]
            for n in range(count):
                topic = outputs[min(n, len(outputs) - 1)]
                while True:
                    try:
                        producer.produce(topic, value, key=key, timestamp=timestamp)
                        break
                    except BufferError:
                        producer.poll(0.05)
            pending = True
        producer.poll(0)
        if pending and time.monotonic() - last_commit >= args.commit_interval:
            positions = consumer.position(consumer.assignment())
            producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata())
            producer.commit_transaction()
            producer.begin_transaction()
            pending, last_commit = False, time.monotonic()
    producer.abort_transaction()
    consumer.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
