"""HTTP: `POST /ojs/v1/jobs` (and the batch endpoint) against `gateway serve`, load from wrk.

A processor and one `gateway serve` run on a fresh namespace per round. wrk
(Debian package wrk) sends the workload's jobs on loopback from C
connections for S seconds; every answer comes after its decision is
committed. The batch load sends 100 of the workload's jobs per call.
"""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from gateway import admin, catalogue
from gateway.bench import procfs
from gateway.bench.services import Processes, ensure_installed, free_port
from gateway.bench.streams import BenchError, Broker
from gateway.bench.workload import Workload

BATCH = 100
ANSWERS = (200, 201, 409)


@dataclass
class HttpRound:
    system: str  # "http c=64" or "http batch c=16"
    round: int
    concurrency: int
    jobs_per_call: int
    calls: int
    seconds: float
    statuses: dict[str, int]
    errors: int  # wrk's socket errors and timeouts
    latency_ms: dict[str, float] = field(default_factory=dict)
    cpu_process_s: float | None = None
    cpu_broker_s: float | None = None

    @property
    def requests(self) -> int:
        return self.calls * self.jobs_per_call

    @property
    def rate(self) -> float:
        return self.requests / self.seconds


def run_round(
    number: int,
    loads: list[tuple[int, int]],  # (concurrency, jobs per call)
    workloads: list[Workload],
    seconds: float,
    broker: Broker,
    processes: Processes,
    workdir: Path,
    commit_interval: float,
    answers: str = "early",
) -> list[HttpRound]:
    wrk = ensure_installed("wrk", "wrk")
    namespace = f"h{uuid.uuid4().hex[:8]}"
    rounddir = workdir / f"http-{number}-{namespace}"
    rounddir.mkdir(parents=True)
    admin.apply(catalogue.load(namespace=namespace), {"bootstrap.servers": broker.bootstrap})
    processor = processes.start(
        [sys.executable, "-m", "gateway", "process", "--bootstrap", broker.bootstrap,
         "--namespace", namespace, "--state-dir", str(rounddir / "state"),
         "--commit-interval", str(commit_interval), "--answers", answers,
         "--log-level", "WARNING"],
        rounddir / "processor.log",
    )  # fmt: skip
    port = free_port()
    serve = processes.start(
        [sys.executable, "-m", "gateway", "serve", "--bootstrap", broker.bootstrap,
         "--namespace", namespace, "--port", str(port), "--log-level", "warning"],
        rounddir / "serve.log",
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, [processor, serve], rounddir)
        post(url, b'{"type":"bench.warmup","args":[]}', timeout=120)
        results = []
        for (concurrency, per_call), workload in zip(loads, workloads, strict=True):
            script = rounddir / f"load-{concurrency}-{per_call}.lua"
            script.write_text(_lua(workload, per_call, _threads(concurrency)))
            pids = [processor.pid, serve.pid]
            cpu_before = [procfs.cpu_seconds(p) for p in pids]
            broker_before = procfs.cpu_seconds(broker.pid, children=False)
            out = _wrk(wrk, url, script, concurrency, seconds)
            cpu_process = sum(
                (procfs.cpu_seconds(p) or 0.0) - (b or 0.0)
                for p, b in zip(pids, cpu_before, strict=True)
            )
            broker_after = procfs.cpu_seconds(broker.pid, children=False)
            name = f"http batch c={concurrency}" if per_call > 1 else f"http c={concurrency}"
            results.append(HttpRound(
                name, number, concurrency, per_call, out.calls, out.seconds, out.statuses,
                out.errors, out.latency_ms, cpu_process,
                None if broker_after is None or broker_before is None
                else broker_after - broker_before,
            ))  # fmt: skip
        return results
    finally:
        processes.stop(serve)
        processes.stop(processor)


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


def post(url: str, body: bytes, timeout: float) -> int:
    request = urllib.request.Request(
        f"{url}/ojs/v1/jobs", data=body, headers={"content-type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


@dataclass
class _WrkResult:
    calls: int
    seconds: float
    statuses: dict[str, int]
    errors: int
    latency_ms: dict[str, float]


def _wrk(wrk: str, url: str, script: Path, concurrency: int, seconds: float) -> _WrkResult:
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
    return _WrkResult(
        int(calls), float(duration), counts, int(errors),
        {"p50": float(p50), "p95": float(p95), "p99": float(p99)},
    )  # fmt: skip


def _threads(concurrency: int) -> int:
    return min(2, concurrency)


def _lua(workload: Workload, per_call: int, threads: int) -> str:
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
    return _WRK_SCRIPT % {"bodies": table, "path": path, "threads": threads}


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
  return wrk.format("POST", "%(path)s", {["Content-Type"] = "application/json"}, body)
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
