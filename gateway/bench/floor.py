"""The loop's own per-record floor: the processor's loop and settings, deciding nothing.

    python -m gateway.bench.floor --bootstrap B --namespace N --group G --state-dir D
        [--state] [--commit-interval S] [--metrics-port P]

The processor's own loop (`gateway.processor.loop.Loop`) on the processor's
own `runtime_settings` (exactly-once: the same consumer and producer
settings, commit interval, transactional id and static membership) reads the
namespace's requests topic. In place of the gateway's stages an empty
decision writes, per record, one record to the decisions topic through the
loop's transactional producer, as the dedup stage writes its outputs. With
--state it also reads and writes one value of the record's key in its
partition's store, as the dedup stage reads and writes its entries, so the
figure includes the store, its changelog and the RocksDB write after each
commit. What the gateway spends per decision above this is its own. With
--metrics-port it serves /ready and /metrics as the processor does. Runs
until SIGTERM.

`measure` runs it in the bench's rounds (streams.run_round) and reports, for
both variants, its CPU per record over the whole round, and records per
second over the round's window: the floor keeps up with the bench's own
producer and reader, so the rate says more about them than about the loop.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from gateway.bench import report, streams
from gateway.bench.services import Processes, free_port
from gateway.bench.workload import Workload
from gateway.catalogue import Catalogue
from gateway.children import python_module
from gateway.processor.stages import Record, Stores

VARIANTS = {"no state": False, "one state get/set": True}
# The loop keeps a store for the stateful roles only (changelogs.STATEFUL): without --state
# the input is read under a role that has none.
STATEFUL_ROLE, STATELESS_ROLE = "requests", "floor"


class EmptyDecision:
    """What the loop hands records to, doing none of the stages' work: one output per
    record, and with `state` one value of its key read and written."""

    def __init__(
        self, output: str, stores: Stores, state: bool, produce: Callable[..., None]
    ) -> None:
        self.stores = stores
        self.output = output
        self.state = state
        self.produce = produce  # the loop's

    def handle(self, records: Iterable[Record]) -> None:
        produce, output, stores = self.produce, self.output, self.stores
        for record in records:
            key = record.key()
            if self.state:
                store = stores.get(STATEFUL_ROLE, record.partition() or 0)
                store.at(record.timestamp()[1])
                state = store.state(key or b"")
                seen = state.get_bytes("seen")
                state.set_bytes("seen", b"1" if seen is None else seen + b"1")
            produce(output, key, record.value(), None)


def main(argv: list[str] | None = None) -> int:
    import gc

    from confluent_kafka.admin import AdminClient

    from gateway import catalogue, config, logs
    from gateway.processor import changelogs
    from gateway.processor.app import runtime_settings
    from gateway.processor.loop import Loop, Topics
    from gateway.processor.metrics import Metrics
    from gateway.processor.readiness import Readiness, serve
    from gateway.processor.shutdown import Shutdown

    parser = argparse.ArgumentParser(prog="python -m gateway.bench.floor")
    for name in ("--bootstrap", "--namespace", "--group", "--state-dir"):
        parser.add_argument(name, required=True)
    parser.add_argument("--state", action="store_true")
    parser.add_argument("--commit-interval", type=float, default=0.1)
    parser.add_argument("--metrics-port", type=int)
    args = parser.parse_args(argv)
    logs.configure("WARNING")  # as the bench runs `gateway process`
    shutdown = Shutdown()
    shutdown.install_handlers()
    client = config.client_config(args.bootstrap)
    cat = catalogue.load(namespace=args.namespace)
    requests = cat.name("requests")
    if args.state:
        changelogs.ensure(cat, args.group, AdminClient(client))
    metrics = Metrics()
    consumer, producer = runtime_settings(client, args.group, "1", metrics.observe_consumer_stats)
    stores = Stores(Path(args.state_dir))
    topics = Topics(
        inputs=[requests],
        roles={requests: STATEFUL_ROLE if args.state else STATELESS_ROLE},
        changelogs=changelogs.changelogs(cat, args.group),
    )
    loop = Loop(consumer, producer, client, topics, stores, args.commit_interval, metrics)
    loop.stages = EmptyDecision(cat.name("decisions"), stores, args.state, loop.produce)
    shutdown.attach(loop)
    if args.metrics_port is not None:
        serve(args.metrics_port, metrics.registry, Readiness(loop, shutdown))
    if shutdown.requested:
        return 0
    # As the processor does before its loop (app.run).
    gc.collect()
    gc.freeze()
    loop.run()
    return 0


class Floor(streams.StreamSystem):
    """The processor's loop with an empty decision (see the module docstring)."""

    # Ten times the gateway's input keeps its much shorter window many commits (and many
    # of /proc's 10 ms CPU ticks) long, --quick's too.
    repeat = 10

    def __init__(self, name: str, state: bool) -> None:
        self.name = f"floor ({name})"
        self.state = state
        self.port = 0

    def start(
        self,
        processes: Processes,
        broker: streams.Broker,
        cat: Catalogue,
        workdir: Path,
        opts: streams.Options,
    ) -> Any:
        requests = cat.name("requests")
        self.port = free_port()
        command = [
            *python_module("gateway.bench.floor"), "--bootstrap", broker.bootstrap,
            "--namespace", requests.split(".", 1)[0], "--group", f"{requests}.floor",
            "--state-dir", str(workdir / "state"), "--commit-interval", str(opts.commit_interval),
            "--metrics-port", str(self.port),
        ]  # fmt: skip
        return processes.start(command + (["--state"] if self.state else []),
                               workdir / "floor.log")  # fmt: skip

    def wait_ready(self, proc: Any, workdir: Path) -> None:
        # Its /ready, as the processor's: it owns the partitions and restores nothing.
        streams.wait_ready(self.port, proc, workdir, "the floor never became ready")

    def request_timestamp_ms(self, msg: Any) -> int:
        return int(msg.timestamp()[1])

    def outcome(self, value: bytes) -> str:
        return "passed"


@dataclasses.dataclass(frozen=True)
class FloorFigure:
    variant: str
    cpu_us: list[float]  # per record, one per round
    rates: list[float]

    def text(self) -> str:
        cpu, rates = report.spread(self.cpu_us), report.spread(self.rates)
        return f"{report._fmt(cpu, 1)} µs CPU per record, {report._fmt(rates)} records/s"


def measure(
    rounds: int,
    workload: Workload,
    broker: streams.Broker,
    processes: Processes,
    opts: streams.Options,
) -> list[FloorFigure]:
    """Each variant `rounds` times, alternating: CPU of the floor process over the round per
    record, and records per second over the window."""
    opts = dataclasses.replace(opts, latency_seconds=0.0)
    systems = {name: Floor(name, state) for name, state in VARIANTS.items()}
    results: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in systems}
    for number in range(1, rounds + 1):
        for name, system in systems.items():
            r = streams.run_round(system, number, workload, broker, processes, opts)
            cpu, rate = results[name]
            # Over the whole round: the floor decides faster than the bench reads, so much
            # of its work is done before the window starts (see streams.run_round).
            if r.cpu_round_s is not None:
                cpu.append(r.cpu_round_s / r.inputs * 1e6)
            rate.append(r.rate)
    return [FloorFigure(name, cpu, rates) for name, (cpu, rates) in results.items()]


if __name__ == "__main__":
    raise SystemExit(main())
