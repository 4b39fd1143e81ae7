"""quixstreams' own per-record floor: the processor's runtime settings, deciding nothing.

    python -m gateway.bench.floor --bootstrap B --input T --output T2 --group G
        --state-dir D [--state] [--commit-interval S]

An Application set up by the processor's own `runtime_settings` (exactly-once,
the same commit interval, poll timeout, fetch wait, transactional id, static
membership and RocksDB options) reads the requests topic and writes, per record, one record to the
output topic through the runtime's transactional producer, as the dedup stage
does. With --state the step is stateful and reads and writes one state key of
the record's key, so the figure includes the state store and its changelog.
What the gateway spends per decision above this is its own. Runs until SIGTERM.

`measure` runs it in the bench's rounds (streams.run_round) and reports CPU
per record and records per second, both variants.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
from pathlib import Path
from typing import Any

from gateway.bench import streams
from gateway.bench.services import Processes
from gateway.bench.workload import Workload
from gateway.catalogue import Catalogue

VARIANTS = {"no state": False, "one state get/set": True}


def main(argv: list[str] | None = None) -> int:
    from quixstreams import Application

    from gateway.processor import quix
    from gateway.processor.app import runtime_settings

    parser = argparse.ArgumentParser(prog="python -m gateway.bench.floor")
    for name in ("--bootstrap", "--input", "--output", "--group", "--state-dir"):
        parser.add_argument(name, required=True)
    parser.add_argument("--state", action="store_true")
    parser.add_argument("--commit-interval", type=float, default=0.1)
    args = parser.parse_args(argv)
    app = Application(
        **runtime_settings(
            {"bootstrap.servers": args.bootstrap},
            args.group,
            "1",
            args.commit_interval,
            Path(args.state_dir),
        )
    )
    topic = app.topic(args.input, key_deserializer="bytes", value_deserializer="bytes")
    sdf = app.dataframe(topic)
    produce = quix.transactional_producer(sdf).produce
    output = args.output

    def step(value: Any, key: Any, timestamp: int, headers: Any) -> None:
        produce(topic=output, key=key, value=value)

    def stateful_step(value: Any, key: Any, timestamp: int, headers: Any, state: Any) -> None:
        seen = state.get_bytes("seen")
        state.set_bytes("seen", b"1" if seen is None else seen + b"1")
        produce(topic=output, key=key, value=value)

    if args.state:
        sdf.update(stateful_step, stateful=True, metadata=True)
    else:
        sdf.update(step, metadata=True)
    app.run()
    return 0


class Floor(streams.StreamSystem):
    """An empty processor on the gateway's runtime settings (see the module docstring)."""

    # Ten times the gateway's input keeps its much shorter window many commits (and many
    # of /proc's 10 ms CPU ticks) long, --quick's too.
    repeat = 10

    def __init__(self, name: str, state: bool) -> None:
        self.name = f"floor ({name})"
        self.state = state

    def start(
        self,
        processes: Processes,
        broker: streams.Broker,
        cat: Catalogue,
        workdir: Path,
        opts: streams.Options,
    ) -> Any:
        import sys

        requests = cat.name("requests")
        command = [
            sys.executable, "-m", "gateway.bench.floor", "--bootstrap", broker.bootstrap,
            "--input", requests, "--output", cat.name("decisions"),
            "--group", f"{requests}.floor", "--state-dir", str(workdir / "state"),
            "--commit-interval", str(opts.commit_interval),
        ]  # fmt: skip
        return processes.start(command + (["--state"] if self.state else []),
                               workdir / "floor.log")  # fmt: skip

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
        def fmt(values: list[float]) -> str:
            return f"{statistics.median(values):,.0f} [{min(values):,.0f}–{max(values):,.0f}]"

        return f"{fmt(self.cpu_us)} µs CPU per record, {fmt(self.rates)} records/s"


def measure(
    rounds: int,
    workload: Workload,
    broker: streams.Broker,
    processes: Processes,
    opts: streams.Options,
) -> list[FloorFigure]:
    """Each variant `rounds` times, alternating; CPU of the floor process over the window."""
    opts = dataclasses.replace(opts, latency_seconds=0.0)
    systems = {name: Floor(name, state) for name, state in VARIANTS.items()}
    results: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in systems}
    for number in range(1, rounds + 1):
        for name, system in systems.items():
            r = streams.run_round(system, number, workload, broker, processes, opts)
            cpu, rate = results[name]
            if r.cpu_process_s is not None:
                cpu.append(r.cpu_process_s / r.requests * 1e6)
            rate.append(r.rate)
    return [FloorFigure(name, cpu, rates) for name, (cpu, rates) in results.items()]


if __name__ == "__main__":
    raise SystemExit(main())
