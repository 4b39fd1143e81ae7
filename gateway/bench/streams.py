"""The two Kafka systems, driven alike from outside: the gateway and the passthrough.

Each round gets a fresh namespace (topics, consumer group, state), starts the
system in a subprocess and waits until it is ready (the gateway: until every
processor process owns partitions, so a rebalance among several does not
fall into the window), then:

- throughput: produces every request of the workload to `requests` as fast as
  the producer goes, then waits until a read_committed consumer of `decisions`
  has seen one decision per request; CPU of the system's process tree (for
  the gateway: the supervisor and all its runtimes) and of the broker JVM
  over that window, from /proc;
- the same CPU over the whole round too, from ready to the last decision: a
  system that decides faster than the bench reads decisions (the floor) has
  done much of its work before the window starts, so its CPU per request is
  that over every request of the round;
- records: counts the committed records the system wrote during the round on
  every topic of its namespace but the inputs (outputs and state changelog);
- latency: new jobs paced at half the measured rate; each decision's latency
  is from its request's broker timestamp (LogAppendTime) to the moment the
  decision is visible to the read_committed consumer.
"""

from __future__ import annotations

import gc
import statistics
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from gateway import admin, catalogue
from gateway.bench import procfs
from gateway.bench.services import Processes
from gateway.bench.workload import Item, Workload, generate
from gateway.broker.ports import free_port_block
from gateway.catalogue import Catalogue
from gateway.children import python_module
from gateway.config import KAFKA_LOGGER
from gateway.core.times import parse_rfc3339
from gateway.partitioner import PRODUCER_SETTING

DECIDE_TIMEOUT_S = 600.0
INPUT_ROLES = ("intake", "requests", "job_events")


class BenchError(Exception):
    """A system failed or gave a wrong answer: the run stops, loudly."""


@dataclass
class Broker:
    bootstrap: str
    pid: int | None  # None for a cluster we did not start: its CPU is not ours to read
    version: str


@dataclass
class StreamRound:
    system: str
    round: int
    inputs: int  # requests decided in the round
    requests: int  # of which decided in the measured window
    seconds: float
    cpu_process_s: float | None
    cpu_broker_s: float | None
    records_written: int
    outcomes: dict[str, int]
    peak_rss_bytes: int
    startup_s: float  # from starting the process to ready (empty state)
    latency_rate: float = 0.0
    latency_ms: dict[str, float] = field(default_factory=dict)
    # The system's CPU from ready, just before the first request is sent, to its last
    # decision: all its work on `inputs` (see run_round).
    cpu_round_s: float | None = None

    @property
    def rate(self) -> float:
        return self.requests / self.seconds

    @property
    def records_per_request(self) -> float:
        return self.records_written / self.inputs


@dataclass(frozen=True)
class Options:
    commit_interval: float
    latency_seconds: float
    workdir: Path
    answers: str = "early"  # the processor's --answers


class StreamSystem:
    """How one system is started and how its decision records are read."""

    name = ""
    repeat = 1  # times the workload is fed in one round

    def start(
        self, processes: Processes, broker: Broker, cat: Catalogue, workdir: Path, opts: Options
    ) -> Any:
        raise NotImplementedError

    def wait_ready(self, proc: Any, workdir: Path) -> None:
        """Return once the system has joined its group and decides at once."""

    def request_timestamp_ms(self, msg: Message) -> int:
        raise NotImplementedError

    def outcome(self, value: bytes) -> str:
        raise NotImplementedError


class Gateway(StreamSystem):
    """`gateway process --processes N`, exactly as a user runs it; "gateway" is one process.

    The CPU measured is its whole process tree: the supervisor and every runtime.
    """

    def __init__(self, count: int = 1) -> None:
        self.count = count
        self.name = "gateway" if count == 1 else f"gateway×{count}"
        self.port = 0

    def start(
        self, processes: Processes, broker: Broker, cat: Catalogue, workdir: Path, opts: Options
    ) -> Any:
        namespace = cat.name("requests").split(".", 1)[0]
        self.port = free_port_block(self.count + 1)
        return processes.start(
            [*python_module("gateway", "process"), "--bootstrap", broker.bootstrap,
             "--namespace", namespace, "--state-dir", str(workdir / "state"),
             "--processes", str(self.count), "--metrics-port", str(self.port),
             "--commit-interval", str(opts.commit_interval), "--answers", opts.answers,
             "--log-level", "WARNING"],
            workdir / "gateway.log",
        )  # fmt: skip

    def wait_ready(self, proc: Any, workdir: Path) -> None:
        # The supervisor's /ready: every process owns partitions, none restores.
        wait_ready(self.port, proc, workdir, "the processor never became ready")

    def request_timestamp_ms(self, msg: Message) -> int:
        # Decision time is the request record's broker timestamp.
        return parse_rfc3339(orjson.loads(msg.value() or b"{}").get("decided_at", "")) or 0

    def outcome(self, value: bytes) -> str:
        return str(orjson.loads(value)["outcome"])


class Passthrough(StreamSystem):
    """gateway.bench.passthrough: transactions and record counts of the gateway, no deciding."""

    name = "passthrough"
    # It decides nothing, so a repeat is the same work; five times the
    # gateway's input keeps its much shorter window many commits long.
    repeat = 5

    def __init__(self, records_per_input: Callable[[], float]) -> None:
        self.records_per_input = records_per_input
        self.partitions = 0

    def start(
        self, processes: Processes, broker: Broker, cat: Catalogue, workdir: Path, opts: Options
    ) -> Any:
        requests = cat.by_role("requests")
        changelog = f"{requests.name.split('.', 1)[0]}.passthrough-changelog"
        client = AdminClient({"bootstrap.servers": broker.bootstrap})
        created = client.create_topics(
            [NewTopic(changelog, requests.partitions, 1, config={"cleanup.policy": "compact"})]
        )
        for future in created.values():
            future.result()
        outputs = [cat.name("decisions"), cat.name("jobs"), changelog]
        self.partitions = requests.partitions
        return processes.start(
            [*python_module("gateway.bench.passthrough"), "--bootstrap", broker.bootstrap,
             "--input", requests.name, "--outputs", ",".join(outputs),
             "--records-per-input", f"{self.records_per_input():.4f}",
             "--group", f"{requests.name}.passthrough",
             "--commit-interval", str(opts.commit_interval),
             "--ready-file", str(workdir / "assigned")],
            workdir / "passthrough.log",
        )  # fmt: skip

    def wait_ready(self, proc: Any, workdir: Path) -> None:
        # Once it owns every partition, as the gateway's /ready says for the processor.
        deadline = time.monotonic() + DECIDE_TIMEOUT_S
        ready = workdir / "assigned"
        while not (ready.exists() and ready.read_text() == str(self.partitions)):
            if proc.poll() is not None or time.monotonic() > deadline:
                _fail("the passthrough never owned every partition", proc, workdir)
            time.sleep(0.05)

    def request_timestamp_ms(self, msg: Message) -> int:
        return int(msg.timestamp()[1])  # the input's timestamp, carried over

    def outcome(self, value: bytes) -> str:
        return "passed"


def wait_ready(port: int, proc: Any, workdir: Path, failure: str) -> None:
    """Return once http://127.0.0.1:`port`/ready answers 200; fail with `failure` if `proc`
    ends first or it takes longer than DECIDE_TIMEOUT_S."""
    deadline = time.monotonic() + DECIDE_TIMEOUT_S
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=5):
                return
        except (urllib.error.URLError, OSError):
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            _fail(failure, proc, workdir)
        time.sleep(0.1)


def fresh_namespace(
    letter: str, label: str, broker: Broker, parent: Path
) -> tuple[str, Path, Catalogue]:
    """A round's own namespace (`letter` and 8 random hex digits), its topics created on the
    broker, and a new directory for it under `parent` named `label-<namespace>`."""
    namespace = f"{letter}{uuid.uuid4().hex[:8]}"
    workdir = parent / f"{label}-{namespace}"
    workdir.mkdir(parents=True)
    cat = catalogue.load(namespace=namespace)
    admin.apply(cat, {"bootstrap.servers": broker.bootstrap})
    return namespace, workdir, cat


def drop_namespace(broker: Broker, namespace: str) -> None:
    """Delete a finished round's topics, its changelogs included: rounds then find the
    broker as the first one did, not holding every earlier round's partitions (thousands
    by the third round), and a cluster given with --bootstrap is left as it was found."""
    ours = (f"{namespace}.", f"changelog__{namespace}.")
    # librdkafka's info lines (a purged queue at close) go to its logger, not the console.
    config: dict[str, Any] = {"bootstrap.servers": broker.bootstrap, "logger": KAFKA_LOGGER}
    client = AdminClient(config)
    try:
        names = [t for t in client.list_topics(timeout=30).topics if t.startswith(ours)]
        for future in client.delete_topics(names, operation_timeout=30).values():
            future.result()
    except KafkaException as exc:  # the figures stand; only the tidying failed
        print(f"could not delete the topics of {namespace}: {exc}", file=sys.stderr)


def run_round(
    system: StreamSystem,
    number: int,
    workload: Workload,
    broker: Broker,
    processes: Processes,
    opts: Options,
) -> StreamRound:
    namespace, workdir, cat = fresh_namespace("b", f"{system.name}-{number}", broker, opts.workdir)
    io = _Io(broker.bootstrap, cat)
    # The backlog is produced once the system is ready, and the window starts
    # once it is in place, at the first percent of the decisions at the
    # earliest: start-up and the producer are outside it.
    inputs = list(workload.items) * system.repeat
    launched = time.monotonic()
    proc = system.start(processes, broker, cat, workdir, opts)
    try:
        system.wait_ready(proc, workdir)
        startup = time.monotonic() - launched
        cpu_ready = procfs.cpu_seconds(proc.pid)
        io.send(inputs)
        values: list[bytes] = []
        mark = max(1, len(inputs) // 100)
        started = 0.0
        cpu_process = cpu_broker = None
        deadline = launched + DECIDE_TIMEOUT_S
        while len(values) < len(inputs):
            for msg in io.consumer.consume(1000, 0.05):
                value = msg.value()
                if msg.error() is None and value is not None:
                    values.append(value)
            if not started and len(values) >= mark:
                started, at_mark = time.monotonic(), len(values)
                cpu_process = procfs.cpu_seconds(proc.pid)
                cpu_broker = procfs.cpu_seconds(broker.pid, children=False)
            if proc.poll() is not None or time.monotonic() > deadline:
                _fail(f"{len(values)} of {len(inputs)} decisions arrived", proc, workdir)
        seconds = time.monotonic() - started
        cpu_end = procfs.cpu_seconds(proc.pid)
        cpu_process = _delta(cpu_end, cpu_process)
        cpu_broker = _delta(procfs.cpu_seconds(broker.pid, children=False), cpu_broker)
        if len(values) != len(inputs):
            raise BenchError(f"{len(values)} decisions for {len(inputs)} requests")

        written = _count_committed(broker.bootstrap, namespace, cat)
        outcomes = Counter(system.outcome(v) for v in values)
        result = StreamRound(
            system.name, number, len(inputs), len(inputs) - at_mark, seconds, cpu_process,
            cpu_broker, written, dict(outcomes), 0, startup, cpu_round_s=_delta(cpu_end, cpu_ready),
        )  # fmt: skip
        if opts.latency_seconds > 0:
            rate = max(1.0, result.rate / 2)
            paced = generate(int(rate * opts.latency_seconds), workload.duplicate_share,
                             workload.seed, tag=f"lat{number}-")  # fmt: skip
            samples = io.paced(paced.items, rate, system, proc, workdir)
            result.latency_rate = rate
            result.latency_ms = percentiles(samples)
        result.peak_rss_bytes = procfs.peak_rss_bytes(proc.pid)
        return result
    finally:
        processes.stop(proc)
        io.close()
        drop_namespace(broker, namespace)


@contextmanager
def timing() -> Iterator[None]:
    """The bench's own garbage collector is off while it times answers. A full collection
    of the bench process (its workload, every pending call) stopped the thread that reads
    answers for 50-120 ms every few seconds, and the pause was counted as the system's."""
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def percentiles(samples: list[float]) -> dict[str, float]:
    if len(samples) < 2:
        return {}
    q = statistics.quantiles(samples, n=100)
    return {"p50": q[49], "p95": q[94], "p99": q[98], "count": float(len(samples))}


def _delta(after: float | None, before: float | None) -> float | None:
    return None if after is None or before is None else after - before


def is_decision(value: bytes | None) -> bool:
    """A decision record, among the audit trail's other records on `decisions` (those of
    records that are no request start with their kind; a decision with its request id)."""
    return value is not None and not value.startswith(b'{"kind":')


class _Io:
    """The bench's producer of requests and its read_committed reader of decisions."""

    def __init__(self, bootstrap: str, cat: Catalogue) -> None:
        self.requests = cat.name("requests")
        self.producer = Producer({
            "bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
            "log_level": 3, **PRODUCER_SETTING,
        })  # fmt: skip
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex}",
            "isolation.level": "read_committed", "enable.auto.commit": False,
            "fetch.wait.max.ms": 50, "log_level": 3,
        })  # fmt: skip
        decisions = cat.by_role("decisions")
        self.consumer.assign(
            [TopicPartition(decisions.name, p, 0) for p in range(decisions.partitions)]
        )

    def send(self, items: list[Item] | tuple[Item, ...]) -> None:
        for item in items:
            self._produce(item)
        self.producer.flush()

    def _produce(self, item: Item) -> None:
        while True:
            try:
                self.producer.produce(self.requests, item.value, key=item.key.encode())
                return
            except BufferError:
                self.producer.poll(0.05)

    def await_decisions(
        self,
        count: int,
        proc: Any,
        workdir: Path,
        timeout: float = DECIDE_TIMEOUT_S,
        progress: Callable[[int], None] | None = None,
    ) -> list[bytes]:
        """The next `count` decisions; `progress` is told how many have come, every 0.1 s."""
        values: list[bytes] = []
        deadline = time.monotonic() + timeout
        while len(values) < count:
            for msg in self.consumer.consume(1000, 0.1):
                value = msg.value()
                if msg.error() is None and value is not None and is_decision(value):
                    values.append(value)
            if progress is not None:
                progress(len(values))
            if proc.poll() is not None or time.monotonic() > deadline:
                _fail(f"{len(values)} of {count} decisions arrived", proc, workdir)
        if len(values) > count:
            raise BenchError(f"{len(values)} decisions for {count} requests")
        return values

    def paced(
        self, items: tuple[Item, ...], rate: float, system: StreamSystem, proc: Any, workdir: Path
    ) -> list[float]:
        """Send at `rate`, reading decisions in between; latency of each in milliseconds."""
        latencies: list[float] = []

        def read(wait: float) -> None:
            for msg in self.consumer.consume(1000, wait):
                if msg.error() is None and is_decision(msg.value()):
                    seen = time.time() * 1000
                    latencies.append(seen - system.request_timestamp_ms(msg))

        with timing():
            started = time.monotonic()
            for n, item in enumerate(items):
                while (pause := started + n / rate - time.monotonic()) > 0:
                    read(min(pause, 0.01))
                self._produce(item)
                self.producer.poll(0)
            self.producer.flush()
            deadline = time.monotonic() + 120
            while len(latencies) < len(items):
                read(0.05)
                if proc.poll() is not None or time.monotonic() > deadline:
                    _fail(f"{len(latencies)} of {len(items)} paced decisions", proc, workdir)
        return latencies

    def close(self) -> None:
        self.consumer.close()
        self.producer.flush()


def _fail(what: str, proc: Any, workdir: Path) -> None:
    logs = sorted(workdir.glob("*.log"))
    tail = logs[0].read_text(errors="replace")[-3000:] if logs else ""
    state = f"exited with {proc.returncode}" if proc.poll() is not None else "still running"
    raise BenchError(f"{what}; the system {state}; log {logs[0] if logs else '-'}:\n{tail}")


def _count_committed(bootstrap: str, namespace: str, cat: Catalogue) -> int:
    """Committed records (transaction markers and aborted ones excluded) the system wrote.

    That is every record on every topic named with the round's namespace
    (outputs, and changelogs, whose names carry the namespaced group) but the
    inputs.
    """
    inputs = {cat.name(role) for role in INPUT_ROLES}
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"bench-count-{uuid.uuid4().hex}",
        "isolation.level": "read_committed", "enable.auto.commit": False,
        "enable.partition.eof": True, "log_level": 3,
    })  # fmt: skip
    try:
        todo = set()
        for name, topic in consumer.list_topics(timeout=30).topics.items():
            if namespace not in name or name in inputs:
                continue
            for p in topic.partitions:
                _, end = consumer.get_watermark_offsets(TopicPartition(name, p), timeout=30)
                if end > 0:
                    todo.add((name, p))
        consumer.assign([TopicPartition(t, p, 0) for t, p in todo])
        count, deadline = 0, time.monotonic() + 120
        while todo and time.monotonic() < deadline:
            for msg in consumer.consume(5000, 0.5):
                where, error = (msg.topic(), msg.partition()), msg.error()
                if error is None:
                    count += 1
                elif error.code() == KafkaError._PARTITION_EOF:  # read to the stable end
                    todo.discard(where)
        if todo:
            raise BenchError(f"could not read to the end of {sorted(todo)}")
        return count
    finally:
        consumer.close()
