"""`gateway bench`: the gateway beside a raw exactly-once passthrough, Redis, PostgreSQL, HTTP."""

from __future__ import annotations

import argparse
from pathlib import Path

from gateway.cli.common import CommandError

SYSTEMS = ("gateway", "passthrough", "redis", "postgres", "http")
FIGURES = ("fingerprint", "restore", "cold-start", "floor")
# (full run, --quick)
DEFAULTS = {
    "requests": (20_000, 2_000),
    "rounds": (3, 1),
    "latency_seconds": (10.0, 2.0),
    "http_concurrency": ("16,64,256,1024", "64"),
    "http_batch_concurrency": ("4,16", "4"),
    "http_seconds": (10.0, 2.0),
    "restore_keys": (1_000_000, 2_000),
}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bench", help="measure the gateway beside a raw passthrough, Redis, PostgreSQL and HTTP",
        description="Run every system on the same generated workload, rounds interleaved, and "
        "write results.json, results.md and charts under --output.",
    )  # fmt: skip
    p.add_argument("--quick", action="store_true", help="a smoke run of about a minute")
    p.add_argument("--output", type=Path, default=Path("bench-results"),
                   help="where results go, one folder per run (default %(default)s)")  # fmt: skip
    p.add_argument("--systems", default=",".join(SYSTEMS),
                   help="comma-separated subset of %(default)s")  # fmt: skip
    p.add_argument("--figures", default=",".join(FIGURES),
                   help="other figures to take, comma-separated subset of %(default)s "
                   "('' for none)")  # fmt: skip
    p.add_argument("--processes", default="1,2,N",
                   help="the gateway's processor processes, one row each, comma-separated; "
                   "N: `gateway process`'s default, one per core, at most the partitions "
                   "(default %(default)s)")  # fmt: skip
    p.add_argument("--requests", type=int, help="requests per round (default 20000; quick 2000)")
    p.add_argument("--rounds", type=int, help="rounds per system (default 3; quick 1)")
    p.add_argument("--duplicates", type=float, default=0.3,
                   help="share of requests repeating an earlier job "
                   "(default %(default)s)")  # fmt: skip
    p.add_argument("--seed", type=int, default=7, help="workload seed (default %(default)s)")
    p.add_argument("--latency-seconds", type=float,
                   help="paced latency phase per round at half the measured rate "
                   "(default 10; quick 2; 0 skips it)")  # fmt: skip
    p.add_argument("--commit-interval", type=float, default=0.1,
                   help="transaction commit interval of the gateway and the passthrough "
                   "(default %(default)s)")  # fmt: skip
    p.add_argument("--answers", choices=("early", "committed"), default="early",
                   help="when the gateway's processor answers a waiting caller (see "
                   "`gateway process --answers`; default %(default)s)")  # fmt: skip
    p.add_argument("--http-concurrency", help="wrk connections, comma-separated "
                   "(default 16,64,256,1024; quick 64)")  # fmt: skip
    p.add_argument("--http-batch-concurrency", help="connections for the batch endpoint, "
                   "100 jobs per call (default 4,16; quick 4; '' for none)")  # fmt: skip
    p.add_argument("--http-seconds", type=float, help="wrk run per load (default 10; quick 2)")
    p.add_argument("--restore-keys", type=int,
                   help="keys written, then restored from the changelog (default 1000000; "
                   "quick 2000)")  # fmt: skip
    p.add_argument("--records-per-input", type=float, default=3.0,
                   help="passthrough records per input when the gateway is not measured "
                   "in the same run (default %(default)s)")  # fmt: skip
    p.add_argument(
        "--bootstrap",
        help="use this Kafka cluster, whose broker CPU is then not measured "
        "(default: a local broker started for the run)",
    )
    p.set_defaults(func=_bench)


def _bench(args: argparse.Namespace) -> int:
    from rich.console import Console

    from gateway.bench import report
    from gateway.bench.run import Plan, missing_extras, run
    from gateway.bench.services import ServiceError
    from gateway.bench.streams import BenchError

    pick = 1 if args.quick else 0

    def setting(name: str) -> object:
        value = getattr(args, name)
        return DEFAULTS[name][pick] if value is None else value

    plan = Plan(
        systems=_subset(args.systems, SYSTEMS, "--systems"),
        figures=_subset(args.figures, FIGURES, "--figures"),
        processes=_processes(args.processes),
        requests=int(setting("requests")),  # type: ignore[call-overload]
        rounds=int(setting("rounds")),  # type: ignore[call-overload]
        duplicates=args.duplicates,
        seed=args.seed,
        latency_seconds=float(setting("latency_seconds")),  # type: ignore[arg-type]
        commit_interval=args.commit_interval,
        answers=args.answers,
        http_concurrency=_ints(str(setting("http_concurrency"))),
        http_batch_concurrency=_ints(str(setting("http_batch_concurrency"))),
        http_seconds=float(setting("http_seconds")),  # type: ignore[arg-type]
        restore_keys=int(setting("restore_keys")),  # type: ignore[call-overload]
        records_per_input=args.records_per_input,
        bootstrap=args.bootstrap,
        output=args.output,
        quick=args.quick,
    )
    if plan.requests < 10 or plan.rounds < 1 or not 0 <= plan.duplicates < 1:
        raise CommandError("--requests must be at least 10, --rounds at least 1, "
                           "--duplicates in [0, 1)")  # fmt: skip
    missing = missing_extras(plan)
    if missing:
        raise CommandError(
            f"the bench needs {', '.join(missing)}: install the bench extra, "
            "pip install 'unique-jobs-gateway[bench]' (make install does)"
        )
    console = Console()
    try:
        result = run(plan, console)
    except (BenchError, ServiceError) as exc:
        raise CommandError(f"bench: {exc}") from exc
    print((Path(result["directory"]) / "results.md").read_text())
    print(report.summary_line(result, Path(result["directory"])))
    return 0


def _subset(text: str, allowed: tuple[str, ...], flag: str) -> tuple[str, ...]:
    chosen = tuple(x.strip() for x in text.split(",") if x.strip())
    unknown = [x for x in chosen if x not in allowed]
    if unknown:
        raise CommandError(f"{flag}: unknown {unknown}; choose from {','.join(allowed)}")
    return tuple(x for x in allowed if x in chosen)


def _processes(text: str) -> tuple[int, ...]:
    """The counts in --processes, N resolved, each once, in order."""
    import os

    from gateway import catalogue
    from gateway.processor.supervisor import default_processes

    partitions = catalogue.load().by_role("requests").partitions
    default = str(default_processes(partitions, os.cpu_count()))
    counts = _ints(",".join(default if x.strip() == "N" else x for x in text.split(",")))
    if not counts or max(counts) > partitions:
        raise CommandError(f"--processes: counts from 1 to {partitions}, the partitions")
    return tuple(dict.fromkeys(counts))


def _ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError as exc:
        raise CommandError(f"expected comma-separated numbers, got {text!r}") from exc
    if any(v < 1 for v in values):
        raise CommandError(f"connection counts must be positive, got {text!r}")
    return values
