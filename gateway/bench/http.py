"""Benchmark: HTTP enqueues per second through one `gateway serve` process.

    python -m gateway.bench.http [--bootstrap B] [--requests N] [--concurrency C]

Starts a local Kafka broker unless --bootstrap is given, applies the topics in a
namespace of its own, runs `gateway process` and `gateway serve` in
subprocesses, then POSTs N jobs (30% duplicating an earlier one) from C
concurrent connections. Each answer comes after its decision is committed, so
this measures the whole path: HTTP, SDK, Kafka, processor, reply.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from gateway import admin, catalogue
from gateway.bench.processor import DUPLICATE_SHARE, _free_port, _start_processor
from gateway.broker import launcher


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", help="use this cluster instead of a local broker")
    parser.add_argument("--requests", type=int, default=5_000)
    parser.add_argument("--concurrency", type=int, default=64)
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="gateway-bench-http-"))
    cluster = None
    children: list[subprocess.Popen[bytes]] = []
    try:
        bootstrap = args.bootstrap
        if not bootstrap:
            cluster = launcher.up(port=_free_port(), directory=workdir / "cluster").cluster
            bootstrap = cluster.bootstrap
        namespace = f"bench{uuid.uuid4().hex[:6]}"
        admin.apply(catalogue.load(namespace=namespace), {"bootstrap.servers": bootstrap})
        children.append(_start_processor(bootstrap, namespace, workdir))
        url, server = _start_server(bootstrap, namespace, workdir)
        children.append(server)
        statuses, latencies, seconds = asyncio.run(_run(url, args.requests, args.concurrency))
        q = statistics.quantiles(latencies, n=100)
        print(
            f"http: {args.requests} POST /ojs/v1/jobs ({DUPLICATE_SHARE:.0%} duplicates, "
            f"{args.concurrency} concurrent) in {seconds:.2f}s = "
            f"{args.requests / seconds:,.0f} enqueues/s from one serve process; "
            f"p50 {q[49]:.0f} ms, p99 {q[98]:.0f} ms; statuses {dict(sorted(statuses.items()))}"
        )
    finally:
        for child in reversed(children):
            child.terminate()
            child.wait(timeout=60)
        if cluster is not None:
            launcher.down(cluster, purge=True)
        shutil.rmtree(workdir, ignore_errors=True)


def _start_server(
    bootstrap: str, namespace: str, workdir: Path
) -> tuple[str, subprocess.Popen[bytes]]:
    port = _free_port()
    log = open(workdir / "serve.log", "wb")  # noqa: SIM115 - lives as long as the process
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", "serve", "--bootstrap", bootstrap,
         "--namespace", namespace, "--port", str(port), "--log-level", "warning"],
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
