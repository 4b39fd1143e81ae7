"""Replay every request under another unique policy and report the decisions that flip.

What is decided again is what the unique policy decides: each request the processor
decided by `core.decide` is decided again, with its policy replaced by the given one (its
key recomputed by `core.fingerprint`), over a fresh in-memory state, at its record
timestamp and with its seed. What was decided before or beside the unique decision stays
as recorded, is never a flip, and is counted by why (`FlipReport.kept`): a request refused
invalid (unreadable or too large, refused by its headers, an idempotency key reused, over
its tenant's limits: whatever the code), one refused because its job id was taken (job
ids are unique whatever the policy), and a retry answered again under its idempotency key.
Requests sent on to be decided elsewhere (an idempotency key's or a job id's home, a
tenant's home, re-routed) are skipped, as their re-published copies are decided.

Job events follow the jobs they were about: an event for a job the log accepted is
applied to the job that the same request made in this replay, by the processor's own
rules (see jobs.py), and every record (ticks too) ends the attempts whose lease or timeout
its time passed. What the log decided about an event beside the unique policy stands too:
a claim sent to its rate key's home is applied when it comes back, as it was; one the home
refused moves its job as its on_limit says; a queue is paused as the log's commands paused
it on the partition the event was read from. Per-key concurrency and successors are the
policy's, and are decided again.

Job ids are reported as the log knows them: a job this replay made for a request that made
one in the log too is named by the log's id, so an unchanged decision names its recorded
job; a job the log never made keeps this replay's id. A decision whose outcome holds but
that names another job is reported apart (`FlipReport.other_jobs`).

A new policy can give two requests that lived on different partitions the
same key, so partitions (each in log order, each record beside the audit record written
for it: `paired`) are merged by record timestamp as they stream; the state kept is each
key's entries and the jobs' records, not the log.
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
    Outcome,
    Request,
    UniquePolicy,
    decide,
    fingerprint,
)
from gateway.core.lifecycle import follow
from gateway.core.tenants import scoped
from gateway.stage.kinds import Kind, kind_of
from gateway.stage.parsing import Limits, parse_event_record, parse_limited
from gateway.stage.rates import is_claim, limited_of

ANSWERED_AGAIN = "answered again under its idempotency key"
ID_TAKEN = "its job id was taken"
# Outcomes whose decision made a new job (an update changes the existing one).
_MADE = frozenset({str(Outcome.ACCEPTED), str(Outcome.REPLACED)})


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
    replayed: int = 0  # decided again under the policy
    skipped: int = 0  # sent on to be decided elsewhere: no decision at their offset
    # Decided before or beside the unique policy: kept as recorded, by why.
    kept: Counter[str] = field(default_factory=Counter)
    flips: list[Flip] = field(default_factory=list)
    # The outcome held, naming another job (the key held by another one in this replay).
    other_jobs: list[Flip] = field(default_factory=list)

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


Decided = tuple[LogRecord, Mapping[str, Any] | None]  # a record, and the audit record it left


def paired(records: Iterable[LogRecord], decisions: Iterable[LogRecord]) -> Iterator[Decided]:
    """One partition's requests records, each beside the audit record written for it (a
    decision, or the record of an event, a forward, a command...), from the same partition
    of `decisions` (its audit trail, in the same order)."""
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
                and source.get("topic") == record.topic
                and source.get("partition") == record.partition
                and isinstance(source.get("offset"), int)
            ):
                pending = (source["offset"], value)
        if pending is not None and pending[0] == record.offset:
            yield record, pending[1]
        else:
            yield record, None


class _Ids:
    """The log's job ids beside this replay's, for the jobs the same request made in both."""

    def __init__(self) -> None:
        self.replayed: dict[str, tuple[str, str]] = {}  # the log's id -> (this replay's, key)
        self.logged: dict[str, str] = {}  # this replay's id -> the log's

    def made(self, logged: str, replayed: str, key: str) -> None:
        self.replayed[logged] = (replayed, key)
        self.logged[replayed] = logged

    def shown(self, job_id: str | None) -> str | None:
        """A job of this replay by the log's id, if the log made it too."""
        return None if job_id is None else self.logged.get(job_id, job_id)


def replay_under_policy(
    partitions: Iterable[Iterable[Decided]], policy: UniquePolicy, limits: Limits
) -> FlipReport:
    """Each partition's records (with their audit records), merged by time, under `policy`."""
    state: dict[str, tuple[Entry, ...]] = {}
    ids = _Ids()
    book = JobBook()
    report = FlipReport()
    for record, was in heapq.merge(*partitions, key=lambda d: d[0].timestamp_ms):
        for expired in book.expire(record.timestamp_ms):
            _follow(state, book, expired, record.timestamp_ms, limits)
        kind = kind_of(record.source, record.value)
        if kind is Kind.COMMAND:
            if record.headers.get(wire.KIND_HEADER) == wire.QUEUE_COMMAND:
                book.command(record.partition, record.value or b"", record.timestamp_ms)
            continue  # a cron's firings are requests of their own, replayed as such
        if kind is Kind.EVENT:
            _apply(record, was, state, ids, book, limits)
        elif kind is Kind.REQUEST:
            _request(record, was, policy, state, ids, book, limits, report)
        # Ticks carry only time; id reports, rate and tenant records decide no request.
    return report


def _request(
    record: LogRecord, was: Mapping[str, Any] | None, policy: UniquePolicy,
    state: dict[str, tuple[Entry, ...]], ids: _Ids, book: JobBook, limits: Limits,
    report: FlipReport,
) -> None:  # fmt: skip
    if was is None or was.get("kind", "request") != "request":
        what = None if was is None else was.get("what")
        if isinstance(what, dict) and "answered_again" in what:
            report.kept[ANSWERED_AGAIN] += 1
        else:
            report.skipped += 1
        return
    parsed = parse_limited(record.value, limits, record.headers)
    why = _kept(was, parsed)
    if why is not None:
        report.kept[why] += 1
        return
    request = with_policy(parsed, policy) if isinstance(parsed, Request) else parsed
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
    logged = was.get("job_id")
    made = new_job is not None and decision.outcome is not Outcome.UPDATED
    if key and made and was.get("outcome") in _MADE and isinstance(logged, str):
        ids.made(logged, str(new_job), key)
    report.replayed += 1
    met = decision.existing.job_id if decision.existing is not None else None
    now = ids.shown(new_job or met)
    flip = Flip(
        str(was.get("request_id")), record.position, str(was.get("outcome")),
        str(decision.outcome), logged if isinstance(logged, str) else None, now,
    )  # fmt: skip
    if flip.replayed != flip.recorded:
        report.flips.append(flip)
    elif flip.replayed_job_id != flip.recorded_job_id:
        report.other_jobs.append(flip)


def _kept(was: Mapping[str, Any], request: Request | GatewayError) -> str | None:
    """Why a recorded decision stands whatever the unique policy; None: the policy's to
    decide. Every invalid decision was made before the unique one (a request the core
    cannot read is refused before any policy); a taken job id is refused by the id's
    rule, which holds under every policy."""
    if was.get("outcome") == str(Outcome.INVALID):
        error = was.get("error")
        return f"invalid: {error.get('code') if isinstance(error, dict) else None}"
    job_id = request.envelope.id if isinstance(request, Request) else None
    return ID_TAKEN if job_id is not None and was.get("existing_job_id") == job_id else None


def _apply(
    record: LogRecord,
    was: Mapping[str, Any] | None,
    state: dict[str, tuple[Entry, ...]],
    ids: _Ids,
    book: JobBook,
    limits: Limits,
) -> None:
    event = parse_event_record(record.value, record.key)
    if isinstance(event, GatewayError) or _sent_home(was):
        return
    if event.job_id in ids.replayed:
        job_id, key = ids.replayed[event.job_id]
        event = replace(event, job_id=job_id, unique_key=key)
    if event.unique_key is None:
        return None  # a job without a key holds none: nothing here to replay
    limited = limited_of(record.headers) if is_claim(event) else None
    if limited is not None:  # refused by its rate key's home: moved as its on_limit says
        moved = book.limited(event.job_id, limited, record.timestamp_ms)
        if moved is not None:
            _follow(state, book, moved, record.timestamp_ms, limits)
        return
    entries = state.get(event.unique_key, ())
    result, after = book.apply(
        event, entries, record.timestamp_ms, limits.retention_ms, record.partition
    )  # fmt: skip
    if result.outcome is EventOutcome.APPLIED and result.job is not None:
        state[event.unique_key] = book.released(after, record.timestamp_ms)


def _sent_home(was: Mapping[str, Any] | None) -> bool:
    """Whether the processor sent the event to its rate key's home instead of applying it
    (it is applied when it comes back with its permit)."""
    what = None if was is None else was.get("what")
    rate = what.get("rate") if isinstance(what, dict) else None
    return isinstance(rate, dict) and rate.get("sent_home") is True


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
