"""One key's history, a page at a time: where the index says its records are, those
records as read, and each one told (explain.py).

Shared by `gateway explain` and `GET /ojs/v1/admin/unique-jobs/{key}/history`.
A key is a unique key or a job id; a job id also brings its unique key's
records (every record of a job that has one is on that key's route), so a
job's history is its key's. Reading is the caller's (`Read`): this module
only says which positions, in log order, and what to say of each, and what refutes it
(verify.py: its seal, its partition, its place in the chain as the index found it).
"""

from __future__ import annotations

import heapq
import re
import unicodedata
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Any

import orjson

from gateway.audit.explain import Explained, explain_record
from gateway.audit.index import MAX_ROUTE_BYTES, AuditIndex, DecisionAt
from gateway.audit.moves import state_rows, what_of
from gateway.audit.verify import PLAIN, Verdict, Verifier
from gateway.core.decision_records import job_shown

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
_CURSOR = re.compile(r"(0|[1-9][0-9]{0,9}):(0|[1-9][0-9]{0,18})")
_UNIQUE_KEY = re.compile(r"[0-9a-f]{64}")
_MAX_PARTITION = 2**31 - 1
_MAX_OFFSET = 2**63 - 1
# The records at some positions, and each partition's first offset (follow.read_at).
Read = Callable[[Sequence[DecisionAt]], tuple[Mapping[DecisionAt, bytes | None], Mapping[int, int]]]


def key_problem(key: str) -> str | None:
    """Why `key` cannot name a route (for a 400 or a usage error), or None."""
    if not key:
        return "is empty: give a unique key or a job id"
    if len(key.encode(errors="surrogatepass")) > MAX_ROUTE_BYTES:
        return f"is longer than {MAX_ROUTE_BYTES} bytes: no unique key or job id is"
    if any(unicodedata.category(c) in ("Cc", "Cs") for c in key):
        return "holds a control character: no unique key or job id does"
    if "\ufffd" in key:  # what bytes that are no UTF-8 become in a decoded path
        return "is not UTF-8 text: no unique key or job id is"
    return None


def parse_cursor(text: str) -> DecisionAt | str:
    """The position a cursor names, or what is wrong with it."""
    match = _CURSOR.fullmatch(text)
    if match is None:
        return "is not partition:offset, as a page's next_cursor gives"
    partition, offset = int(match[1]), int(match[2])
    if partition > _MAX_PARTITION or offset > _MAX_OFFSET:
        return f"names partition {partition}, offset {offset}: beyond Kafka's"
    return (partition, offset)


def format_cursor(position: DecisionAt) -> str:
    return f"{position[0]}:{position[1]}"


def routes_of(index: AuditIndex, key: str) -> tuple[str | None, list[str]] | None:
    """(the unique key, the routes whose records make `key`'s history); None if no
    record names it. A key given in capitals (a hex key copied so) is found too."""
    for asked in dict.fromkeys((key, key.lower())):
        unique_key = index.unique_key(asked)
        if unique_key is not None and unique_key != asked:
            return unique_key, [unique_key, asked]
        if next(index.positions(asked), None) is not None:
            # A route of its own: a unique key, or a job without one (named by no key).
            return (None if _job_route(asked) else asked), [asked]
    return None


def _job_route(route: str) -> bool:
    """A route that is no unique key (64 hex digits): a job's own id."""
    return _UNIQUE_KEY.fullmatch(route) is None


def positions(index: AuditIndex, routes: Sequence[str], start: DecisionAt) -> Iterator[DecisionAt]:
    """The positions of every route's records from `start` on, in log order, each once."""
    last = None
    for position in heapq.merge(*(index.positions(r, start) for r in routes)):
        if position != last:
            yield position
        last = position


@dataclass(frozen=True)
class Item:
    position: DecisionAt
    record: dict[str, Any] | None  # None: the log no longer holds it
    told: Explained | None
    log_start: int  # the partition's first offset when read
    verdict: Verdict = Verdict()


@dataclass(frozen=True)
class Page:
    key: str
    unique_key: str | None
    items: list[Item]
    next: DecisionAt | None  # where the next page starts; None: this is the last


def page(
    index: AuditIndex, key: str, start: DecisionAt, limit: int, read: Read,
    verifier: Verifier = PLAIN,
) -> Page | None:  # fmt: skip
    """Up to `limit` records of `key`'s history from `start`, each checked by `verifier`;
    None if none names it."""
    found = routes_of(index, key)
    if found is None:
        return None
    unique_key, routes = found
    chosen = list(islice(positions(index, routes, start), limit + 1))
    wanted, after = chosen[:limit], chosen[limit] if len(chosen) > limit else None
    values, starts = read(wanted) if wanted else ({}, {})
    items = []
    for position in wanted:
        raw = values.get(position)
        record = _record(raw)
        if record is None or raw is None:
            items.append(Item(position, None, None, starts.get(position[0], 0)))
            continue
        verdict = verifier.check(position, raw, record, index.marks(position),
                                 index.chain(position[0]))  # fmt: skip
        items.append(Item(position, record, explain_record(record), starts.get(position[0], 0),
                          verdict))  # fmt: skip
    return Page(key, unique_key, items, after)


def count(index: AuditIndex, key: str) -> int:
    """How many records make `key`'s history (0 when none names it)."""
    found = routes_of(index, key)
    return 0 if found is None else sum(1 for _ in positions(index, found[1], (0, 0)))


def jobs_named(page: Page) -> list[Mapping[str, Any]]:
    """The jobs the page's records carry (each with its queue): a request's job (the new
    one, or the one that held the key), an event's job as it left it, each job as a
    record read it."""
    found: list[Mapping[str, Any]] = []
    for item in page.items:
        record = item.record or {}
        jobs = [job_shown(record), what_of(record).get("job")]
        state = record.get("state")
        if isinstance(state, Mapping):
            jobs += [row[2] for row in state_rows(state) if str(row[1]).startswith("job/")]
        found += [
            job for job in jobs
            if isinstance(job, Mapping) and isinstance(job.get("queue"), str)
        ]  # fmt: skip
    return found


def _record(value: bytes | None) -> dict[str, Any] | None:
    try:
        record = orjson.loads(value) if value is not None else None
    except orjson.JSONDecodeError:
        return None
    return record if isinstance(record, dict) else None


def gone(item: Item, topic: str) -> str:
    """What to say of a record the index points to and the log no longer holds."""
    partition, offset = item.position
    if offset < item.log_start:
        return (
            f"the audit record at {topic}[{partition}]@{offset} is gone: the topic's "
            f"retention deleted it (the partition now starts at offset {item.log_start})"
        )
    return f"the audit record at {topic}[{partition}]@{offset} is not readable"


def trail_json(verdict: Verdict) -> dict[str, Any]:
    """What the trail shows of a record: `refuted` when anything refutes it, `unchecked`
    when what could refute it could not be checked, else `consistent`: nothing that is
    cheap to check refutes it (a replay checks it against its input)."""
    state = "refuted" if verdict.refuted else "unchecked" if verdict.unchecked else "consistent"
    return {"verdict": state, "refuted": list(verdict.refuted),
            "unchecked": list(verdict.unchecked)}  # fmt: skip


def as_json(item: Item, topic: str) -> dict[str, Any]:
    """An item as the history route answers it."""
    partition, offset = item.position
    out: dict[str, Any] = {
        "position": {"topic": topic, "partition": partition, "offset": offset},
        "source": None, "at": None, "kind": None, "record": item.record,
    }  # fmt: skip
    if item.told is None or item.record is None:
        return {**out, "reason": gone(item, topic), "trail": None}
    told = item.told
    out.update(source=item.record.get("source"), at=told.at, kind=told.kind, head=told.head,
               by=told.by, trail=trail_json(item.verdict))  # fmt: skip
    if told.kind == "request":
        out["outcome"] = told.summary.get("outcome")
        out["job"] = job_shown(item.record)
    else:
        out["what"] = told.summary
    return {**out, "reason": "\n".join(told.reason)}
