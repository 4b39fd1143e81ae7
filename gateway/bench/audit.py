"""The audit figures: replay and explain of a log one processor decided, beside the rate
at which that processor drained it.

- The workload's requests (30% duplicates) are preloaded on `requests`; one processor is
  started and drains them: decisions per second from ready to the last decision, and the
  mean bytes of a decision record on `decisions`, and of a duplicate's (rejected, ignored).
- Then, round by round, `gateway replay` of the whole log as a user runs it (one process
  per core): wall time, decisions per second, and the peak of the resident memory of its
  processes together (sampled every 0.1 s). Every decision must replay identical.
- Then `gateway explain` of one key, with an index of its own: the first run (which reads
  `decisions` once to build the index) and a second (which reads the key's records only).
- Then a `gateway serve` of the namespace, once its own index has read the log: a first
  `gateway explain --url` asking it, and its history route's answer time.
"""

from __future__ import annotations

import re
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from gateway.bench import procfs, report
from gateway.bench.services import Processes, free_port
from gateway.bench.streams import (
    BenchError,
    Broker,
    Gateway,
    Options,
    _Io,
    drop_namespace,
    fresh_namespace,
)
from gateway.bench.workload import generate
from gateway.children import python_module

_DUPLICATE = ("rejected", "ignored")
_IDENTICAL = re.compile(rb"decided (\d+) again: (\d+) verified identical \(100\.0%\), 0 different")


@dataclass
class Audit:
    requests: int
    drained_per_s: float
    replay_s: list[float]
    replay_rss: list[int]
    explain_first: tuple[float, int]
    explain_indexed: list[tuple[float, int]]
    explain_asked: list[tuple[float, int]]  # first explains asking a serve's index, each
    history_s: list[float]  # the serve's history route, each answer
    record_bytes: tuple[float, float]  # mean bytes of a decision record, of a duplicate's

    def figures(self) -> tuple[dict[str, dict[str, Any]], str]:
        n = f"{self.requests:,} requests"
        replay = report.spread(self.requests / s for s in self.replay_s)
        rss = report.spread(b / 2**20 for b in self.replay_rss)
        indexed = report.spread(s for s, _ in self.explain_indexed)
        indexed_rss = report.spread(b / 2**20 for _, b in self.explain_indexed)
        ratio = report.spread(self.requests / s / self.drained_per_s for s in self.replay_s)
        drained = report.spread([self.drained_per_s])
        first = report.spread([self.explain_first[0]])
        asked = report.spread(s for s, _ in self.explain_asked)
        asked_rss = report.spread(b / 2**20 for _, b in self.explain_asked)
        route = report.spread(s * 1000 for s in self.history_s)
        every, duplicate = (report.spread([b]) for b in self.record_bytes)
        figures = {
            f"processor drained, {n} (decisions/s)": {
                "value": drained, "text": report._fmt(drained),
            },
            f"replay, {n} (decisions/s)": {"value": replay, "text": report._fmt(replay)},
            f"replay ÷ processor drained, {n}": {"value": ratio, "text": report._fmt(ratio, 2)},
            f"replay peak RSS, its processes together, {n} (MiB)": {
                "value": rss, "text": report._fmt(rss),
            },
            f"explain one key, index built, {n} (s)": {
                "value": indexed, "text": report._fmt(indexed, 2),
            },
            f"explain one key, index built, {n}: peak RSS (MiB)": {
                "value": indexed_rss, "text": report._fmt(indexed_rss),
            },
            f"explain one key, first run building the index, {n} (s)": {
                "value": first, "text": report._fmt(first, 2),
            },
            f"explain one key, first run asking a serve's index, {n} (s)": {
                "value": asked, "text": report._fmt(asked, 2),
            },
            f"explain one key, first run asking a serve's index, {n}: peak RSS (MiB)": {
                "value": asked_rss, "text": report._fmt(asked_rss),
            },
            f"history route, one key, {n} (ms)": {"value": route, "text": report._fmt(route, 1)},
            f"decision record on decisions, mean, {n} (bytes)": {
                "value": every, "text": report._fmt(every),
            },
            f"a duplicate's decision record on decisions, mean, {n} (bytes)": {
                "value": duplicate, "text": report._fmt(duplicate),
            },
        }  # fmt: skip
        line = (
            f"audit: {n} drained at {report._fmt(drained)}/s; replayed at "
            f"{report._fmt(replay)}/s ({report._fmt(ratio, 2)} of that) in "
            f"{report._fmt(rss)} MiB; explain {report._fmt(indexed, 2)} s indexed, "
            f"{report._fmt(first, 2)} s building the index, {report._fmt(asked, 2)} s asking "
            f"a serve; history route {report._fmt(route, 1)} ms; decision records "
            f"{report._fmt(every)} bytes, a duplicate's {report._fmt(duplicate)}"
        )
        return figures, line


def audit(
    requests: int,
    rounds: int,
    broker: Broker,
    processes: Processes,
    opts: Options,
    show: Callable[[str], None] = lambda _: None,
) -> Audit:
    """Decide `requests` with one processor, then replay and explain the log `rounds` times."""
    namespace, workdir, cat = fresh_namespace("a", "audit", broker, opts.workdir)
    workload = generate(requests, 0.3, seed=13, tag="audit-")
    io = _Io(broker.bootstrap, cat)
    where = ["--bootstrap", broker.bootstrap, "--namespace", namespace]
    try:
        io.send(workload.items)
        system = Gateway()
        proc = system.start(processes, broker, cat, workdir, opts)
        try:
            system.wait_ready(proc, workdir)
            started = time.monotonic()
            values = io.await_decisions(requests, proc, workdir, timeout=max(600.0, requests / 100))
            drained = requests / (time.monotonic() - started)
        finally:
            processes.stop(proc)
        replay_s: list[float] = []
        replay_rss: list[int] = []
        for number in range(1, rounds + 1):
            show(f"audit: replay {number}/{rounds} of {requests:,} requests")
            took, rss, out = _measured(["replay", *where], workdir / "replay.log")
            found = _IDENTICAL.search(out)
            if found is None or int(found[2]) < requests:
                raise BenchError(f"replay did not verify every decision:\n{out[-2000:]!r}")
            replay_s.append(took)
            replay_rss.append(rss)
        key = workload.items[len(workload.items) // 2].key
        explain = ["explain", key, "--index", str(workdir / "audit-index"), *where]
        show("audit: explain, building its index")
        first = _measured(explain, workdir / "explain.log")[:2]
        indexed = [_measured(explain, workdir / "explain.log")[:2] for _ in range(rounds)]
        show("audit: explain, asking a serve's index")
        asked, route = _asked(key, where, rounds, processes, workdir)
    finally:
        io.close()
        drop_namespace(broker, namespace)
    return Audit(
        requests, drained, replay_s, replay_rss, first, indexed, asked, route, record_bytes(values)
    )


def _asked(
    key: str, where: list[str], rounds: int, processes: Processes, workdir: Path
) -> tuple[list[tuple[float, int]], list[float]]:
    """A serve of the log, once its index has read it all: `rounds` explains asking it, each
    a first one (the CLI keeps no index of its own: wall time, peak RSS), and 50 answers of
    its history route (seconds each)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    serve = processes.start(
        [*python_module("gateway", "serve"), *where, "--port", str(port),
         "--view-dir", str(workdir / "view"), "--log-level", "warning"],
        workdir / "serve.log",
    )  # fmt: skip
    try:
        # Not its health, which asks for a processor: the log is decided, none runs.
        history = f"{url}/ojs/v1/admin/unique-jobs/{key}/history"
        deadline = time.monotonic() + 1200
        while not _complete(history):
            if time.monotonic() > deadline or serve.poll() is not None:
                raise BenchError(f"the serve's audit index never read the log ({workdir})")
            time.sleep(1)
        ask = ["explain", key, "--url", url, *where]
        asked = [_measured(ask, workdir / "explain.log")[:2] for _ in range(rounds)]
        answers = []
        for _ in range(50):
            started = time.monotonic()
            _complete(history)
            answers.append(time.monotonic() - started)
        return asked, answers
    finally:
        processes.stop(serve)


def _complete(history: str) -> bool:
    """Whether the history route answers the key with an index that has read everything."""
    try:
        with urllib.request.urlopen(history, timeout=30) as answer:
            return bool(orjson.loads(answer.read())["index"]["complete"])
    except (urllib.error.URLError, OSError, ValueError, KeyError):
        return False


def record_bytes(values: Sequence[bytes]) -> tuple[float, float]:
    """The mean bytes of the decision records, and of those of duplicates among them."""
    duplicates = [len(v) for v in values if orjson.loads(v).get("outcome") in _DUPLICATE]
    mean = sum(map(len, values)) / max(len(values), 1)
    return mean, sum(duplicates) / max(len(duplicates), 1)


def _measured(arguments: Sequence[str], log: Path) -> tuple[float, int, bytes]:
    """Run a `gateway` command: its wall time, the peak of its processes' resident memory
    together, and its output."""
    started, peak = time.monotonic(), 0
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            python_module("gateway", *arguments), stdout=out, stderr=subprocess.STDOUT
        )
        while proc.poll() is None:
            peak = max(peak, procfs.tree_rss_bytes(proc.pid))
            time.sleep(0.1)
    took = time.monotonic() - started
    output = log.read_bytes()
    if proc.returncode != 0:
        raise BenchError(f"gateway {arguments[0]} exited {proc.returncode}:\n{output[-2000:]!r}")
    return took, peak, output
