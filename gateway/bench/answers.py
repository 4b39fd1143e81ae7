"""The answer a caller of the SDK sees: `Client.enqueue(job, wait=True)`, early or committed.

Per answer mode, a processor (`gateway process --processes N --answers M`)
runs on a fresh namespace; once it is ready, one `gateway.Client` sends new
jobs (and repeats, in the workload's share) paced at a given rate, each
asking for its reply. The first WARM_UP_S seconds at that rate are not
timed: the namespace's topics are new, and the first transactions touching
their partitions, and the broker's first writes to them, take 50-400 ms (a
deployment sees that once, not per job). The latency of each timed job is
from just before the SDK is handed the job (it validates and fingerprints
it, then produces it) to the moment the SDK has its answer: when `enqueue`
would return. Every answer is checked: new jobs accepted, repeats rejected
or ignored. The processor's CPU (its process tree, from /proc) over the
paced window is divided by the jobs answered.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.bench import procfs
from gateway.bench.services import Processes
from gateway.bench.streams import (
    BenchError,
    Broker,
    Gateway,
    Options,
    _fail,
    drop_namespace,
    fresh_namespace,
    percentiles,
    timing,
)
from gateway.bench.workload import Workload, generate
from gateway.sdk import Client, EnqueueResult

ANSWER_TIMEOUT_S = 120.0
WARM_UP_S = 1.0
DUPLICATES = ("rejected", "ignored")


@dataclass
class AnswerRound:
    system: str  # "sdk answer early"
    round: int
    answers: str  # the processor's --answers
    requests: int  # jobs answered in the paced window
    seconds: float  # the paced window: first send to last answer
    latency_rate: float  # the pace asked for
    latency_ms: dict[str, float] = field(default_factory=dict)
    cpu_process_s: float | None = None
    outcomes: dict[str, int] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.requests / self.seconds


def sdk_round(
    mode: str,
    count: int,
    number: int,
    rate: float,
    seconds: float,
    duplicates: float,
    seed: int,
    broker: Broker,
    processes: Processes,
    opts: Options,
) -> AnswerRound:
    namespace, workdir, cat = fresh_namespace("a", f"sdk-{mode}-{number}", broker, opts.workdir)
    workload = generate(max(10, int(rate * seconds)), duplicates, seed, tag=f"sdk{number}{mode}-")
    jobs = _jobs(workload)
    warm_up = _jobs(generate(int(rate * WARM_UP_S), duplicates, seed, tag=f"warm{number}{mode}-"))
    gateway = Gateway(count)
    proc = gateway.start(processes, broker, cat, workdir, _with_answers(opts, mode))
    client = Client(broker.bootstrap, namespace)
    try:
        gateway.wait_ready(proc, workdir)
        # The first call readies the client (topic checks, reply positions): not timed.
        client.enqueue({"type": "bench.warmup", "args": [namespace]}, wait=True, timeout=60)
        _paced(client, warm_up, rate, proc, workdir)
        cpu_before = procfs.cpu_seconds(proc.pid)
        started = time.monotonic()
        latencies, answers = _paced(client, jobs, rate, proc, workdir)
        elapsed = time.monotonic() - started
        cpu = procfs.cpu_seconds(proc.pid)
    finally:
        client.close()
        processes.stop(proc)
        drop_namespace(broker, namespace)
    outcomes = Counter(a.outcome.value for a in answers)
    new = workload.distinct
    repeats = sum(outcomes[d] for d in DUPLICATES)
    if outcomes.get("accepted", 0) != new or repeats != len(jobs) - new:
        raise BenchError(
            f"the SDK was answered {dict(outcomes)}; the paced jobs hold {new} new jobs "
            f"and {len(jobs) - new} repeats"
        )
    return AnswerRound(
        f"sdk answer {mode}", number, mode, len(jobs), elapsed, rate, percentiles(latencies),
        None if cpu is None or cpu_before is None else cpu - cpu_before, dict(outcomes),
    )  # fmt: skip


def _jobs(workload: Workload) -> list[Any]:
    return [orjson.loads(item.value) for item in workload.items]


def _with_answers(opts: Options, mode: str) -> Options:
    return Options(opts.commit_interval, opts.latency_seconds, opts.workdir, mode)


def _paced(
    client: Client, jobs: list[Any], rate: float, proc: Any, workdir: Any
) -> tuple[list[float], list[EnqueueResult]]:
    """Hand each job to the SDK at `rate`; each one's seconds from send to answer, in ms.

    The SDK's own machinery, as `enqueue(wait=True)` uses it: the ticket is
    filled by the SDK's I/O thread the moment the reply is read, which is
    when `enqueue` returns; timing it there needs no thread per call.
    """
    latencies: list[float] = []
    lock = threading.Lock()
    tickets = []

    def answered(sent: float) -> Callable[[], None]:
        def record() -> None:
            at = time.monotonic()
            with lock:
                latencies.append((at - sent) * 1000)

        return record

    with timing():
        started = time.monotonic()
        deadline = started + len(jobs) / rate + ANSWER_TIMEOUT_S
        sent = 0
        while sent < len(jobs):
            due = min(len(jobs), int((time.monotonic() - started) * rate) + 1)
            for job in jobs[sent:due]:
                at = time.monotonic()
                ticket = client._submit([job], True, deadline)
                ticket.add_done_callback(answered(at))
                tickets.append(ticket)
            sent = due
            time.sleep(min(0.002, 1 / rate))
        for ticket in tickets:
            if not ticket.wait(deadline - time.monotonic()):
                _fail(f"{sum(t.missing == 0 for t in tickets)} of {len(jobs)} SDK answers "
                      "arrived", proc, workdir)  # fmt: skip
    answers = [ticket.values()[0] for ticket in tickets]
    failed = [a for a in answers if not isinstance(a, EnqueueResult)]
    if failed:
        raise BenchError(f"{len(failed)} SDK calls failed, the first: {failed[0]!r}")
    return latencies, answers
