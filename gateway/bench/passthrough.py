"""The ceiling: a raw exactly-once consume→produce loop, deciding nothing.

    python -m gateway.bench.passthrough --bootstrap B --input T --outputs T1,T2,...
        --records-per-input K --group G [--commit-interval S] [--ready-file F]

Reads the input topic read_committed and writes, per input record, K records
on average (a fractional K alternates between its floor and ceiling): the
first to the first output topic, the second to the second, the rest to the
last. Outputs are keyed by the input key, so they keep its partition, and
carry the input's timestamp. Outputs, and the input offsets, commit in one
Kafka transaction every commit interval, as the processor's do. Before
partitions are taken away in a rebalance, the open transaction commits with
the positions reached, so the next owner (this consumer again, after a
metadata change of a just-created topic) starts where that left off instead
of reading the uncommitted records again into the same transaction, which
would commit their outputs twice; partitions lost without a revoke abort it.
With --ready-file, the file is written with the number of partitions
assigned at each assignment. A consumer error librdkafka retries (a topic
created a moment ago and not yet in the broker's metadata) is logged, not
fatal. Runs until SIGTERM or SIGINT; on stop, the consumer's revoke commits
what was read since the last commit.
"""

from __future__ import annotations

import argparse
import signal
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from gateway.partitioner import PRODUCER_SETTING


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gateway.bench.passthrough")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--outputs", required=True, help="comma-separated topics")
    parser.add_argument("--records-per-input", type=float, required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--commit-interval", type=float, default=0.1)
    parser.add_argument("--ready-file", type=Path)
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
    owed, pending, last_commit = 0.0, False, time.monotonic()

    def commit() -> None:
        nonlocal pending, last_commit
        positions = consumer.position(consumer.assignment())
        producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata())
        producer.commit_transaction()
        producer.begin_transaction()
        pending, last_commit = False, time.monotonic()

    def on_assign(_: Consumer, partitions: list[TopicPartition]) -> None:
        print(f"assigned {len(partitions)} partitions", flush=True)
        if args.ready_file is not None:
            args.ready_file.write_text(str(len(partitions)))

    def on_revoke(_: Consumer, partitions: list[TopicPartition]) -> None:
        print(f"revoked {len(partitions)} partitions", flush=True)
        if pending:
            commit()

    def on_lost(_: Consumer, partitions: list[TopicPartition]) -> None:
        nonlocal pending
        producer.abort_transaction()
        producer.begin_transaction()
        pending = False

    consumer.subscribe([args.input], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
    producer.begin_transaction()
    while not stopping:
        for msg in consumer.consume(500, 0.01):
            error = msg.error()
            if error is not None:
                # librdkafka retries what it can (a topic just created, not yet in the
                # metadata, is such an error); only a fatal one ends the run.
                if error.fatal():
                    raise SystemExit(f"consume failed: {error}")
                if error.code() != KafkaError._PARTITION_EOF:
                    print(f"consume error: {error}", flush=True)
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
            commit()
    consumer.close()  # its revoke commits what was read since the last commit
    producer.abort_transaction()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
