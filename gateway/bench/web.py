"""HTTP: `POST /ojs/v1/jobs` (and the batch endpoint) against `gateway serve`, load from wrk,
then `POST /ojs/v1/workers/fetch` claiming jobs from a queue.

A processor and one `gateway serve` (with `--workers` W) run on a fresh
namespace per round, worker count and answer mode (`gateway process
--answers`: early, before the commit, or after it). wrk (Debian package wrk)
sends the workload's jobs on loopback from C connections for S seconds. The
batch load sends 100 of the workload's jobs per call. The fetch load first
puts J jobs in a queue of their own (batch calls), then FETCH_WORKERS
workers, each on one keep-alive connection, fetch one job per call until the
queue is empty or S seconds are up; the latency is of the fetches that
claimed a job. CPU is read from /proc per load for the serve process and the
processor separately, each with its descendants (serve's workers among them).
With auth, serve reads a credentials file of one admin principal and every call
sends its key: the first load again, to set its CPU beside the same load without.
"""

from __future__ import annotations

import http.client
import os
import subprocess
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from gateway.auth import credentials, keys
from gateway.bench import procfs, report
from gateway.bench.services import TOOLS, Processes, free_port
from gateway.bench.streams import (
    BenchError,
    Broker,
    drop_namespace,
    fresh_namespace,
    percentiles,
    timing,
)
from gateway.bench.workload import Workload
from gateway.broker.ports import free_port_block
from gateway.children import python_module
from gateway.processor.supervisor import default_processes

BATCH = 100
ANSWERS = (200, 201, 409)
FETCH = 0  # jobs per call of the fetch load, in `loads`: one job per fetch
FETCH_QUEUE = "bench-fetch"
FETCH_WORKERS = 4
AUTH = "auth "  # in the name of a row whose calls send a key


@dataclass
class HttpRound:
    system: str  # "http c=64 early", "http batch c=16 w=2 early" or "http fetch committed"
    round: int
    answers: str  # the processor's --answers
    concurrency: int
    jobs_per_call: int  # 0 for fetch: a call claims one job or none
    calls: int
    seconds: float
    statuses: dict[str, int]
    errors: int  # socket errors and timeouts
    latency_ms: dict[str, float] = field(default_factory=dict)
    cpu_process_s: float | None = None  # serve + processor
    cpu_broker_s: float | None = None
    cpu_serve_s: float | None = None
    cpu_processor_s: float | None = None
    claimed: int = 0  # fetch: jobs claimed

    @property
    def requests(self) -> int:
        """Jobs enqueued (or, for fetch, claimed): one decision of the processor each."""
        return self.claimed if self.jobs_per_call == FETCH else self.calls * self.jobs_per_call

    @property
    def rate(self) -> float:
        return self.requests / self.seconds


def run_round(
    number: int,
    loads: list[tuple[int, int]],  # (concurrency, jobs per call; FETCH for the fetch load)
    workloads: list[Workload],
    seconds: float,
    broker: Broker,
    processes: Processes,
    workdir: Path,
    commit_interval: float,
    answers: str = "early",
    fetch_jobs: int = 0,
    workers: int = 1,
    auth: bool = False,
) -> list[HttpRound]:
    wrk = TOOLS["http"].path()
    namespace, rounddir, cat = fresh_namespace(
        "h", f"http-{number}-{answers}-w{workers}{'-auth' if auth else ''}", broker, workdir
    )
    key, credentials = _credentials(rounddir) if auth else (None, [])
    # Its status port, and one for each of its processes: serve's health asks it, so the
    # load starts once every process owns partitions (no rebalance in the window).
    status = free_port_block(default_processes(cat.by_role("requests").partitions,
                                               os.cpu_count()) + 1)  # fmt: skip
    processor = processes.start(
        [*python_module("gateway", "process"), "--bootstrap", broker.bootstrap,
         "--namespace", namespace, "--state-dir", str(rounddir / "state"),
         "--commit-interval", str(commit_interval), "--answers", answers,
         "--metrics-port", str(status), "--log-level", "WARNING"],
        rounddir / "processor.log",
    )  # fmt: skip
    port = free_port()
    serve = processes.start(
        [*python_module("gateway", "serve"), "--bootstrap", broker.bootstrap,
         "--namespace", namespace, "--port", str(port), "--log-level", "warning",
         "--processor-url", f"http://127.0.0.1:{status}", "--workers", str(workers),
         # Every load comes from loopback: one client address with up to 1,024 connections.
         "--max-client-connections", "0", *credentials],
        rounddir / "serve.log",
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, [processor, serve], rounddir)
        post(url, b'{"type":"bench.warmup","args":[]}', timeout=120, key=key)
        results = []
        for (concurrency, per_call), workload in zip(loads, workloads, strict=True):
            if per_call == FETCH:
                _fill_queue(url, fetch_jobs)
            cpu = _Cpu(serve.pid, processor.pid, broker.pid)
            # One serve worker keeps the names rows had before serve had workers.
            served = f"w={workers} " if workers > 1 else ""
            served += AUTH if auth else ""
            if per_call == FETCH:
                out = _fetch(url, concurrency, seconds)
                name = f"http fetch {served}{answers}"
            else:
                script = rounddir / f"load-{concurrency}-{per_call}.lua"
                script.write_text(_lua(workload, per_call, _threads(concurrency), key))
                out = _wrk(wrk, url, script, concurrency, seconds)
                batch = "batch " if per_call > 1 else ""
                name = f"http {batch}c={concurrency} {served}{answers}"
            serve_s, processor_s, broker_s = cpu.spent()
            results.append(HttpRound(
                name, number, answers, concurrency, per_call, out.calls, out.seconds,
                out.statuses, out.errors, out.latency_ms,
                None if serve_s is None or processor_s is None else serve_s + processor_s,
                broker_s, serve_s, processor_s, out.claimed,
            ))  # fmt: skip
        return results
    finally:
        processes.stop(serve)
        processes.stop(processor)
        drop_namespace(broker, namespace)


class _Cpu:
    """CPU seconds of serve and the processor (each with its descendants) and of the broker."""

    def __init__(self, serve: int, processor: int, broker: int | None) -> None:
        self.pids = (serve, processor, broker)
        self.before = self._read()

    def _read(self) -> list[float | None]:
        serve, processor, broker = self.pids
        return [procfs.cpu_seconds(serve), procfs.cpu_seconds(processor),
                procfs.cpu_seconds(broker, children=False)]  # fmt: skip

    def spent(self) -> tuple[float | None, ...]:
        return tuple(
            None if a is None or b is None else a - b
            for a, b in zip(self._read(), self.before, strict=True)
        )


def wait_healthy(url: str, procs: list, workdir: Path, timeout: float = 120) -> float:
    """Seconds until GET /ojs/v1/health answers 200."""
    started = time.monotonic()
    while True:
        try:
            with urllib.request.urlopen(f"{url}/ojs/v1/health", timeout=5) as answer:
                if answer.status == 200:
                    return time.monotonic() - started
        except (urllib.error.URLError, OSError):
            pass
        if any(p.poll() is not None for p in procs) or time.monotonic() - started > timeout:
            logs = "".join(f.read_text(errors="replace")[-1500:] for f in workdir.glob("*.log"))
            raise BenchError(f"{url} never became healthy:\n{logs}")
        time.sleep(0.1)


def post(
    url: str, body: bytes, timeout: float, path: str = "/ojs/v1/jobs", key: str | None = None
) -> int:
    headers = {"content-type": "application/json"}
    if key is not None:
        headers["authorization"] = f"Bearer {key}"
    request = urllib.request.Request(f"{url}{path}", data=body, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


@dataclass
class _LoadResult:
    calls: int
    seconds: float
    statuses: dict[str, int]
    errors: int
    latency_ms: dict[str, float]
    claimed: int = 0


def _fill_queue(url: str, jobs: int) -> None:
    """`jobs` jobs without a unique policy in the fetch queue, 100 per batch call."""
    for first in range(0, jobs, BATCH):
        batch = [
            {"type": "bench.fetch", "args": [n], "options": {"queue": FETCH_QUEUE}}
            for n in range(first, min(jobs, first + BATCH))
        ]
        body = orjson.dumps({"jobs": batch})
        status = post(url, body, timeout=120, path="/ojs/v1/jobs/batch")
        if status != 201:
            raise BenchError(f"filling the fetch queue: the batch call answered {status}")


def _fetch(url: str, workers: int, seconds: float) -> _LoadResult:
    """Workers fetch one job per call until the queue is empty or `seconds` are up."""
    host, port = url.removeprefix("http://").split(":")
    body = orjson.dumps({"queues": [FETCH_QUEUE], "count": 1})
    headers = {"content-type": "application/json"}
    lock = threading.Lock()
    latencies: list[float] = []
    statuses: dict[str, int] = {}
    tally = {"calls": 0, "errors": 0}

    def work() -> None:
        connection = http.client.HTTPConnection(host, int(port), timeout=30)
        try:
            while time.monotonic() < deadline:
                at = time.monotonic()
                try:
                    connection.request("POST", "/ojs/v1/workers/fetch", body, headers)
                    answer = connection.getresponse()
                    data = answer.read()
                except (OSError, http.client.HTTPException):
                    with lock:
                        tally["errors"] += 1
                    connection.close()
                    continue
                took = (time.monotonic() - at) * 1000
                claimed = answer.status == 200 and bool(orjson.loads(data).get("jobs"))
                with lock:
                    tally["calls"] += 1
                    statuses[str(answer.status)] = statuses.get(str(answer.status), 0) + 1
                    if claimed:
                        latencies.append(took)
                if answer.status == 200 and not claimed:
                    return  # the queue is empty
        finally:
            connection.close()

    threads = [threading.Thread(target=work, daemon=True) for _ in range(workers)]
    with timing():
        started = time.monotonic()
        deadline = started + seconds
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    elapsed = time.monotonic() - started
    return _LoadResult(
        tally["calls"], elapsed, statuses, tally["errors"], percentiles(latencies), len(latencies)
    )


def _wrk(wrk: str, url: str, script: Path, concurrency: int, seconds: float) -> _LoadResult:
    threads = _threads(concurrency)
    done = subprocess.run(
        [wrk, f"-t{threads}", f"-c{concurrency}", f"-d{max(1, round(seconds))}s",
         "--timeout", "30s", "-s", str(script), url],
        capture_output=True, text=True, timeout=seconds + 120,
    )  # fmt: skip
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
    if done.returncode != 0 or line is None:
        raise BenchError(f"wrk failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    _, calls, duration, errors, p50, p95, p99, statuses = line.split(" ", 7)
    counts = {}
    for part in statuses.split(","):
        if part:
            status, n = part.split(":")
            counts[status] = int(n)
    return _LoadResult(
        int(calls), float(duration), counts, int(errors),
        {"p50": float(p50), "p95": float(p95), "p99": float(p99)},
    )  # fmt: skip


def _threads(concurrency: int) -> int:
    return min(2, concurrency)


def _credentials(rounddir: Path) -> tuple[str, list[str]]:
    """A key, and serve's arguments for a credentials file whose one admin holds it."""
    key, path = keys.new_key(), rounddir / "credentials.toml"
    admin = credentials.principal("bench", "admin", None, ["*"])
    credentials.save(path, credentials.with_key((), "bench", key, time.time_ns() // 10**6, admin))
    return key, ["--credentials", str(path)]


def auth_ratios(rounds: list[dict[str, Any]]) -> dict[str, dict[str, float] | None]:
    """Serve's CPU per enqueue, and calls per second, of each load run with auth over the
    same load without, round by round (the two alternate)."""
    by_name = {(r["system"], r["round"]): r for r in rounds if r["system"].startswith("http")}
    pairs: dict[str, list[tuple[dict[str, Any], dict[str, Any]]]] = {}
    for (name, number), on in by_name.items():
        off = by_name.get((name.replace(AUTH, ""), number))
        if AUTH in name and off is not None:
            pairs.setdefault(name.replace(AUTH, ""), []).append((on, off))
    ratios: dict[str, dict[str, float] | None] = {}
    for load, both in pairs.items():
        ratios[f"{load}: serve CPU per enqueue, auth on ÷ off"] = report.spread(
            _serve_cpu(on) / _serve_cpu(off) for on, off in both
            if _serve_cpu(on) and _serve_cpu(off)
        )  # fmt: skip
        ratios[f"{load}: per second, auth on ÷ off"] = report.spread(
            on["rate"] / off["rate"] for on, off in both if off["rate"]
        )
    return ratios


def _serve_cpu(row: dict[str, Any]) -> float:
    return (row["cpu_serve_s"] or 0.0) / row["requests"] if row["requests"] else 0.0


def _lua(workload: Workload, per_call: int, threads: int, key: str | None = None) -> str:
    """wrk script: thread t of T sends bodies t, t+T, t+2T, … of the workload, in order."""
    if per_call == 1:
        bodies = [item.value.decode() for item in workload.items]
        path = "/ojs/v1/jobs"
    else:
        items = workload.items
        bodies = [
            '{"jobs":[' + ",".join(i.value.decode() for i in items[n : n + per_call]) + "]}"
            for n in range(0, len(items) - per_call + 1, per_call)
        ]
        path = "/ojs/v1/jobs/batch"
    table = ",\n".join(f"[==[{body}]==]" for body in bodies)
    auth = "" if key is None else f', ["Authorization"] = "Bearer {key}"'
    return _WRK_SCRIPT % {"bodies": table, "path": path, "threads": threads, "auth": auth}


_WRK_SCRIPT = """
local bodies = {
%(bodies)s
}
local threads = {}
function setup(thread)
  table.insert(threads, thread)
  thread:set("tid", #threads)
end
local next_body, statuses = nil, {}
function init(args)
  next_body = tid
end
function request()
  local body = bodies[((next_body - 1) %% #bodies) + 1]
  next_body = next_body + %(threads)d
  return wrk.format("POST", "%(path)s", {["Content-Type"] = "application/json"%(auth)s}, body)
end
function response(status)
  statuses[status] = (statuses[status] or 0) + 1
  wrk.thread:set("s" .. status, statuses[status])
end
function done(summary, latency)
  local counts = {}
  for _, thread in ipairs(threads) do
    for _, status in ipairs({200, 201, 400, 401, 409, 413, 500, 502, 503, 504}) do
      local n = thread:get("s" .. status)
      if n then counts[status] = (counts[status] or 0) + n end
    end
  end
  local parts = {}
  for status, n in pairs(counts) do table.insert(parts, status .. ":" .. n) end
  local e = summary.errors
  io.write(string.format("RESULT %%d %%f %%d %%f %%f %%f %%s\\n", summary.requests,
    summary.duration / 1e6, e.connect + e.read + e.write + e.timeout,
    latency:percentile(50) / 1e3, latency:percentile(95) / 1e3, latency:percentile(99) / 1e3,
    table.concat(parts, ",")))
end
"""
