"""Benchmark: HTTP enqueues per second through one `gateway serve` process.

    python -m gateway.bench.http [--bootstrap B] [--requests N] [--concurrency C]
                                 [--seconds S]

Starts a local Kafka broker unless --bootstrap is given, applies the topics in a
namespace of its own, runs `gateway process` and `gateway serve` in
subprocesses, then POSTs jobs (30% duplicating an earlier one) from C
concurrent connections. Each answer comes after its decision is committed, so
this measures the whole path: HTTP, SDK, Kafka, processor, reply.

The load comes from `wrk` (Debian package wrk) for S seconds when it is
installed: a Python client on the same two cores saturates long before the
server does. Without wrk, N requests are sent with httpx, and the figure is
then a floor set by that client.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from gateway.bench.environment import (
    DUPLICATE_SHARE,
    Environment,
    environment,
    free_port,
    start_processor,
    stop,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", help="use this cluster instead of a local broker")
    parser.add_argument("--requests", type=int, default=5_000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--seconds", type=int, default=20, help="load time with wrk")
    args = parser.parse_args()

    with environment(args.bootstrap) as env:
        children = [start_processor(env)]
        try:
            url, server = _start_server(env)
            children.append(server)
            if shutil.which("wrk"):
                print(_run_wrk(url, args.seconds, args.concurrency, env.workdir))
                return
            statuses, latencies, seconds = asyncio.run(_run(url, args.requests, args.concurrency))
            q = statistics.quantiles(latencies, n=100)
            print(
                f"http (httpx client, a floor): {args.requests} POST /ojs/v1/jobs "
                f"({DUPLICATE_SHARE:.0%} duplicates, {args.concurrency} concurrent) in "
                f"{seconds:.2f}s = {args.requests / seconds:,.0f} enqueues/s from one serve "
                f"process; p50 {q[49]:.0f} ms, p99 {q[98]:.0f} ms; "
                f"statuses {dict(sorted(statuses.items()))}"
            )
        finally:
            for child in reversed(children):
                stop(child)


def _start_server(env: Environment) -> tuple[str, subprocess.Popen[bytes]]:
    port = free_port()
    workdir = env.workdir
    log = open(workdir / "serve.log", "wb")  # noqa: SIM115 - lives as long as the process
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", "serve", "--bootstrap", env.bootstrap,
         "--namespace", env.namespace, "--port", str(port), "--log-level", "warning"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while True:  # healthy once the processor has joined its group
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit((workdir / "serve.log").read_text()[-3000:])
        try:
            if httpx.get(f"{url}/ojs/v1/health", timeout=5).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    # The processor takes its partitions a few seconds after joining.
    httpx.post(f"{url}/ojs/v1/jobs", json={"type": "warm.up", "args": []}, timeout=90)
    return url, proc


_WRK_SCRIPT = """
local threads = {}
function setup(thread)
  table.insert(threads, thread)
  thread:set("tid", #threads)
end
local sent, statuses = 0, {}
function request()
  local n
  if sent > 0 and math.random() < %(duplicates)s then
    n = math.random(sent)
  else
    sent = sent + 1
    n = sent
  end
  local body = string.format(
    '{"type":"bench.job","args":{"user_id":"%(run)s-%%s-%%d"},"unique":{"keys":["type","args"]}}',
    tid, n)
  return wrk.format("POST", "/ojs/v1/jobs", {["Content-Type"] = "application/json"}, body)
end
function response(status)
  statuses[status] = (statuses[status] or 0) + 1
  wrk.thread:set("s" .. status, statuses[status])
end
function done(summary, latency)
  local counts = {}
  for _, thread in ipairs(threads) do
    for _, status in ipairs({200, 201, 409, 400, 500, 503, 504}) do
      local n = thread:get("s" .. status)
      if n then counts[status] = (counts[status] or 0) + n end
    end
  end
  local parts = {}
  for status, n in pairs(counts) do table.insert(parts, status .. ": " .. n) end
  table.sort(parts)
  io.write(string.format("RESULT %%d %%f %%f %%f %%s\\n", summary.requests,
    summary.duration / 1e6, latency:percentile(50) / 1e3, latency:percentile(99) / 1e3,
    table.concat(parts, ", ")))
end
"""


def _run_wrk(url: str, seconds: int, concurrency: int, workdir: Path) -> str:
    script = workdir / "post.lua"
    script.write_text(_WRK_SCRIPT % {"duplicates": DUPLICATE_SHARE, "run": uuid.uuid4().hex[:8]})
    out = subprocess.run(
        ["wrk", "-t2", f"-c{concurrency}", f"-d{seconds}s", "-s", str(script), url],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    line = next(x for x in out.splitlines() if x.startswith("RESULT "))
    _, requests, duration, p50, p99, counts = line.split(" ", 5)
    return (
        f"http (wrk): {requests} POST /ojs/v1/jobs ({DUPLICATE_SHARE:.0%} duplicates, "
        f"{concurrency} connections) in {float(duration):.1f}s = "
        f"{int(requests) / float(duration):,.0f} enqueues/s from one serve process; "
        f"p50 {float(p50):.0f} ms, p99 {float(p99):.0f} ms; statuses {{{counts}}}"
    )


async def _run(url: str, total: int, concurrency: int) -> tuple[Counter[int], list[float], float]:
    rng = random.Random(7)
    jobs: list[dict[str, Any]] = []
    for _ in range(total):
        if jobs and rng.random() < DUPLICATE_SHARE:
            jobs.append(rng.choice(jobs))
        else:
            jobs.append({
                "type": "bench.job", "args": {"user_id": uuid.uuid4().hex},
                "unique": {"keys": ["type", "args"]},
            })  # fmt: skip
    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    for job in jobs:
        queue.put_nowait(job)
    statuses: Counter[int] = Counter()
    latencies: list[float] = []
    limits = httpx.Limits(max_connections=concurrency)

    async def worker(http: httpx.AsyncClient) -> None:
        while not queue.empty():
            job = queue.get_nowait()
            sent = time.monotonic()
            response = await http.post("/ojs/v1/jobs", json=job)
            latencies.append((time.monotonic() - sent) * 1000)
            statuses[response.status_code] += 1

    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as http:
        started = time.monotonic()
        await asyncio.gather(*(worker(http) for _ in range(concurrency)))
        return statuses, latencies, time.monotonic() - started


if __name__ == "__main__":
    main()
