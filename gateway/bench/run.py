"""`gateway bench`: every system on the same workload, rounds interleaved, checked, reported."""

from __future__ import annotations

import dataclasses
import platform
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from gateway.bench import answers, report, stores, streams, web
from gateway.bench.fingerprint import fingerprint_rates
from gateway.bench.services import Processes, start_postgres, start_redis
from gateway.bench.streams import BenchError, Broker, Options
from gateway.bench.workload import Workload, generate
from gateway.broker import launcher
from gateway.broker.ports import free_port_block
from gateway.home import gateway_home

EXTRA_MODULES = {"redis": ["redis"], "postgres": ["psycopg"]}
# The pace of the paced SDK answer row, requests per second.
PACE = 1_000.0
# Jobs in the view the admin job list is timed on (`--figures listing`).
LISTING_JOBS = 1_000_000
LISTING_QUICK = 20_000
AUDIT_REQUESTS = 300_000  # quick: the round's requests


@dataclasses.dataclass(frozen=True)
class Plan:
    systems: tuple[str, ...]
    figures: tuple[str, ...]
    processes: tuple[int, ...]  # the gateway's processor processes, one row each
    requests: int
    rounds: int
    duplicates: float
    seed: int
    latency_seconds: float
    commit_interval: float
    # The processor's --answers modes, alternating in every round; the first is the
    # mode of every processor whose answers nobody waits for (the throughput rows).
    answers: tuple[str, ...]
    answer_rate: float | None  # the SDK answer rows' pace; None: half the first gateway row's
    http_concurrency: tuple[int, ...]
    http_batch_concurrency: tuple[int, ...]
    http_seconds: float
    http_workers: tuple[int, ...]
    http_auth: bool  # the first HTTP load again with a key on every call (`auth_ratios`)
    fetch_jobs: int  # jobs put in a queue for the fetch load (0: no fetch load)
    restore_keys: int
    records_per_input: float
    bootstrap: str | None
    output: Path
    quick: bool
    skipped: tuple[str, ...] = ()  # systems left out, each with why


def missing_extras(plan: Plan) -> list[str]:
    """Modules of the `bench` extra this plan needs and that are not installed."""
    import importlib.util

    wanted = ["matplotlib"] + [m for s in plan.systems for m in EXTRA_MODULES.get(s, [])]
    return [m for m in wanted if importlib.util.find_spec(m) is None]


def run(plan: Plan, console: Console) -> dict[str, Any]:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = plan.output / stamp
    out.mkdir(parents=True, exist_ok=False)
    workload = generate(plan.requests, plan.duplicates, plan.seed)
    rounds: list[dict[str, Any]] = []
    figures: dict[str, dict[str, Any]] = {}
    versions: dict[str, Any] = _versions()
    result: dict[str, Any] = {
        "started": stamp, "settings": _settings(plan), "workload": workload.describe(),
        "machine": _machine(), "versions": versions, "rounds": rounds, "figures": figures,
    }  # fmt: skip
    processes = Processes()
    workdir = Path(tempfile.mkdtemp(prefix="bench-", dir=_scratch()))
    with _stopping_on_signals(), _progress(console) as progress:
        try:
            per_round = len(plan.systems)
            if "gateway" in plan.systems:
                per_round += len(plan.processes) - 1
                if plan.latency_seconds > 0:
                    per_round += len(plan.answers) + 1  # and the paced row
            if "http" in plan.systems:
                per_round += sum(len(loads) for _, _, loads, _ in _http_runs(plan, 1)) - 1
            steps = per_round * plan.rounds + len(plan.figures)
            task = progress.add_task("starting", total=steps)

            def step(name: str) -> None:
                progress.update(task, description=name)

            def done(line: str) -> None:
                progress.advance(task)
                progress.console.print(line, markup=False, highlight=False)

            with _broker(plan, workdir) as broker:
                versions["kafka"] = broker.version
                _measure(plan, workload, broker, processes, workdir, rounds, figures,
                         versions, step, done)  # fmt: skip
        finally:
            processes.stop_all()
            shutil.rmtree(workdir, ignore_errors=True)
            result["finished"] = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
            result["summary"] = report.summarise(rounds)
            if rounds:
                result["charts"] = report.charts(result, out)
            report.write_json(result, out / "results.json")
            (out / "results.md").write_text(report.markdown(result))
    result["directory"] = str(out)
    return result


def _measure(
    plan: Plan,
    workload: Workload,
    broker: Broker,
    processes: Processes,
    workdir: Path,
    rounds: list[dict[str, Any]],
    figures: dict[str, dict[str, Any]],
    versions: dict[str, Any],
    step: Callable[[str], None],
    done: Callable[[str], None],
) -> None:
    opts = Options(plan.commit_interval, plan.latency_seconds, workdir, plan.answers[0])
    measured_records: list[float] = []

    def records_per_input() -> float:
        return measured_records[-1] if measured_records else plan.records_per_input

    gateway_duplicates: list[int] = []
    services = {}
    if "redis" in plan.systems:
        services["redis"] = start_redis(processes, workdir)
    if "postgres" in plan.systems:
        services["postgres"] = start_postgres(processes, workdir)
    versions.update({name: service.version for name, service in services.items()})
    kinds: dict[str, list[streams.StreamSystem]] = {
        "gateway": [streams.Gateway(n) for n in plan.processes],
        "passthrough": [streams.Passthrough(records_per_input)],
    }
    for number in range(1, plan.rounds + 1):
        for system in plan.systems:
            if system in kinds:
                for kind in kinds[system]:
                    step(f"round {number}/{plan.rounds}: {kind.name}")
                    r = streams.run_round(kind, number, workload, broker, processes, opts)
                    row = {**dataclasses.asdict(r), "rate": r.rate,
                           "records_per_request": r.records_per_request}  # fmt: skip
                    if system == "gateway":
                        _check_gateway(r.outcomes, workload)
                        # The passthrough mirrors the row it is compared with. Rows differ:
                        # the changelog gets a key once per transaction however often
                        # it changed, so records per decision follow the timing.
                        if kind is kinds["gateway"][0]:
                            measured_records.append(r.records_per_request)
                        gateway_duplicates.append(
                            r.outcomes.get("rejected", 0) + r.outcomes.get("ignored", 0)
                        )
                    else:
                        _check_passthrough(r, row, records_per_input())
                    rounds.append(row)
                    done(_line(row))
                if system == "gateway" and plan.latency_seconds > 0:
                    # At half the rate the first row's processors just decided, unless set.
                    rate = plan.answer_rate or _first_gateway_rate(rounds, number) / 2
                    # Odd rounds in the order given, even rounds the other way round,
                    # so no mode always follows the gateway rows.
                    order = plan.answers if number % 2 else plan.answers[::-1]
                    for mode in order:
                        step(f"round {number}/{plan.rounds}: SDK answers, {mode}")
                        a = answers.sdk_round(
                            mode, plan.processes[0], number, max(1.0, rate), plan.latency_seconds,
                            plan.duplicates, plan.seed, broker, processes, opts,
                        )  # fmt: skip
                        row = {**dataclasses.asdict(a), "rate": a.rate}
                        rounds.append(row)
                        done(_line(row))
                    row = _paced_answers(plan, number, broker, processes, opts, step)
                    rounds.append(row)
                    done(_line(row))
            elif system in ("redis", "postgres"):
                service = services[system]
                measure = stores.redis_round if system == "redis" else stores.postgres_round
                s = measure(service.port, service.pid, workload, number)
                _check_store(s.system, s.duplicates, workload, gateway_duplicates)
                row = {**dataclasses.asdict(s), "rate": s.rate, "cpu_process_s": s.cpu_server_s}
                rounds.append(row)
                done(_line(row))
            elif system == "http":
                for mode, workers, loads, auth in _http_runs(plan, number):
                    workloads = [
                        generate(
                            plan.requests,
                            plan.duplicates,
                            plan.seed,
                            tag=f"h{number}-{mode}-{workers}-{'a' if auth else ''}{i}-",
                        )  # fmt: skip
                        for i in range(len(loads))
                    ]
                    for h in web.run_round(number, loads, workloads, plan.http_seconds,
                                           broker, processes, workdir, plan.commit_interval,
                                           mode, plan.fetch_jobs, workers, auth):  # fmt: skip
                        row = {**dataclasses.asdict(h), "rate": h.rate, "requests": h.requests}
                        rounds.append(row)
                        done(_line(row) + f", statuses {h.statuses}, {h.errors} errors")
    _other_figures(plan, broker, processes, opts, rounds, figures, step, done)


def _paced_answers(
    plan: Plan,
    number: int,
    broker: Broker,
    processes: Processes,
    opts: Options,
    step: Callable[[str], None],
) -> dict[str, Any]:
    """The SDK answer row at a set pace (PACE), in the first answer mode: the answer rows'
    pace follows what the machine drains, this one's processor CPU per decision and answer
    latency compare from run to run and machine to machine."""
    mode = plan.answers[0]
    step(f"round {number}/{plan.rounds}: SDK answers, {mode}, {PACE:,.0f}/s")
    a = answers.sdk_round(
        mode, plan.processes[0], number, PACE, plan.latency_seconds, plan.duplicates,
        plan.seed, broker, processes, opts,
    )  # fmt: skip
    a = dataclasses.replace(a, system=paced_name(mode))
    return {**dataclasses.asdict(a), "rate": a.rate}


def paced_name(mode: str) -> str:
    """The paced SDK answer row's system. It does not end in the mode, so answer_ratios
    leaves it out: it runs in the first mode only."""
    return f"sdk answer {mode}, paced {PACE:,.0f}/s"


def _http_runs(plan: Plan, number: int) -> list[tuple[str, int, list[tuple[int, int]], bool]]:
    """(answer mode, serve workers, loads, auth) of each serve the HTTP system runs in round
    `number`. The first mode's loads run once per serve worker count, the others' once;
    with --http-auth, the first load once more with keys, before the others in even
    rounds so neither always runs first."""
    runs = [
        (mode, workers, _http_loads(plan, index), False)
        for index, mode in enumerate(plan.answers)
        for workers in (plan.http_workers if index == 0 else plan.http_workers[:1])
    ]
    if not plan.http_auth:
        return runs
    auth = (plan.answers[0], plan.http_workers[0], [(plan.http_concurrency[0], 1)], True)
    return [*runs, auth] if number % 2 else [auth, *runs]


def _http_loads(plan: Plan, mode_index: int) -> list[tuple[int, int]]:
    """(connections, jobs per call) of the HTTP loads in the answer mode at `mode_index`.

    The first mode runs every load; the others only what the modes are compared
    on: the first of --http-concurrency, and fetch.
    """
    enqueue = plan.http_concurrency if mode_index == 0 else plan.http_concurrency[:1]
    loads = [(c, 1) for c in enqueue]
    if mode_index == 0:
        loads += [(c, web.BATCH) for c in plan.http_batch_concurrency]
    if plan.fetch_jobs > 0:
        loads.append((web.FETCH_WORKERS, web.FETCH))
    return loads


def _first_gateway_rate(rounds: list[dict[str, Any]], number: int) -> float:
    """Decisions/s of this round's first gateway row (the first of --processes, 1 by default)."""
    rows = (r for r in rounds if r["round"] == number and r["system"].startswith("gateway"))
    return float(next(rows)["rate"])


def _other_figures(
    plan: Plan,
    broker: Broker,
    processes: Processes,
    opts: Options,
    rounds: list[dict[str, Any]],
    figures: dict[str, dict[str, Any]],
    step: Callable[[str], None],
    done: Callable[[str], None],
) -> None:
    from gateway.bench import figures as more

    gateway_rounds = [r for r in rounds if r["system"] == "gateway"]
    if gateway_rounds:
        rss = report.spread(r["peak_rss_bytes"] / 2**20 for r in gateway_rounds)
        figures["processor peak RSS (MiB)"] = {"value": rss, "text": report._fmt(rss)}
        startup = report.spread(r["startup_s"] for r in gateway_rounds)
        figures["processor start to ready, empty state (s)"] = {
            "value": startup, "text": report._fmt(startup, 1),
        }  # fmt: skip
        per = report.spread(r["records_per_request"] for r in gateway_rounds)
        figures["records written per decision (outputs + changelog)"] = {
            "value": per, "text": report._fmt(per, 2),
        }  # fmt: skip
    paced = [r for r in rounds if r["system"] == paced_name(plan.answers[0])]
    if paced:
        label = f"SDK answers {plan.answers[0]}, paced {PACE:,.0f}/s"
        cpu = report.spread(
            r["cpu_process_s"] / r["requests"] * 1e6
            if r["cpu_process_s"] is not None and r["requests"] else None
            for r in paced
        )  # fmt: skip
        figures[f"{label}: processor CPU µs per decision"] = {
            "value": cpu, "text": report._fmt(cpu),
        }  # fmt: skip
        p50, p99 = (report.spread(r["latency_ms"].get(q) for r in paced) for q in ("p50", "p99"))
        figures[f"{label}: answer p50 / p99 (ms)"] = {
            "value": {"p50": p50, "p99": p99}, "text": f"{report._fmt(p50)} / {report._fmt(p99)}",
        }  # fmt: skip
    for name, ratio in process_ratios(rounds).items():
        figures[name] = {"value": ratio, "text": report._fmt(ratio, 2)}
    ratios = {**passthrough_ratio(rounds), **answer_ratios(rounds), **web.auth_ratios(rounds)}
    for name, ratio in ratios.items():
        figures[name] = {"value": ratio, "text": report._fmt(ratio, 2)}
    if "fingerprint" in plan.figures:
        step("fingerprints per second on one core")
        rates = fingerprint_rates(seconds=1.0 if plan.quick else 3.0)
        for name, value in rates.items():
            figures[f"{name} per second, one core"] = {
                "value": value, "text": report._fmt(value),
            }  # fmt: skip
        done("fingerprints: " + ", ".join(f"{n} {report._fmt(v)}/s" for n, v in rates.items()))
    if "restore" in plan.figures and plan.restore_keys > 0:
        step(f"restore of {plan.restore_keys:,} keys from the changelog")
        r = more.restore(plan.restore_keys, 1 if plan.quick else plan.rounds, broker, processes,
                         opts, step)  # fmt: skip
        taken, line = r.figures()
        figures |= taken
        done(line)
    if "floor" in plan.figures:
        from gateway.bench import floor

        step("the loop's floor: the processor's loop, an empty decision")
        workload = generate(plan.requests, plan.duplicates, plan.seed, tag="floor-")
        rounds_of = 1 if plan.quick else plan.rounds
        measured = floor.measure(rounds_of, workload, broker, processes, opts)
        for f in measured:
            cpu = report.spread(f.cpu_us)
            figures[f"loop floor, {f.variant}: CPU µs per record"] = {
                "value": cpu, "text": report._fmt(cpu, 1),
            }  # fmt: skip
            figures[f"loop floor, {f.variant}: records/s"] = {
                "value": report.spread(f.rates), "text": report._fmt(report.spread(f.rates)),
            }  # fmt: skip
        done("loop floor: " + "; ".join(f"{f.variant}: {f.text()}" for f in measured))
    if "listing" in plan.figures:
        from gateway.bench import listing

        size = LISTING_QUICK if plan.quick else LISTING_JOBS
        step(f"the admin job list on a view of {size:,} jobs")
        listed = listing.measure(size, opts.workdir)
        for number, (median, low, high) in listed.pages_ms.items():
            name = (f"admin job list by queue and state, page {number:,} of 50 jobs "
                    f"({listed.matching:,} of {listed.jobs:,} jobs match) (ms)")  # fmt: skip
            figures[name] = {
                "value": {"median": median, "min": low, "max": high},
                "text": f"{median:.1f} [{low:.1f}–{high:.1f}]",
            }  # fmt: skip
        done("admin job list: " + "; ".join(
            f"page {n:,} {m:.1f} ms" for n, (m, _, _) in listed.pages_ms.items()
        ))  # fmt: skip
    if "audit" in plan.figures:
        from gateway.bench import audit

        size = plan.requests if plan.quick else AUDIT_REQUESTS
        step(f"replay and explain of {size:,} requests one processor decided")
        audited = audit.audit(size, 1 if plan.quick else plan.rounds, broker, processes, opts,
                              step)  # fmt: skip
        taken, line = audited.figures()
        figures |= taken
        done(line)
    if "cold-start" in plan.figures:
        colds = []
        for n in range(1 if plan.quick else plan.rounds):
            step(f"cold `gateway up` {n + 1}")
            colds.append(more.cold_start(processes, opts.workdir))
        first = report.spread(c.first_decision_s for c in colds)
        health = report.spread(c.health_s for c in colds)
        figures["cold `gateway up`: health OK to first answer (s)"] = {
            "value": first, "text": report._fmt(first, 2),
        }  # fmt: skip
        figures["cold `gateway up`: start to health OK (s)"] = {
            "value": health, "text": report._fmt(health, 1),
        }  # fmt: skip
        done(f"cold start: first answer {report._fmt(first, 2)} s after health OK")


def process_ratios(rounds: list[dict[str, Any]]) -> dict[str, dict[str, float] | None]:
    """Decisions/s, and CPU per decision, with N processes over those with one, round by
    round (they alternate)."""
    rates: dict[str, dict[int, float]] = {}
    cpu: dict[str, dict[int, float]] = {}
    for r in rounds:
        if r["system"].startswith("gateway"):
            rates.setdefault(r["system"], {})[r["round"]] = r["rate"]
            if r.get("cpu_process_s") is not None and r["requests"]:
                cpu.setdefault(r["system"], {})[r["round"]] = r["cpu_process_s"] / r["requests"]
    ratios = {}
    for what, values in (("decisions/s", rates), ("CPU per decision", cpu)):
        one = values.pop("gateway", {})
        for name, by_round in values.items():
            if one:
                ratios[f"{what}, {name.removeprefix('gateway×')} processes ÷ 1"] = report.spread(
                    value / one[number] for number, value in by_round.items() if number in one
                )
    return ratios


def passthrough_ratio(rounds: list[dict[str, Any]]) -> dict[str, dict[str, float] | None]:
    """Decisions/s of the gateway (one process) over the passthrough's, round by round."""
    gateway = {r["round"]: r["rate"] for r in rounds if r["system"] == "gateway"}
    through = {r["round"]: r["rate"] for r in rounds if r["system"] == "passthrough"}
    common = sorted(set(gateway) & set(through))
    if not common:
        return {}
    return {"decisions/s, gateway ÷ passthrough": report.spread(
        gateway[n] / through[n] for n in common
    )}  # fmt: skip


def answer_ratios(rounds: list[dict[str, Any]]) -> dict[str, dict[str, float] | None]:
    """The first answer mode over each other one, for the same load in the same round:
    latency p50 and p99 and, for HTTP, per second."""
    by_load: dict[tuple[str, str], dict[int, dict[str, Any]]] = {}
    for r in rounds:
        if r.get("answers") and r["system"].endswith(f" {r['answers']}"):
            load = r["system"].removesuffix(f" {r['answers']}")
            by_load.setdefault((load, r["answers"]), {})[r["round"]] = r
    modes = list(dict.fromkeys(mode for _, mode in by_load))
    ratios: dict[str, dict[str, float] | None] = {}
    for (load, mode), other in by_load.items():
        first = by_load.get((load, modes[0]), {})
        if mode == modes[0] or not first:
            continue
        pairs = [(first[n], other[n]) for n in sorted(other) if n in first]
        measures: list[tuple[str, Callable[[dict[str, Any]], float | None]]] = [
            ("p50", lambda r: r["latency_ms"].get("p50")),
            ("p99", lambda r: r["latency_ms"].get("p99")),
        ]
        if load.startswith("http"):
            measures.append(("per second", lambda r: r["rate"]))
        for what, value in measures:
            ratio = report.spread(
                a / b for a, b in ((value(x), value(y)) for x, y in pairs) if a and b
            )
            if ratio is not None:
                ratios[f"{load}: {what}, {modes[0]} ÷ {mode}"] = ratio
    return ratios


def _check_gateway(outcomes: dict[str, int], workload: Workload) -> None:
    expected = {"accepted": workload.distinct}
    duplicates = outcomes.get("rejected", 0) + outcomes.get("ignored", 0)
    other = {k: v for k, v in outcomes.items() if k not in ("accepted", "rejected", "ignored")}
    if outcomes.get("accepted", 0) != expected["accepted"] or duplicates != workload.duplicates \
            or other:  # fmt: skip
        raise BenchError(
            f"the gateway decided {outcomes}; the workload has {workload.distinct} new jobs "
            f"and {workload.duplicates} duplicates"
        )


def _check_passthrough(r: streams.StreamRound, row: dict[str, Any], per_input: float) -> None:
    expected = r.inputs * per_input
    if abs(r.records_written - expected) > max(2.0, expected * 0.01):
        raise BenchError(
            f"the passthrough wrote {r.records_written} records for {r.inputs} inputs, "
            f"not {per_input:.2f} per input"
        )


def _check_store(system: str, duplicates: int, workload: Workload, gateway: list[int]) -> None:
    if duplicates != workload.duplicates or any(g != duplicates for g in gateway):
        raise BenchError(
            f"{system} found {duplicates} duplicates; the workload has {workload.duplicates}"
            + (f" and the gateway found {gateway[-1]}" if gateway else "")
        )


def _line(row: dict[str, Any]) -> str:
    parts = [f"{row['system']} round {row['round']}: {row['rate']:,.0f}/s"]
    for label, key in (("system", "cpu_process_s"), ("serve", "cpu_serve_s"),
                       ("processor", "cpu_processor_s"), ("broker", "cpu_broker_s")):  # fmt: skip
        if row.get(key) is not None and row["requests"]:
            parts.append(f"{label} CPU {row[key] / row['requests'] * 1e6:,.0f} µs/req")
    if row.get("records_per_request"):
        parts.append(f"{row['records_per_request']:.2f} records/req")
    lat = row.get("latency_ms") or {}
    if lat:
        rate = f" at {row['latency_rate']:,.0f}/s" if row.get("latency_rate") else ""
        parts.append(f"p50/p95/p99 {lat['p50']:,.0f}/{lat['p95']:,.0f}/{lat['p99']:,.0f} ms{rate}")
    return ", ".join(parts)


@contextmanager
def _broker(plan: Plan, workdir: Path) -> Iterator[Broker]:
    if plan.bootstrap:
        yield Broker(plan.bootstrap, None, "external")
        return
    cluster = launcher.up(port=free_port_block(), directory=workdir / "cluster").cluster
    try:
        yield Broker(cluster.bootstrap, launcher.node_pid(cluster, 1), cluster.version)
    finally:
        launcher.down(cluster, purge=True)


@contextmanager
def _stopping_on_signals() -> Iterator[None]:
    """SIGTERM stops the run as Ctrl-C does, so every started process is stopped by pid."""

    def interrupt(*_: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _progress(console: Console) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"), BarColumn(),
        TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(), console=console,
    )  # fmt: skip


def _scratch() -> Path:
    path = gateway_home() / "bench"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _settings(plan: Plan) -> dict[str, Any]:
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(plan).items()}


def _machine() -> dict[str, Any]:
    from gateway.bench import procfs

    return procfs.machine()


def _versions() -> dict[str, Any]:
    import confluent_kafka

    from gateway import __version__

    return {
        "gateway": __version__, "gateway_commit": _commit(),
        "python": platform.python_version(),
        "confluent_kafka": confluent_kafka.version()[0],
        "librdkafka": confluent_kafka.libversion()[0],
    }  # fmt: skip


def _commit() -> str | None:
    here = Path(__file__).resolve().parent
    try:
        head = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "HEAD"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        dirty = subprocess.run(
            ["git", "-C", str(here), "status", "--porcelain"], capture_output=True, text=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("-dirty" if dirty else "")
