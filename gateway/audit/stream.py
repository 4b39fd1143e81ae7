"""Replay the committed log partition by partition, each in a process of its own, as it
streams from the brokers: memory is bounded by each partition's live state (on disk) and
the consumers' prefetch, never by the log's length.

Each part (one partition) reads `requests` beside the same partition of `decisions` (which holds
that partition's audit trail, in its order) and replays it (replay.py), accounting for
every record of that partition of decisions to its end (account.py); then the
partitions of `intake` whose decisions land there, through the router. The end of every
partition is taken once, before anything is read, decisions first: every audit record
read has its input below the end read, and what is appended meanwhile waits for the next
run. A window (`from_ms`, `to_ms`) starts each partition at the first record of its time
and stops after the last. When only some partitions are replayed, the other partitions of
decisions are read too, for records about those that were written elsewhere (`strays`).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import queue
import tempfile
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from gateway.audit.account import Span, Trail, strays
from gateway.audit.kafka import offset_at, partition_bounds, stream
from gateway.audit.log import LogRecord
from gateway.audit.replay import PartitionReplay, ReplayReport, intake_audits, replay_intake
from gateway.audit.trail_store import TrailStore
from gateway.audit.verify import Layout
from gateway.stage.audit_keys import AuditKeys
from gateway.stage.parsing import Limits

Bounds = tuple[int, int]  # a partition's first offset and end offset
PROGRESS_EVERY = 1_000  # records between a worker's progress reports
# How far a processor's clock (which stamps audit records) may run behind the brokers'
# (which stamp inputs) for a window to find every audit record of its inputs.
CLOCK_SKEW_MS = 5 * 60_000


@dataclass(frozen=True)
class Part:
    """One partition's replay: everything a worker process needs, and nothing live."""

    client: dict[str, str]
    topics: dict[str, str]  # role -> topic name
    partition: int
    partitions: int  # of requests
    requests: Bounds
    decisions: Bounds
    intake: dict[int, Bounds]  # the intake partitions whose decisions land here
    limits: Limits
    from_ms: int | None
    to_ms: int | None
    keep: int
    keys: AuditKeys | None = None
    # Not empty: the partition is not replayed, only read for records about these.
    strays_of: frozenset[int] = frozenset()

    @property
    def layout(self) -> Layout:
        return Layout(self.topics["requests"], self.topics["intake"], self.partitions)


def parts(
    client: dict[str, str], topics: dict[str, str], limits: Limits, partitions: Iterable[int],
    from_ms: int | None, to_ms: int | None, keep: int, keys: AuditKeys | None = None,
) -> list[Part]:  # fmt: skip
    """One part per partition of `requests` asked for, with the bounds it reads; and one
    for every other partition of decisions, read for strays of those."""
    decisions = partition_bounds(client, topics["decisions"])  # first: see the docstring
    requests = partition_bounds(client, topics["requests"])
    intake = partition_bounds(client, topics["intake"])
    wanted = frozenset(partitions) & frozenset(requests)
    return [
        Part(
            client,
            topics,
            p,
            len(requests),
            requests.get(p, (0, 0)),
            decisions.get(p, (0, 0)),
            {q: b for q, b in intake.items() if q % len(decisions) == p},
            limits,
            from_ms,
            to_ms,
            keep,
            keys,
            frozenset() if p in wanted else wanted,
        )  # fmt: skip
        for p in sorted(wanted | (frozenset(decisions) if wanted else frozenset()))
    ]


def records_in(part: Part) -> int:
    """How many input records the part may read (transaction markers included); the
    decisions read for strays count as such."""
    spans = [part.decisions] if part.strays_of else [part.requests, *part.intake.values()]
    return sum(high - low for low, high in spans)


def replay_log(
    work: list[Part], processes: int, progress: Callable[[int], None] | None = None
) -> ReplayReport:
    """Every part, `processes` at a time; the reports merged in partition order."""
    report = ReplayReport()
    if not work:
        return report
    context = multiprocessing.get_context("spawn")  # no fork of a process holding Kafka clients
    updates = context.Queue()
    done: dict[int, ReplayReport] = {}
    with ProcessPoolExecutor(
        max_workers=max(1, min(processes, len(work))), mp_context=context,
        initializer=_worker_init, initargs=(updates,),
    ) as pool:  # fmt: skip
        futures = {pool.submit(replay_part, part): part.partition for part in work}
        while len(done) < len(futures):
            try:
                count = updates.get(timeout=0.2)
                if progress is not None:
                    progress(count)
            except queue.Empty:
                pass
            for future in [f for f in futures if f.done() and futures[f] not in done]:
                done[futures[future]] = future.result()  # a worker's error is raised here
    _drain(updates, progress)
    for partition in sorted(done):
        report.merge(done[partition], work[0].keep)
    return report


def default_processes() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


_updates: multiprocessing.Queue[int] | None = None


def _worker_init(updates: multiprocessing.Queue[int]) -> None:
    global _updates
    _updates = updates


def _drain(updates: multiprocessing.Queue[int], progress: Callable[[int], None] | None) -> None:
    while True:
        try:
            count = updates.get_nowait()
        except queue.Empty:
            return
        if progress is not None:
            progress(count)


def replay_part(part: Part) -> ReplayReport:
    """Replay one partition (in a worker process): requests beside every record of its
    partition of decisions, then its intake partitions."""
    # The processor's warnings (re-routed requests, events not applied) are the log's
    # history here, not news.
    logging.getLogger("gateway.processor").setLevel(logging.ERROR)
    report = ReplayReport()
    decisions = part.partition, part.decisions
    if part.strays_of:
        records = _counted(read(part, "decisions", *decisions))
        strays(records, part.partition, part.layout, part.strays_of, report, part.keep)
        return report
    with tempfile.TemporaryDirectory(prefix="gateway-replay-") as root:
        store = TrailStore(Path(root) / "state")
        try:
            replay = PartitionReplay(part.partitions, part.limits, store, report, part.keep)
            trail = Trail(part.partition, part.layout, report, part.keep, part.keys)
            requests = read(part, "requests", part.partition, part.requests)
            replay.run(_counted(requests), trail, read(part, "decisions", *decisions),
                       span(part, "requests", part.partition, part.requests))  # fmt: skip
        finally:
            store.close()
    for partition, bounds in sorted(part.intake.items()):
        records = read(part, "intake", partition, bounds)
        audits = intake_audits(read(part, "decisions", *decisions), part.topics["intake"],
                               partition)  # fmt: skip
        replay_intake(_counted(records), audits, part.limits, report, part.keep,
                      span(part, "intake", partition, bounds))  # fmt: skip
    return report


def read(part: Part, role: str, partition: int, bounds: Bounds) -> Iterator[LogRecord]:
    """An input's records of the partition in the part's window, as they stream; for
    `decisions`, from a little before the window (an audit record is stamped by its
    writer's clock, after its input) and on to the end, so that every record after the
    window's inputs is accounted for too."""
    start = _start(part, role, partition, bounds)
    for record in stream(part.client, part.topics[role], partition, start, bounds[1]):
        if part.to_ms is not None and role != "decisions" and record.timestamp_ms > part.to_ms:
            return
        yield record


def span(part: Part, role: str, partition: int, bounds: Bounds) -> Span:
    """The offsets of an input partition `read` reads."""
    start = _start(part, role, partition, bounds)
    return Span(start, bounds[1], part.to_ms is not None, start > bounds[0])


def _start(part: Part, role: str, partition: int, bounds: Bounds) -> int:
    since = part.from_ms
    if since is not None and role == "decisions":
        since -= CLOCK_SKEW_MS
    return bounds[0] if since is None else max(bounds[0], _at(part, role, partition, since))


def _at(part: Part, role: str, partition: int, time_ms: int) -> int:
    return offset_at(part.client, part.topics[role], partition, time_ms)


def _counted(records: Iterator[LogRecord]) -> Iterator[LogRecord]:
    """The records, with progress reported to the parent every so many."""
    count = 0
    for record in records:
        yield record
        count += 1
        if count == PROGRESS_EVERY and _updates is not None:
            _updates.put(count)
            count = 0
    if count and _updates is not None:
        _updates.put(count)
