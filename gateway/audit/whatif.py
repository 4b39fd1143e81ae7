"""Replay every request under another unique policy and report the decisions that flip.

Each request of the log is decided again by `core.decide`, with its policy
replaced by the given one (its key recomputed by `core.fingerprint`), over a
fresh in-memory state, at its record timestamp and with its seed. Job events
follow the jobs they were about: an event for a job the log accepted is
applied to the job that the same request produced in this replay, by the
processor's own rules (see jobs.py), and every record (ticks too) ends the
attempts whose lease or timeout its time passed.

A new policy can give two requests that lived on different partitions the
same key, so partitions (each in log order, each request beside the decision
recorded for it: `paired`) are merged by record timestamp as they stream; the
state kept is each key's entries and the jobs' records, not the log.
Requests decided invalid at intake are not replayed: they are invalid
whatever the stored policy. Requests the processor
re-routed are skipped, as their re-published copies are decided.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from gateway import wire
from gateway.audit.findings import Position
from gateway.audit.jobs import JobBook
from gateway.audit.log import LogRecord
from gateway.core import (
    Entry,
    EventOutcome,
    EventResult,
    GatewayError,
    Request,
    UniquePolicy,
    decide,
    fingerprint,
)
from gateway.core.lifecycle import follow
from gateway.core.tenants import scoped
from gateway.stage.kinds import Kind, kind_of
from gateway.stage.parsing import Limits, parse_event_record, parse_limited


@dataclass(frozen=True, slots=True)
class Flip:
    request_id: str
    source: Position
    recorded: str
    replayed: str
    recorded_job_id: str | None
    replayed_job_id: str | None


@dataclass
class FlipReport:
    replayed: int = 0
    skipped: int = 0  # re-routed: no decision at their requests offset
    flips: list[Flip] = field(default_factory=list)

    @property
    def transitions(self) -> Counter[tuple[str, str]]:
        return Counter((f.recorded, f.replayed) for f in self.flips)


def with_policy(request: Request, policy: UniquePolicy) -> Request | GatewayError:
    """The request as if it had been an OJS job carrying `policy`, whatever its dialect."""
    env = request.envelope
    key = fingerprint(policy, env.type, env.queue, env.args, env.meta, "--policy")
    if isinstance(key, GatewayError):
        return key
    return Request(env, policy, key)


Decided = tuple[LogRecord, Mapping[str, Any] | None]  # a record, and its recorded decision


def paired(records: Iterable[LogRecord], decisions: Iterable[LogRecord]) -> Iterator[Decided]:
    """One partition's requests records, each beside the decision recorded for it, from the
    same partition of `decisions` (its audit trail, in the same order)."""
    trail = iter(decisions)
    pending: tuple[int, Mapping[str, Any]] | None = None
    for record in records:
        while pending is None or pending[0] < record.offset:
            found = next(trail, None)
            if found is None:
                break
            value = orjson.loads(found.value or b"{}")
            source = value.get("source") if isinstance(value, dict) else None
            if (
                isinstance(source, dict)
                and value.get("kind", "request") == "request"
                and source.get("topic") == record.topic
                and source.get("partition") == record.partition
                and isinstance(source.get("offset"), int)
            ):
                pending = (source["offset"], value)
        if pending is not None and pending[0] == record.offset:
            yield record, pending[1]
        else:
            yield record, None


def replay_under_policy(
    partitions: Iterable[Iterable[Decided]], policy: UniquePolicy, limits: Limits
) -> FlipReport:
    """Each partition's records (with their decisions), merged by time, under `policy`."""
    state: dict[str, tuple[Entry, ...]] = {}
    # The log's job id -> (this replay's job id, its key), for events to follow.
    jobs: dict[str, tuple[str, str]] = {}
    book = JobBook()
    report = FlipReport()
    for record, was in heapq.merge(*partitions, key=lambda d: d[0].timestamp_ms):
        for expired in book.expire(record.timestamp_ms):
            _follow(state, book, expired, record.timestamp_ms, limits)
        kind = kind_of(record.source, record.value)
        if kind in (Kind.TICK, Kind.ID_REPORT, Kind.TENANT):
            continue
        if kind is Kind.COMMAND:
            if record.headers.get(wire.KIND_HEADER) == wire.QUEUE_COMMAND:
                book.command(record.partition, record.value or b"", record.timestamp_ms)
            continue  # a cron's firings are requests of their own, replayed as such
        if kind is Kind.EVENT:
            _apply(record, state, jobs, book, limits)
            continue
        if was is None:
            report.skipped += 1
            continue
        if wire.TENANT_REFUSED_HEADER in record.headers:
            report.replayed += 1  # over its tenant's limits, whatever the policy: as it was
            continue
        request = parse_limited(record.value, limits)
        if isinstance(request, Request):
            request = with_policy(request, policy)
            if isinstance(request, Request) and wire.TENANT_SCOPED_HEADER in record.headers:
                request = scoped(request)  # a tenant's key, under the policy asked about
        key = request.unique_key if isinstance(request, Request) else None
        decision = decide(
            state.get(key, ()) if key else (), request, record.timestamp_ms,
            limits.retention_ms, seed=record.source.seed,
        )  # fmt: skip
        if key:
            state[key] = decision.entries
        if decision.job is not None:
            book.accepted(decision.job)
        new_job = None if decision.job is None else str(decision.job["id"])
        if key and new_job and isinstance(was.get("job_id"), str):
            jobs[was["job_id"]] = (new_job, key)
        report.replayed += 1
        if str(decision.outcome) != was.get("outcome"):
            existing = decision.existing.job_id if decision.existing else None
            report.flips.append(
                Flip(
                    str(was.get("request_id")), record.position, str(was.get("outcome")),
                    str(decision.outcome), was.get("job_id"), new_job or existing,
                )
            )  # fmt: skip
    return report


def _apply(
    record: LogRecord,
    state: dict[str, tuple[Entry, ...]],
    jobs: Mapping[str, tuple[str, str]],
    book: JobBook,
    limits: Limits,
) -> None:
    event = parse_event_record(record.value, record.key)
    if isinstance(event, GatewayError):
        return
    if event.job_id in jobs:
        job_id, key = jobs[event.job_id]
        event = replace(event, job_id=job_id, unique_key=key)
    if event.unique_key is None:
        return None  # a job without a key holds none: nothing here to replay
    entries = state.get(event.unique_key, ())
    result, after = book.apply(
        event, entries, record.timestamp_ms, limits.retention_ms, record.partition
    )  # fmt: skip
    if result.outcome is EventOutcome.APPLIED and result.job is not None:
        state[event.unique_key] = book.released(after, record.timestamp_ms)


def _follow(
    state: dict[str, tuple[Entry, ...]],
    book: JobBook,
    result: EventResult,
    now_ms: int,
    limits: Limits,
) -> None:
    """The moved job's key's entries follow it, as the processor's do."""
    job = result.job
    if result.outcome is not EventOutcome.APPLIED or job is None:
        return
    key = job.get("unique_key")
    if isinstance(key, str):
        moved = follow(state.get(key, ()), job, result, now_ms, limits.retention_ms)
        state[key] = book.released(moved, now_ms)
