"""Benchmark: decisions per second and decision latency, exactly-once on.

    python -m gateway.bench.processor [--bootstrap B] [--requests N] [--rate R]

Starts a local Kafka broker unless --bootstrap is given, applies the topics in a
namespace of its own, runs `gateway process` in a subprocess and sends requests
of which 30% duplicate an earlier one. Two phases:

- throughput: N requests as fast as the producer goes; decisions per second
  from the first send until the last decision is visible to a read_committed
  consumer;
- latency: requests paced at --rate per second; latency is from the request
  record's broker timestamp (its decision time) to the moment its decision is
  visible to a read_committed consumer, i.e. after the transaction commit.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
import uuid

import orjson
from confluent_kafka import Consumer, Producer

from gateway.bench.environment import DUPLICATE_SHARE, environment, start_processor, stop
from gateway.core import Request, parse_request
from gateway.core.times import parse_rfc3339
from gateway.partitioner import PRODUCER_SETTING


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", help="use this cluster instead of a local broker")
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--rate", type=int, default=500, help="latency phase, requests/s")
    parser.add_argument("--seconds", type=float, default=10, help="latency phase length")
    args = parser.parse_args()

    with environment(args.bootstrap) as env:
        processor = start_processor(env)
        try:
            cat = env.catalogue
            bench = Bench(env.bootstrap, cat.name("requests"), cat.name("decisions"))
            sent, seconds = bench.throughput(args.requests)
            print(
                f"throughput: {sent} requests ({DUPLICATE_SHARE:.0%} duplicates) decided in "
                f"{seconds:.2f}s = {sent / seconds:,.0f} decisions/s (exactly-once)"
            )
            latencies = bench.latency(args.rate, args.seconds)
            q = statistics.quantiles(latencies, n=100)
            print(
                f"latency at {args.rate} requests/s over {len(latencies)} requests: "
                f"p50 {q[49]:.0f} ms, p99 {q[98]:.0f} ms "
                "(broker timestamp -> committed decision)"
            )
        finally:
            stop(processor)


class Bench:
    def __init__(self, bootstrap: str, requests_topic: str, decisions_topic: str) -> None:
        self.requests_topic = requests_topic
        self.producer = Producer(
            {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5}
            | PRODUCER_SETTING
        )
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex}",
            "auto.offset.reset": "latest", "isolation.level": "read_committed",
        })  # fmt: skip
        self.consumer.subscribe([decisions_topic])
        while not self.consumer.assignment():
            self.consumer.poll(0.2)
        self.keys: list[tuple[bytes, bytes]] = []
        self.rng = random.Random(7)

    def _next(self) -> tuple[bytes, bytes]:
        if self.keys and self.rng.random() < DUPLICATE_SHARE:
            return self.rng.choice(self.keys)
        job = {
            "type": "bench.job",
            "args": {"user_id": uuid.uuid4().hex, "locale": "en"},
            "unique": {"keys": ["type", "args"], "args_keys": ["user_id"]},
        }
        request = parse_request(job)
        assert isinstance(request, Request) and request.unique_key
        pair = (request.unique_key.encode(), orjson.dumps(job))
        self.keys.append(pair)
        return pair

    def _send(self) -> None:
        key, value = self._next()
        self.producer.produce(self.requests_topic, value, key=key)
        self.producer.poll(0)

    def _await(self, count: int, on_decision=None, timeout: float = 300) -> None:  # noqa: ANN001
        seen, deadline = 0, time.monotonic() + timeout
        while seen < count:
            if time.monotonic() > deadline:
                raise SystemExit(f"only {seen} of {count} decisions arrived in {timeout}s")
            for msg in self.consumer.consume(1000, 0.2):
                if msg.error() is None:
                    seen += 1
                    if on_decision is not None:
                        on_decision(msg)

    def throughput(self, n: int) -> tuple[int, float]:
        started = time.monotonic()
        for _ in range(n):
            self._send()
        self.producer.flush()
        self._await(n)
        return n, time.monotonic() - started

    def latency(self, rate: int, seconds: float) -> list[float]:
        latencies: list[float] = []

        def measure(msg) -> None:  # noqa: ANN001
            decided_at = parse_rfc3339(orjson.loads(msg.value())["decided_at"])
            latencies.append(time.time() * 1000 - (decided_at or 0))

        total = int(rate * seconds)
        started = time.monotonic()
        for i in range(total):
            pause = started + i / rate - time.monotonic()
            if pause > 0:
                self._await_some(pause, measure)
            self._send()
        self.producer.flush()
        self._await(total - len(latencies), measure)
        return latencies

    def _await_some(self, seconds: float, on_decision) -> None:  # noqa: ANN001
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            for msg in self.consumer.consume(1000, min(left, 0.05)):
                if msg.error() is None:
                    on_decision(msg)


if __name__ == "__main__":
    main()
