"""`gateway bench`: the gateway beside a raw exactly-once passthrough, Redis, PostgreSQL, HTTP."""

from __future__ import annotations

import argparse
from pathlib import Path

from gateway.cli.common import CommandError

SYSTEMS = ("gateway", "passthrough", "redis", "postgres", "http")
FIGURES = ("fingerprint", "restore", "cold-start", "floor", "listing", "audit")
ANSWER_MODES = ("early", "committed")
# (full run, --quick)
DEFAULTS = {
    "requests": (20_000, 2_000),
    "rounds": (3, 1),
    "latency_seconds": (10.0, 2.0),
    "http_concurrency": ("16,64,256,1024", "64"),
    "http_batch_concurrency": ("4,16", "4"),
    "http_seconds": (10.0, 2.0),
    "http_workers": ("1,2,N", "1"),
    "http_auth": ("on", "off"),
    "fetch_jobs": (2_000, 200),
    "answers": ("early,committed", "early"),
    "restore_keys": (1_000_000, 2_000),
}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bench", help="measure the gateway beside a raw passthrough, Redis, PostgreSQL and HTTP",
        description="Run every system on the same generated workload, rounds interleaved, and "
        "write results.json, results.md and charts under --output.",
    )  # fmt: skip
    p.add_argument(
        "--quick", action="store_true",
        help="a smoke run of a few minutes: one round of 2,000 requests, early answers only, "
        "short phases (the other defaults below say their quick values)",
    )  # fmt: skip
    p.add_argument("--output", type=Path, default=Path("bench-results"),
                   help="where results go, one folder per run (default %(default)s)")  # fmt: skip
    p.add_argument(
        "--systems",
        help=f"comma-separated subset of {','.join(SYSTEMS)} (default: all; "
        "one whose program is missing is then skipped, see --install-missing)",
    )
    p.add_argument("--install-missing", action="store_true",
                   help="install missing Redis, PostgreSQL or wrk from Debian's packages "
                   "with apt-get (as root); the bench says which before it does")  # fmt: skip
    p.add_argument("--figures", default=",".join(FIGURES),
                   help="other figures to take, comma-separated subset of %(default)s "
                   "('' for none); floor: the processor's loop with an empty decision, "
                   "without and with state; listing: the admin job list's pages on a view of "
                   "1,000,000 jobs (quick 20,000); audit: replay and explain of 300,000 "
                   "requests one processor decided (quick: --requests)")  # fmt: skip
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
                   help="paced latency phase per round at half the measured rate, and the "
                   "length of the SDK answer rows (default 10; quick 2; 0 skips them)")  # fmt: skip
    p.add_argument("--answer-rate", type=float,
                   help="jobs per second the SDK answer rows send (default: half the rate "
                   "the first gateway row of the round decided); one more row, in the first "
                   "of --answers, always sends 1,000/s and reports the processor's CPU per "
                   "decision")  # fmt: skip
    p.add_argument("--commit-interval", type=float, default=0.1,
                   help="transaction commit interval of the gateway and the passthrough "
                   "(default %(default)s)")  # fmt: skip
    p.add_argument("--answers",
                   help="when the processor answers a waiting caller (`gateway process "
                   "--answers`), comma-separated: the SDK answer and HTTP rows run once per "
                   "mode, alternating; the first is also every other processor's "
                   "(default early,committed; quick early)")  # fmt: skip
    p.add_argument("--http-concurrency", help="wrk connections, comma-separated "
                   "(default 16,64,256,1024; quick 64)")  # fmt: skip
    p.add_argument("--http-batch-concurrency", help="connections for the batch endpoint, "
                   "100 jobs per call (default 4,16; quick 4; '' for none)")  # fmt: skip
    p.add_argument("--http-workers",
                   help="serve workers (`gateway serve --workers`), comma-separated: the "
                   "HTTP loads of the first answer mode run once per count; N: one per core "
                   "(default 1,2,N; quick 1)")  # fmt: skip
    p.add_argument("--http-auth", choices=("on", "off"),
                   help="on: the first HTTP load once more against a serve that reads a "
                   "credentials file, every call with a key, and its serve CPU per enqueue "
                   "over the same load's without (default on; quick off)")  # fmt: skip
    p.add_argument("--http-seconds", type=float,
                   help="run per HTTP load (default 10; quick 2)")  # fmt: skip
    p.add_argument("--fetch-jobs", type=int,
                   help="jobs put in a queue, then fetched one per call by 4 workers "
                   "(default 2000; quick 200; 0 skips the fetch load)")  # fmt: skip
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
    from gateway.bench.services import ServiceError, install
    from gateway.bench.streams import BenchError

    pick = 1 if args.quick else 0

    def setting(name: str) -> object:
        value = getattr(args, name)
        return DEFAULTS[name][pick] if value is None else value

    systems = _subset(args.systems or ",".join(SYSTEMS), SYSTEMS, "--systems")
    systems, skipped, packages = _tools(systems, args.systems is not None, args.install_missing)
    answers = _subset(str(setting("answers")), ANSWER_MODES, "--answers", ordered=True)
    if not answers:
        raise CommandError("--answers: name at least one of early, committed")
    plan = Plan(
        systems=systems,
        figures=_subset(args.figures, FIGURES, "--figures"),
        processes=_processes(args.processes),
        requests=int(setting("requests")),  # type: ignore[call-overload]
        rounds=int(setting("rounds")),  # type: ignore[call-overload]
        duplicates=args.duplicates,
        seed=args.seed,
        latency_seconds=float(setting("latency_seconds")),  # type: ignore[arg-type]
        commit_interval=args.commit_interval,
        answers=answers,
        answer_rate=args.answer_rate,
        http_concurrency=_ints(str(setting("http_concurrency"))),
        http_batch_concurrency=_ints(str(setting("http_batch_concurrency"))),
        http_seconds=float(setting("http_seconds")),  # type: ignore[arg-type]
        http_workers=_workers(str(setting("http_workers"))),
        http_auth=setting("http_auth") == "on",
        fetch_jobs=max(0, int(setting("fetch_jobs"))),  # type: ignore[call-overload]
        restore_keys=int(setting("restore_keys")),  # type: ignore[call-overload]
        records_per_input=args.records_per_input,
        bootstrap=args.bootstrap,
        output=args.output,
        quick=args.quick,
        skipped=skipped,
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
    for line in skipped:
        console.print(f"skipping {line}", markup=False, highlight=False)
    try:
        if packages:
            console.print(f"installing Debian packages with apt-get: {' '.join(packages)}",
                          markup=False, highlight=False)  # fmt: skip
            install(packages)
        result = run(plan, console)
    except (BenchError, ServiceError) as exc:
        raise CommandError(f"bench: {exc}") from exc
    print((Path(result["directory"]) / "results.md").read_text())
    print(report.summary_line(result, Path(result["directory"])))
    return 0


def _subset(
    text: str, allowed: tuple[str, ...], flag: str, ordered: bool = False
) -> tuple[str, ...]:
    """The names in `text`, each once: in `allowed`'s order, or as given when `ordered`."""
    chosen = tuple(x.strip() for x in text.split(",") if x.strip())
    unknown = [x for x in chosen if x not in allowed]
    if unknown:
        raise CommandError(f"{flag}: unknown {unknown}; choose from {','.join(allowed)}")
    if ordered:
        return tuple(dict.fromkeys(chosen))
    return tuple(x for x in allowed if x in chosen)


def _tools(
    systems: tuple[str, ...], asked: bool, install: bool
) -> tuple[tuple[str, ...], tuple[str, ...], list[str]]:
    """The systems to run, the lines saying which were skipped and why, the packages to install.

    A system whose program is missing is skipped when the user did not name
    it, refused when they did, unless they opted in to installing it.
    """
    from gateway.bench.services import missing_tools

    missing = missing_tools(systems)
    if not missing:
        return systems, (), []
    if install:
        return systems, (), sorted({tool.package for tool in missing.values()})
    why = {
        system: f"{system}: {tool.binary} is missing (Debian package {tool.package})"
        for system, tool in missing.items()
    }
    if asked:
        it = "it" if len(missing) == 1 else "them"
        raise CommandError(
            "; ".join(why.values()) + f": install {it}, pass --install-missing to have the "
            f"bench install {it} with apt-get (as root), or leave the system out of --systems"
        )
    skipped = tuple(f"{line}; --install-missing installs it" for line in why.values())
    return tuple(s for s in systems if s not in missing), skipped, []


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


def _workers(text: str) -> tuple[int, ...]:
    """The counts in --http-workers, N (one per core) resolved, each once, in order."""
    import os

    from gateway.http.serving import MAX_WORKERS

    cores = str(os.cpu_count() or 1)
    counts = _ints(",".join(cores if x.strip() == "N" else x for x in text.split(",")))
    if not counts or max(counts) > MAX_WORKERS:
        raise CommandError(f"--http-workers: counts from 1 to {MAX_WORKERS}")
    return tuple(dict.fromkeys(counts))


def _ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError as exc:
        raise CommandError(f"expected comma-separated numbers, got {text!r}") from exc
    if any(v < 1 for v in values):
        raise CommandError(f"connection counts must be positive, got {text!r}")
    return values
