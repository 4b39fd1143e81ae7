"""The audit trail: every record that reads or changes a route's state leaves an audit
record that carries what it was decided from, so any window of the log can be checked
without what came before it (docs/audit.md, "Records that verify themselves").

A request's audit record is its decision record; any other record that touched state (a
job event, a tick that expired or tombstoned jobs, a command, a cron firing, an id claim
or report) gets one of its own. A duplicate's names the job it met (`job_ref`,
core/decision_records.py) instead of carrying it beside its state, which carries it as
read. Either way the record gains:

    state   routes: every route the record read or wrote (sorted);
            before: [route, name, value, expiry] of every value it read before writing
                    it, as it found it: the state it was decided from. The value is the
                    stored JSON itself, null when absent, {"b64": ...} when not JSON, or
                    {"digest", "bytes"} past the record's room (then that value cannot
                    seed a replay, which says so);
            jobs:   [job id, state before, state after] of every job record it wrote;
            due:    [schedule, route, item] of what its time made due, in the order it
                    took them: a replay whose window starts after they were scheduled
                    takes them too;
            after:  a digest of everything it wrote (value and expiry), in order;
            truncated: only on a record too large to carry the rest (its lists are then
                    empty): how many of each it had.
    by      only on a record that names who asked for it (wire.ACTOR_HEADER, core/actor.py):
            {principal, role, source, request_id}, as many as it names, re-encoded;
    prev    the digest of the partition's previous audit record (null: the first);
    sealed_by  only when the deployment seals with a key (audit_keys.py): the id of the key
            its digest is keyed with;
    digest  blake2b-128 of the record's bytes up to `,"digest"` (keyed, with `sealed_by`):
            with `prev`, a chain in which a missing, reordered or altered record shows.

The state the handling touched is what the guard staged (total.py). The partition's
schedules and the chain's own head are indexes, not state: rebuilt, not carried. Every
part is a function of the log, so a successor writes the same bytes after a crash.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from datetime import timedelta
from hashlib import blake2b
from typing import Any

import orjson

from gateway import wire
from gateway.core import INVALID_REQUEST, GatewayError
from gateway.core.actor import parse
from gateway.core.limits import MAX_RECORD_BYTES
from gateway.core.times import format_rfc3339
from gateway.stage.context import Staged
from gateway.stage.kinds import Kind
from gateway.stage.records import Output, Source
from gateway.stage.schedule import CRONS, LEASES, TOMBSTONES

# The chain's head: the digest of the partition's last audit record.
CHAIN_KEY = b"\x00audit"
HEAD = "head"
UNTRACED = frozenset({LEASES.key, TOMBSTONES.key, CRONS.key, CHAIN_KEY})
JOB = "job/"  # + job id: a job record in its route's state, by the name records show
DIGEST_FIELD = b',"digest":"'
SEALED_BY = "sealed_by"
# Kinds whose records leave an audit record when they only read: what they read explains
# their answer.
ANSWERED = frozenset({"event", "command", "rate", "tenant"})
# The record's own fields besides the state: what carried values must leave room for.
_SLACK = 64 * 1024


def digest(data: bytes) -> str:
    return blake2b(data, digest_size=16).hexdigest()


class Sealer:
    """How records are sealed: an unkeyed digest (`key` empty), or one keyed with the
    deployment's audit key, which the record names by its id before the digest. Only the
    holder of the key can seal a record that verifies, whoever can write to the topic."""

    def __init__(self, key: bytes = b"", key_id: str | None = None) -> None:
        self.key = key
        self.key_id = key_id
        self.mark = (
            b"" if key_id is None else b',"%b":%b' % (SEALED_BY.encode(), orjson.dumps(key_id))
        )

    def digest(self, body: bytes) -> str:
        # Unkeyed, exactly as before keys: the same call, the same bytes.
        if not self.key:
            return blake2b(body, digest_size=16).hexdigest()
        return blake2b(body, digest_size=16, key=self.key).hexdigest()

    def __repr__(self) -> str:  # never the key
        return f"Sealer(key_id={self.key_id!r})"


UNKEYED = Sealer()


def text(route: bytes) -> Any:
    """A route as JSON: its text, or {"b64": ...} for bytes that are not UTF-8."""
    try:
        return route.decode()
    except UnicodeDecodeError:
        return {"b64": base64.b64encode(route).decode()}


def carried(value: bytes | None, room: int) -> tuple[Any, int]:
    """A value as an audit record carries it, and the room left after it."""
    if value is None:
        return None, room
    if len(value) > room:
        return {"digest": digest(value), "bytes": len(value)}, room
    if value[:1] in (b"{", b"["):  # the store's JSON (every value the processor writes)
        return orjson.Fragment(value), room - len(value)
    return {"b64": base64.b64encode(value).decode()}, room - len(value) * 4 // 3 - 4


def _job_state(value: bytes) -> str | None:
    state = orjson.loads(value).get("state")
    return state if isinstance(state, str) else None


def _ms(ttl: timedelta) -> int:
    """A ttl in whole milliseconds, as the store counts it (without timedelta's slow //)."""
    return ttl.days * 86_400_000 + ttl.seconds * 1_000 + ttl.microseconds // 1_000


def state_section(
    staged: Mapping[bytes, Staged],
    due: Sequence[tuple[bytes, str, str]],
    jobs_after: Mapping[str, str | None],
    now_ms: int,
    room: int,
) -> dict[str, Any]:
    """What the record read before writing, what it did to jobs, and a digest of its writes.
    `jobs_after`: the state of each job record it wrote (None: deleted), as the processor
    knows it, so that no record is parsed again here."""
    routes: list[Any] = []
    before: list[list[Any]] = []
    jobs: list[list[Any]] = []
    written: list[bytes] = []
    for route in sorted(staged):
        state = staged[route]
        reads, writes = state.reads, state.writes
        if not (reads or writes) or route in UNTRACED:
            continue
        shown = text(route)
        routes.append(shown)
        for name in sorted(reads) if len(reads) > 1 else reads:
            value, stamp = reads[name]
            if value is None:
                before.append([shown, name, None, stamp])
            else:
                shown_value, room = carried(value, room)
                before.append([shown, name, shown_value, stamp])
        for name in sorted(writes) if len(writes) > 1 else writes:
            written_value, ttl = writes[name]
            cell = route + b"\xff" + name.encode()
            if isinstance(written_value, bytes):
                stamp = -1 if ttl is None else now_ms + _ms(ttl)
                written.append(b"%b\x00%d:%b" % (cell, stamp, written_value))
            else:  # DELETED
                written.append(cell + b"\x00-")
            if name.startswith(JOB):
                job_id = name[4:]
                was = reads[name][0] if name in reads else None
                jobs.append([job_id, None if was is None else _job_state(was),
                             jobs_after.get(job_id)])  # fmt: skip
    return {
        "routes": routes,
        "before": before,
        "jobs": jobs,
        "due": [[text(schedule), route, item] for schedule, route, item in due] if due else [],
        "after": digest(b"".join(written)),
    }


def seal(
    outputs: list[Output],
    staged: Mapping[bytes, Staged],
    head: Staged,
    source: Source,
    key: bytes | None,
    kind: Kind,
    what: Mapping[str, Any] | None,
    due: Sequence[tuple[bytes, str, str]],
    jobs_after: Mapping[str, str | None],
    sealer: Sealer = UNKEYED,
    references: bool = True,
) -> None:
    """Complete the record's audit record (its decision record, or a new one when it
    touched state) with its state and its place in the chain, and move the head on.
    A duplicate's names the job it met, which its state carries, instead of carrying it
    again (Output.referenced), unless `references` is False: as records were written
    before (a replay of one writes it as it was)."""
    audit = None
    for output in outputs:
        if output.role == "decisions":
            audit = output
            break
    decided = b""
    if audit is not None:
        decided = b',"kind":"request"'
    else:
        # A request that left no decision was sent on to be decided elsewhere.
        named = "forwarded" if kind is Kind.REQUEST else str(kind)
        wrote = any(k not in UNTRACED and s.writes for k, s in staged.items())
        read = any(k not in UNTRACED and s.reads for k, s in staged.items())
        if not (wrote or (read and named in ANSWERED)):
            return  # changed nothing: a tick with nothing due, a re-route, a stale entry
        record = {
            "kind": named,
            "source": source.as_dict(),
            "at": format_rfc3339(source.timestamp_ms),
            "key": None if key is None else text(key),
            "what": what,
        }
        audit = Output(orjson.dumps(record), key or source.seed, role="decisions",
                       partition=source.partition)  # fmt: skip
        outputs.append(audit)
    body = audit.value or b"{}"
    referenced = audit.referenced if references else None
    carried = False
    if referenced is not None:
        section, carried = _section(referenced[0], staged, due, jobs_after, source,
                                    referenced[1:])  # fmt: skip
        if carried:
            body = referenced[0]
    if not carried:  # nothing to name, or the job it met is not carried: as before
        section, _ = _section(body, staged, due, jobs_after, source)
    prev = head.get_bytes(HEAD)
    body = b"%b%b%b,\"state\":%b,\"prev\":%b%b}" % (
        body[:-1], decided, by_field(source), section,
        b"null" if prev is None else b'"%b"' % prev, sealer.mark,
    )  # fmt: skip
    sealed = sealer.digest(body).encode()
    audit.value = b'%b%b%b"}' % (body[:-1], DIGEST_FIELD, sealed)
    head.set_bytes(HEAD, sealed)


def _section(
    body: bytes, staged: Mapping[bytes, Staged], due: Sequence[tuple[bytes, str, str]],
    jobs_after: Mapping[str, str | None], source: Source, carrying: tuple[str, str] | None = None,
) -> tuple[bytes, bool]:  # fmt: skip
    """The state section of a record whose own fields are `body`, and whether it carries
    the value `carrying` (route, name) names as JSON (True without one)."""
    room = MAX_RECORD_BYTES - len(body) - _SLACK
    state = state_section(staged, due, jobs_after, source.timestamp_ms, room)
    section = orjson.dumps(state)
    if len(body) + len(section) > MAX_RECORD_BYTES - _SLACK:
        # A record that touched very many routes (a tick that tombstones thousands of jobs):
        # its audit record must still fit, so it says how much it touched and what it wrote,
        # and a replay starts afresh after it (replay.py).
        return orjson.dumps({
            "routes": [], "before": [], "jobs": [], "due": [],
            "truncated": {name: len(state[name]) for name in ("routes", "before", "jobs", "due")},
            "after": state["after"],
        }), carrying is None  # fmt: skip
    if carrying is None:
        return section, True
    route, name = carrying
    written = staged.get(route.encode())
    if written is not None and name in written.writes:
        return section, False  # what it showed is not what it read first (a due expiry)
    return section, any(
        row[0] == route and row[1] == name and isinstance(row[2], orjson.Fragment)
        for row in state["before"]
    )


def by_field(source: Source) -> bytes:
    """`,"by":{...}`: who the record says asked for it, re-encoded from its actor header; empty
    without one (or with one refused: `actor_refusal`), so such a record is as it was."""
    raw = source.headers.get(wire.ACTOR_HEADER)
    actor = None if raw is None else parse(raw)
    if actor is None or isinstance(actor, str):
        return b""
    return b',"by":%b' % orjson.dumps(actor.fields())


def actor_refusal(headers: Mapping[str, bytes]) -> GatewayError | None:
    """A record whose actor header is not one the edge writes: refused before it is read."""
    raw = headers.get(wire.ACTOR_HEADER)
    problem = None if raw is None else parse(raw)
    if problem is None or not isinstance(problem, str):
        return None
    return GatewayError(INVALID_REQUEST, f"the {wire.ACTOR_HEADER} header {problem}")


def intact(record: bytes, key: bytes = b"") -> bool:
    """Whether an audit record's digest matches its bytes (keyed with `key`, for a record
    that names the key it was sealed with)."""
    cut = record.rfind(DIGEST_FIELD)
    if cut < 0 or not record.endswith(b'"}'):
        return False
    stated = record[cut + len(DIGEST_FIELD) : -2]
    sealed = record[:cut] + b"}"
    made = blake2b(sealed, digest_size=16, key=key) if key else blake2b(sealed, digest_size=16)
    return made.hexdigest().encode() == stated


def sealed_bytes(record: bytes) -> bytes:
    """What a record's digest seals: its bytes up to `,"digest"`."""
    cut = record.rfind(DIGEST_FIELD)
    return record if cut < 0 else record[:cut]
