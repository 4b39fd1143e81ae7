"""A deterministic recorded log of a realistic gateway run, for tests/unit/test_differential.py.

The log holds every input record of a simulated run, byte for byte: what the
SDK, raw producers, job runners and the ticker send (requests in every dialect
and unique policy, Oban's replace, client ids, a conflicting one among them,
and minted ids, ids reused at once, fetches with claims and leases, heartbeats, acks, nacks and
retries, fails, cancels, requeues, revivals, deletes, ticks, and bad records of
every kind the processor refuses), and what the processor's own stages wrote
back onto its input topics (requests the router and ids' homes forwarded,
requests re-routed, the routes' id reports).

`simulate` makes it. A clock moves forward in steps of STEP_MS. Each step the
processor first handles, partition by partition in offset order, every record
appended before the step, through the stages the live processor chains
(Router for `intake` and `job_events`, Dedup for `requests`), each partition
over its own in-memory store (`gateway.audit.replay.Store`, with its
event-time expiry; `at(timestamp)` before each record). What the stages write
to `intake` or `requests` is appended at the end of that handling (the commit), on the
partition the processor's producer picks (murmur2 of the key,
`gateway.partitioner.partition_for`; a record without a key: a seeded random
partition, as librdkafka's murmur2_random does), so it is handled in a later
step, behind what producers sent meanwhile. Then actors (generator functions
that yield how many milliseconds they sleep) send records stamped with the
clock, reading the answers as an edge would: decisions, replies, job_states.
Idle stretches are skipped, so leases end, periods pass and retention
tombstones fall due (a short `retention_ms`, RETENTION_MS) on the ticks.

The golden outputs are captured in the same run: for every input record, each
output its stage emitted, in order (role or reply topic, key, value, headers),
and at the end each store's live contents. The files in tests/data/differential
were made by the code at the commit `meta.json` names, with

    python -m tests.differential_log tests/data/differential

which runs `simulate()`, decides the finished log again the way
tests/unit/test_differential.py does (each partition alone, in offset order,
with a crash halfway), requires the very outputs and stores captured, and
writes the files. Make them again only for a deliberate change of behaviour,
and say which in the commit; a rewrite must leave them as they are. They were
first made by fc7caa8's code (the processor on quixstreams), and every change
since was checked against them byte for byte. Made again at bf93cf72aa3f, they
gained the audit trail (each decision's state and chain, and the audit records
of events, ticks, forwards and id reports), so a rewrite of it is checked byte
for byte too; the log itself came out the same, and the outputs less the trail
and the stores less the chain's head were those made at fa1a4e7f900a. Made again
at 2e4233ca8f8c, a duplicate's audit record names the job it met (`job_ref`) instead
of carrying it: the log came out the same, every other output byte for byte, and
each audit record, its reference replaced by the job it names and the chain sealed
again, is the one made at bf93cf72aa3f (tests/unit/test_audit_job_ref.py replays
that form).
"""

from __future__ import annotations

import base64
import gzip
import heapq
import random
from collections import Counter, defaultdict
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from gateway.partitioner import partition_for

T0 = 1_770_000_000_000
SEED = 20_250_611
STEP_MS = 10
TICK_EVERY_MS = 2_000
RETENTION_MS = 20_000
MAX_REQUEST_BYTES = 4_096
END_MS = 165_000
INPUT_ROLES = ("intake", "job_events", "requests")
STATEFUL = ("requests",)
# The wire as the recording code has it, spelled out: the log is fixed data, not a client of
# the code.
KIND, JOB_EVENT, TICK, ID_REPORT = "kind", b"job_event", b"tick", b"id_report"
ID_CLAIM, CLAIMED, CLAIMED_ID = "id_claim", b"claimed", "claimed_id"
TICK_KEY = b"\x00tick"

Headers = list[tuple[str, bytes]]
RecordAt = tuple[str, int, int]  # input role, partition, offset
# One output as a stage emitted it: role, reply topic, key, value, headers.
Out = tuple[
    str | None, str | None, bytes | None, bytes | None, tuple[tuple[str, bytes], ...] | None
]
# Per stateful role and partition: the store's live (key, name, value), sorted.
StoreContents = dict[tuple[str, int], list[tuple[bytes, str, bytes]]]
Actor = Generator[int, None, Any]


@dataclass(frozen=True, slots=True)
class Record:
    """One input record, as the processor reads it."""

    role: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: Headers

    @property
    def position(self) -> RecordAt:
        return (self.role, self.partition, self.offset)


@dataclass
class RecordedLog:
    """The input log, where it was read, and what the code at `meta["commit"]` decided."""

    records: list[Record]
    topics: dict[str, str]  # role -> topic name (Source.topic)
    partitions: dict[str, int]  # input role -> partition count
    limits: dict[str, int]  # the Limits fields
    outputs: dict[RecordAt, list[Out]] = field(default_factory=dict)
    stores: StoreContents = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)


def output_of(output: Any) -> Out:
    """A stage's Output as recorded."""
    headers = None if output.headers is None else tuple((n, v) for n, v in output.headers)
    return (output.role, output.topic, output.key, output.value, headers)


def live_contents(stores: dict[tuple[str, int], Any]) -> StoreContents:
    """Each replay Store's items still live at its partition's last record time."""
    return {
        where: sorted(
            (key, name, value)
            for (key, name), (value, stamp) in store.items.items()
            if stamp is None or stamp > store.high_water_ms
        )
        for where, store in sorted(stores.items())
    }


# -- the simulated pipeline ------------------------------------------------------------


class Pipeline:
    """Producers, the processor's stages and the broker's logs, on one simulated clock."""

    def __init__(self, seed: int = SEED) -> None:
        from gateway import catalogue
        from gateway.core import GatewayError, parse_request_json
        from gateway.core.times import format_rfc3339
        from gateway.processor.metrics import Metrics
        from gateway.stage.dedup import Dedup
        from gateway.stage.parsing import Limits
        from gateway.stage.records import Source, headers_of
        from gateway.stage.router import Router
        from tests.memory_store import Store

        self.parse: Callable[[bytes], Any] = parse_request_json
        self._error, self.rfc3339 = GatewayError, format_rfc3339
        self._source, self._headers_of = Source, headers_of
        cat = catalogue.load(namespace="")
        self.topics = {t.role: t.name for t in cat.topics}
        self.partitions = {role: cat.by_role(role).partitions for role in INPUT_ROLES}
        self.limits = Limits(max_request_bytes=MAX_REQUEST_BYTES, retention_ms=RETENTION_MS)
        self.rng = random.Random(seed)
        self.now = T0
        self.logs: dict[tuple[str, int], list[Record]] = defaultdict(list)
        self.handled: dict[tuple[str, int], int] = defaultdict(int)
        self.outputs: dict[RecordAt, list[Out]] = {}
        self.stores: dict[tuple[str, int], Any] = {
            (role, p): Store() for role in STATEFUL for p in range(self.partitions[role])
        }
        self._current: list[Out] = []
        self._committing: list[Out] = []
        metrics = Metrics()
        self.router = Router(self._emit, metrics, self.limits)
        self.dedup = Dedup(
            self.partitions["requests"],
            self._emit,
            metrics,
            self.limits,
            lambda source, key: self.stores[("requests", source.partition)].state(key),
        )
        # What edges see: decisions by request id, replies by correlation id, job_states.
        self.decisions: dict[str, dict[str, Any]] = {}
        self.replies: dict[str, dict[str, Any]] = {}
        self.jobs: dict[str, dict[str, Any] | None] = {}
        self.busy: set[str] = set()  # jobs a background worker holds
        self._heap: list[tuple[int, int, Actor]] = []
        self._seq = 0

    # -- the broker --------------------------------------------------------------------

    def send(
        self,
        role: str,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes]] = (),
        partition: int | None = None,
    ) -> Record:
        """Append a record as a producer would: murmur2 of the key, else random."""
        if partition is None:
            count = self.partitions[role]
            partition = self.rng.randrange(count) if key is None else partition_for(key, count)
        log = self.logs[(role, partition)]
        record = Record(role, partition, len(log), self.now, key, value, list(headers))
        log.append(record)
        return record

    def _emit(self, output: Any, _source: Any) -> None:
        out = output_of(output)
        self._current.append(out)
        if output.role in ("intake", "requests"):
            self._committing.append(out)
        if output.role == "decisions":
            decision = orjson.loads(output.value)
            if "request_id" in decision:  # not an audit record of its own (an event's, ...)
                self.decisions[decision["request_id"]] = decision
        elif output.role == "job_states":
            self.jobs[output.key.decode()] = output.value and orjson.loads(output.value)
        elif output.topic is not None:
            correlation = dict(output.headers or ()).get("correlation_id", b"")
            self.replies[correlation.decode(errors="replace")] = orjson.loads(output.value)

    def _handle(self, record: Record) -> None:
        source = self._source(
            self.topics[record.role],
            record.partition,
            record.offset,
            record.timestamp_ms,
            self._headers_of(record.headers),
        )
        self._current = self.outputs[record.position] = []
        value, key = record.value, record.key
        if record.role == "intake":
            self.router.on_record(value, key, source)
        elif record.role == "job_events":
            self.router.on_event(value, key, source)
        else:
            store = self.stores[(record.role, record.partition)]
            store.at(record.timestamp_ms)
            self.dedup.on_record(value, key, source, store.state(key or b""))

    def _process(self) -> None:
        """Every record appended before now, each partition in offset order; then the commit."""
        pending = [
            where for where, log in sorted(self.logs.items()) if self.handled[where] < len(log)
        ]
        self.rng.shuffle(pending)
        for where in pending:
            log = self.logs[where]
            while (
                self.handled[where] < len(log) and log[self.handled[where]].timestamp_ms < self.now
            ):
                self._handle(log[self.handled[where]])
                self.handled[where] += 1
        committing, self._committing = self._committing, []
        for role, _, key, value, headers in committing:
            assert role is not None
            self.send(role, key, value, list(headers or ()))

    def _backlog(self) -> bool:
        return any(self.handled[where] < len(log) for where, log in self.logs.items())

    # -- the clock and the actors ------------------------------------------------------

    def spawn(self, actor: Actor, delay_ms: int = 0) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (self.now + delay_ms, self._seq, actor))

    def run(self) -> None:
        while self._heap or self._backlog():
            self.now += STEP_MS
            if not self._backlog() and self._heap[0][0] > self.now:
                # Nothing to handle: on to the next actor's time (on the grid of steps).
                self.now += -(-(self._heap[0][0] - self.now) // STEP_MS) * STEP_MS
            self._process()
            while self._heap and self._heap[0][0] <= self.now:
                _, _, actor = heapq.heappop(self._heap)
                try:
                    sleep = next(actor)
                except StopIteration:
                    continue
                self.spawn(actor, max(sleep, 1))

    def until(
        self, found: Callable[[], Any], patience_ms: int = 30_000
    ) -> Generator[int, None, Any]:
        """Sleep until `found()` gives something, and give that."""
        deadline = self.now + patience_ms
        while (value := found()) is None:
            if self.now > deadline:
                raise TimeoutError("an actor waited in vain: the scenario is wrong")
            yield STEP_MS
        return value

    # -- producers ---------------------------------------------------------------------

    def hex(self) -> str:
        return f"{self.rng.getrandbits(128):032x}"

    def uuid7(self) -> str:
        """A fresh lowercase UUIDv7, as a client or the SDK makes one."""
        value = (self.now << 80) | (0x7 << 76) | (self.rng.getrandbits(12) << 64)
        value |= (0b10 << 62) | self.rng.getrandbits(62)
        h = f"{value:032x}"
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"

    def reply_headers(self, reply: bool | str) -> tuple[Headers, str]:
        if not reply:
            return [], ""
        cid = self.hex()
        topic = self.topics["replies"] if reply is True else reply
        return [("reply_to", topic.encode()), ("correlation_id", cid.encode())], cid

    def sdk(self, job: dict[str, Any], reply: bool = True, request_id: str | None = None) -> str:
        """What the SDK sends for a valid job (gateway/sdk/prepare.py): its request id."""
        value = orjson.dumps(job)
        request = self.parse(value)
        assert not isinstance(request, self._error), (request, job)
        rid = request_id or self.hex()
        headers: Headers = [("request_id", rid.encode())]
        if request.envelope.id is not None:  # claimed at the id's home first
            key = request.envelope.id.encode()
        elif request.unique_key is not None:
            key = request.unique_key.encode()
        else:
            minted = self.uuid7()
            key, value = minted.encode(), orjson.dumps({**job, "id": minted})
        self.send("requests", key, value, headers + self.reply_headers(reply)[0])
        return rid

    def intake(
        self,
        job: Any,
        key: bytes | None = None,
        reply: bool | str = False,
        headers: Sequence[tuple[str, bytes]] = (),
    ) -> str:
        """What a raw producer sends to `intake` (bytes as they are): its request id."""
        rid = self.hex()
        value = job if isinstance(job, bytes) or job is None else orjson.dumps(job)
        sent = [("request_id", rid.encode()), *headers, *self.reply_headers(reply)[0]]
        self.send("intake", key, value, sent)
        return rid

    def event(
        self,
        job: dict[str, Any],
        kind: str,
        via: str = "sdk",
        reply: bool | str = True,
        **fields: Any,
    ) -> str:
        """A job event by its job's route: via the SDK (onto `requests`) or a job runner
        (`job_events`). Its correlation id ("" without a reply)."""
        unique_key = job.get("unique_key")
        value = {"job_id": job.get("job_id") or job["id"], "type": kind, **fields}
        if unique_key:
            value["unique_key"] = unique_key
        route = (unique_key or value["job_id"]).encode()
        headers, cid = self.reply_headers(reply)
        if via == "sdk":
            headers = [("request_id", self.hex().encode()), (KIND, JOB_EVENT), *headers]
        self.send("requests" if via == "sdk" else "job_events", route, orjson.dumps(value), headers)
        return cid

    def decided(self, rid: str) -> Generator[int, None, dict[str, Any]]:
        decision: dict[str, Any] = yield from self.until(lambda: self.decisions.get(rid))
        return decision

    def answered(self, cid: str) -> Generator[int, None, dict[str, Any]]:
        reply: dict[str, Any] = yield from self.until(lambda: self.replies.get(cid))
        return reply

    def at(self, offset_ms: int) -> str:
        return str(self.rfc3339(self.now + offset_ms))


# -- what the actors send ------------------------------------------------------------------

ALL_STATES = ["scheduled", "available", "pending", "active",
              "completed", "retryable", "cancelled", "discarded"]  # fmt: skip


def ojs(kind: str, args: Any, unique: dict[str, Any] | None = None, **more: Any) -> dict[str, Any]:
    return {"type": kind, "args": args, **more, **({} if unique is None else {"unique": unique})}


def by_args(**policy: Any) -> dict[str, Any]:
    return {"keys": ["type", "args"], **policy}


def oban(**more: Any) -> dict[str, Any]:
    return {"dialect": "oban", "worker": "MyApp.Mailer", "args": {"id": 1}, "unique": True, **more}


def oban_py(**more: Any) -> dict[str, Any]:
    return oban(**{"dialect": "oban-py", "worker": "Worker", "queue": "default", "args": {"a": 1},
                   **more})  # fmt: skip


def zizq(key: str, **more: Any) -> dict[str, Any]:
    job = {"type": "send_email", "queue": "emails", "payload": {"userId": 42}, "uniqueKey": key}
    return {"dialect": "zizq", **job, **more}


def faktory(args: list[Any], **custom: Any) -> dict[str, Any]:
    return {"dialect": "faktory", "jobtype": "SomeJob", "args": args, "custom": custom}


def nested(levels: int) -> Any:
    """A value nested `levels` deep."""
    value: Any = 0
    for _ in range(levels):
        value = [value]
    return value


def ticker(p: Pipeline) -> Actor:
    """Ticks to every partition of `requests`, as the processor's ticker thread sends them."""
    while p.now < T0 + END_MS:
        for partition in range(p.partitions["requests"]):
            p.send("requests", TICK_KEY, b"", [(KIND, TICK)], partition)
        yield TICK_EVERY_MS


def ojs_policies(p: Pipeline) -> Actor:
    """OJS unique policies: keys, period, states, on_conflict, the HTTP form, bad policies."""
    email = ojs("email.send", [1], by_args())
    first = yield from p.decided(p.sdk(email))
    yield from p.decided(p.sdk(email))  # rejected
    p.intake(email, reply=True)  # through the router: rejected too
    digest = ojs("email.digest", [2], by_args(on_conflict="ignore"))
    yield from p.decided(p.sdk(digest))
    p.sdk(digest)  # ignored
    report = ojs("report.build", {"id": 3}, by_args(on_conflict="replace"), max_attempts=2)
    yield from p.decided(p.sdk(report))
    second = yield from p.decided(p.sdk(report))  # replaced
    yield from p.answered(p.event(second, "job.started", claim_id="w1"))
    p.sdk(report)  # replaces the active job: a cancellation for its worker
    except_schedule = by_args(on_conflict="replace_except_schedule")
    mail = ojs("report.mail", [3], except_schedule, scheduled_at=p.at(60_000))
    yield from p.decided(p.sdk(mail))
    p.sdk({**mail, "scheduled_at": p.at(90_000)})
    warm = ojs("cache.warm", [4], by_args(period="PT5S", states=ALL_STATES))
    job = yield from p.decided(p.sdk(warm))
    yield from p.answered(p.event(job, "job.started"))
    yield from p.answered(p.event(job, "job.completed", result={"warmed": 4}))
    yield 1_000
    p.sdk(warm)  # completed within its period: rejected
    yield 5_000
    p.sdk(warm)  # the period is over
    active = ojs("sync.run", [5], by_args(states=["active"]))
    a = yield from p.decided(p.sdk(active))
    yield from p.decided(p.sdk(active))  # the first is only available: accepted
    yield from p.answered(p.event(a, "job.started", visibility_timeout_ms=20_000))
    p.sdk(active)  # rejected
    notify = {"keys": ["type", "args", "meta"], "args_keys": ["user"], "meta_keys": ["tenant"]}
    p.sdk(ojs("user.notify", {"user": 1, "n": 1}, notify, meta={"tenant": "t1", "trace": 1}))
    yield 200
    p.sdk(ojs("user.notify", {"user": 1, "n": 2}, notify, meta={"tenant": "t1", "trace": 2}))
    p.sdk(ojs("user.notify", {"user": 1, "n": 3}, notify, meta={"tenant": "t2"}))
    batch = ojs("mail.batch", [6], {"key": ["type", "queue"]}, queue="bulk")
    yield from p.decided(p.sdk(batch))
    p.sdk({**batch, "queue": "fast"})
    p.sdk({**batch, "args": [7]})  # same type and queue: rejected
    options = {"unique": by_args(on_conflict="ignore"), "queue": "media", "timeout_ms": 60_000}
    http = {"type": "media.resize", "args": [8], "options": {**options, "priority": 5}}
    yield from p.decided(p.sdk(http))
    p.sdk(http)
    bad: dict[str, Any]
    for bad in (
        {"keys": ["type", "meta"]},  # meta_keys missing
        {"on_conflict": "update"},
        {"period": "P1M"},
        {"states": []},
        {"keys": ["type"], "window": "PT1H"},
        {"keys": ["type", "args"], "args_keys": []},
    ):
        p.intake(ojs("bad.policy", [0], bad), reply=True)
        yield 37
    yield 3_000
    p.sdk(email)  # the first email job is still available: rejected
    yield from p.answered(p.event(first, "job.cancelled"))
    p.sdk(email)  # cancelled is not among the default states: accepted


def dialects(p: Pipeline) -> Actor:
    """Oban (Elixir and Python) with its replace, Zizq's scopes, Faktory's locks."""
    yield from p.decided(p.sdk(oban()))
    p.sdk(oban())
    scheduled = oban(args={"id": 2}, priority=3, max_attempts=3, scheduled_at=p.at(3_600_000))
    yield from p.decided(p.sdk(scheduled))
    replace = {"scheduled": ["priority", "max_attempts", "scheduled_at"]}
    p.sdk({**scheduled, "priority": 0, "max_attempts": 5, "replace": replace})  # updated
    yield 100
    by_fields = oban(args={"id": 3}, unique={"fields": ["args"]}, scheduled_at=p.at(600_000))
    yield from p.decided(p.sdk(by_fields))
    replace = {"scheduled": ["worker", "queue"]}
    p.sdk({**by_fields, "worker": "MyApp.Other", "queue": "fast", "replace": replace})
    url = {"fields": ["worker", "args"], "keys": ["url"], "period": 4}
    keyed = oban(args={"url": "u", "user": 1}, meta={"trace": 1}, unique=url)
    yield from p.decided(p.sdk(keyed))
    p.sdk({**keyed, "args": {"url": "u", "user": 2}})
    yield 4_500
    p.sdk({**keyed, "args": {"url": "u", "user": 3}})  # the period is over
    job = yield from p.decided(p.sdk(oban_py()))
    yield from p.answered(p.event(job, "job.started"))
    yield from p.answered(p.event(job, "job.completed"))
    p.sdk(oban_py())  # held while retained: ignored
    p.sdk(oban_py(args={"a": 2}, unique={"group": "incomplete", "period": 30}))
    queued = yield from p.decided(p.sdk(zizq("send_email:42")))
    p.sdk(zizq("send_email:42"))  # ignored
    yield from p.answered(p.event(queued, "job.started"))
    yield from p.decided(p.sdk(zizq("send_email:42")))  # its scope `queued` ended: accepted
    for scope in ("active", "exists"):
        held = yield from p.decided(p.sdk(zizq(scope, uniqueWhile=scope)))
        yield from p.answered(p.event(held, "job.started"))
        p.sdk(zizq(scope, uniqueWhile=scope))
        yield from p.answered(p.event(held, "job.completed"))
        p.sdk(zizq(scope, uniqueWhile=scope))
    yield from p.decided(p.sdk(faktory([1, 2], unique_for=5)))
    p.sdk(faktory([1, 2], unique_for=5))  # NOTUNIQUE
    p.sdk({**faktory([1, 2], unique_for=5), "queue": "critical", "retry": 3})
    until_start = faktory([3], unique_for=60, unique_until="start")
    held = yield from p.decided(p.sdk(until_start))
    p.sdk(until_start)
    yield from p.answered(p.event(held, "job.started"))
    p.sdk(until_start)  # released when it started
    p.sdk(faktory([9]))  # no lock: the SDK mints its id
    p.intake(faktory([9]))  # the router mints it
    yield 5_500
    p.sdk(faktory([1, 2], unique_for=5))  # the lock is over


def client_ids(p: Pipeline) -> Actor:
    """Client ids: claimed at their homes, taken, conflicting, sent every way; ids the
    gateway minted, named again at once."""
    own = p.uuid7()
    invoice = ojs("invoice.send", [7], id=own)
    first = yield from p.decided(p.sdk(invoice))
    yield from p.decided(p.sdk(invoice))  # the same id, the same route
    p.sdk(ojs("invoice.send", [7], by_args(), id=own))  # another route: the id is taken
    keyed_id = p.uuid7()
    keyed = ojs("invoice.remind", [8], by_args(), id=keyed_id)
    yield from p.decided(p.sdk(keyed))
    p.sdk({**keyed, "id": p.uuid7()})  # another id, the same key: rejected
    p.intake(ojs("invoice.audit", [9], id=p.uuid7()), reply=True)  # router -> the id's home
    direct = ojs("invoice.copy", [10], by_args(), id=p.uuid7())
    # Straight onto `requests` by its route, unclaimed: it is sent to be claimed first.
    value = orjson.dumps(direct)
    p.send("requests", p.parse(value).unique_key.encode(), value, [("request_id", b"direct")])
    forged = ojs("invoice.fake", [11], id=p.uuid7())
    # A producer's own id_claim header is dropped by the router.
    p.intake(forged, headers=[(ID_CLAIM, CLAIMED), (CLAIMED_ID, forged["id"].encode())])
    # The id of a keyed job, under a job routed by it: taken.
    clash = orjson.dumps(ojs("invoice.clash", [12], id=keyed_id))
    p.send("requests", keyed_id.encode(), clash, [("request_id", b"clash")])
    # Ids the gateway minted for keyed jobs, named at once by requests of other keys or none.
    for n in range(6):
        minted = yield from p.decided(p.sdk(ojs("invoice.mint", [n], by_args())))
        p.sdk(ojs("invoice.reuse", [n], by_args(), id=minted["job_id"]))
        p.sdk(ojs("invoice.reuse", [], id=minted["job_id"]))
    # A forged `claimed` on `requests`: the route reports a claim it never had.
    claimed = p.uuid7()
    value = orjson.dumps(ojs("invoice.claimed", [13], id=claimed))
    p.send(
        "requests", claimed.encode(), value, [(ID_CLAIM, CLAIMED), (CLAIMED_ID, claimed.encode())]
    )
    p.intake(ojs("invoice.send", [14], id="not-a-uuid7"), reply=True)
    p.intake(ojs("invoice.send", [15], id=own.upper()), reply=True)
    # The job holding `own` ends; once tombstoned its id is free for another route.
    yield from p.answered(p.event(first, "job.started"))
    yield from p.answered(p.event(first, "job.completed"))
    yield RETENTION_MS + 15_000
    yield from p.decided(p.sdk(ojs("invoice.send", [16], by_args(), id=own)))
    p.sdk(ojs("invoice.send", [16], id=own))  # now the keyed route's: taken again


def lifecycle(p: Pipeline) -> Actor:
    """Every event and transition on scripted jobs; leases and a timeout that end attempts."""

    def step(job: dict[str, Any], kind: str, **fields: Any) -> Generator[int, None, Any]:
        return p.answered(p.event(job, kind, **fields))

    retry = {"max_attempts": 3, "initial_interval": "PT1S", "jitter": False}
    one = yield from p.decided(p.sdk(ojs("life.one", [1], by_args(), retry=retry)))
    yield from step(one, "job.started", claim_id="c1", visibility_timeout_ms=3_000)
    yield 500
    yield from step(one, "job.heartbeat", visibility_timeout_ms=4_000)
    yield from step(one, "job.failed", error={"type": "Flaky", "message": "boom"})
    yield from step(one, "job.started")  # its backoff has not elapsed: refused
    yield 1_100
    yield from step(one, "job.started", claim_id="c2", via="runner")
    yield from step(one, "job.completed", result={"ok": True})
    yield from step(one, "job.completed")  # unchanged
    yield from step(one, "job.failed", error={"message": "late"})  # terminal
    yield from step(one, "job.deleted")

    two = yield from p.decided(p.sdk(ojs("life.two", [2])))  # a minted id
    yield from step(two, "job.started", claim_id="x")
    yield from step(two, "job.started", claim_id="y")  # a second claim: unchanged
    yield from step(two, "job.enqueued", claim_id="y")  # another claim's requeue: refused
    yield from step(two, "job.enqueued", claim_id="x")  # its own: requeued
    yield from step(two, "job.deleted")  # live: refused
    yield from step(two, "job.cancelled")
    p.event(two, "job.deleted", via="runner", reply=False)

    # No ack: the ticks end the attempt (discarded at max attempts, else retryable).
    dead = yield from p.decided(p.sdk(ojs("life.lease", [3], by_args(), max_attempts=1)))
    yield from step(dead, "job.started", visibility_timeout_ms=1_000)
    retried = yield from p.decided(p.sdk(ojs("life.lease", [4], by_args(), max_attempts=3)))
    yield from step(retried, "job.started", visibility_timeout_ms=800)
    timed = yield from p.decided(p.sdk(ojs("life.timeout", [5], by_args(), timeout_ms=1_500)))
    yield from step(timed, "job.started", visibility_timeout_ms=10_000)
    for _ in range(4):  # heartbeats keep the lease, not the timeout
        yield 400
        p.event(timed, "job.heartbeat", via="runner", reply=False)
    yield 6_000
    yield from step(dead, "job.enqueued")  # from the dead letters
    yield from step(dead, "job.started", via="runner")
    yield from step(dead, "job.completed", via="runner")
    yield from step(retried, "job.started")
    yield from step(retried, "job.failed", error={"message": "no", "retryable": False})

    states = yield from p.decided(p.sdk(ojs("life.states", [6], by_args())))
    yield from step(states, "job.scheduled", scheduled_at=p.at(600_000))
    yield from step(states, "job.scheduled", scheduled_at=p.at(900_000))
    pending = {"job_id": states["job_id"], "unique_key": states["unique_key"], "state": "pending"}
    route, reply = states["unique_key"].encode(), p.reply_headers(True)[0]
    p.send("requests", route, orjson.dumps(pending), [(KIND, JOB_EVENT), *reply])
    yield 100
    yield from step(states, "job.enqueued")
    yield from step(states, "job.completed")  # not active: refused
    yield from step(states, "job.started")
    yield from step(states, "job.retrying", error={"message": "later"})
    yield from step(states, "job.discarded")
    yield from step(states, "job.enqueued")
    yield from step(states, "job.cancelled", via="runner")

    # Events about no job, or keyed by the wrong route.
    p.event({"id": p.uuid7()}, "job.started")
    p.event({"job_id": states["job_id"]}, "job.cancelled", via="runner")  # keyed by its id
    yield from step(one, "job.heartbeat")  # deleted: unknown


def bad_records(p: Pipeline) -> Actor:
    """Records the processor refuses, on every input topic; none stops a partition."""
    big_headers: Headers = [("trace", b"h" * 17_000)]
    for i, value in enumerate([
        b"{not json", b"[1, 2]", b"", None, b"\xff\xfe{}", b'"a string"',
        ojs("big.job", ["x" * 5_000]),
        ojs("Bad Type", []),
        ojs("deep.job", [], depth=nested(70)),
        b'{"type": "num.job", "args": [90071992547409930]}',
        {"dialect": "resque", "class": "X"},
        {"dialect": 3},
        {"dialect": "oban", "args": {}},
        {"dialect": "oban", "worker": "W", "args": [1]},
        {"dialect": "zizq", "type": "t", "uniqueWhile": "active"},
        {"dialect": "faktory", "jobtype": "T", "custom": {"unique_for": -1}},
        {"dialect": "oban-py", "worker": "W", "unique": {"group": "done"}},
        ojs("retry.job", [], retry={"backoff": "linear", "backoff_type": "constant"}),
        ojs("when.job", [], scheduled_at="tomorrow"),
    ]):  # fmt: skip
        p.intake(value, key=None if i % 3 else f"raw-{i}".encode(), reply=i % 2 == 0)
        yield 53
    p.intake(ojs("head.job", [1]), headers=big_headers, reply=True)
    long_id = [("request_id", b"r" * 300)]  # too long to be taken
    p.send("intake", None, orjson.dumps(ojs("long.id", [1])), long_id)
    twice = [("request_id", b"first"), ("request_id", b"second")]  # the last one counts
    p.send("intake", b"dup", orjson.dumps(ojs("dup.header", [1])), twice)
    p.intake(ojs("reply.elsewhere", [1], by_args()), reply=p.topics["decisions"])
    yield 200
    # On `requests`: unreadable, misrouted, on the wrong partition, without a route.
    job = orjson.dumps(ojs("route.job", [1], by_args()))
    key = p.parse(job).unique_key.encode()
    wrong = (partition_for(key, p.partitions["requests"]) + 1) % p.partitions["requests"]
    p.send("requests", key, b"{not json", [("request_id", b"bad-req")])
    p.send("requests", key, None)
    p.send("requests", b"not-its-route", job, [("request_id", b"misrouted")])
    p.send("requests", key, job, [("request_id", b"wrong-partition")], wrong)
    p.send("requests", b"any", orjson.dumps(ojs("no.route", [1])), [("request_id", b"nr")])
    p.send("requests", None, orjson.dumps(ojs("no.route", [2])), [("request_id", b"nr-2")])
    p.send("requests", key, job, [(KIND, TICK), ("request_id", b"tick-value")])
    p.send("requests", key, job, big_headers)
    p.send("requests", key, orjson.dumps(ojs("route.job", [1], by_args(), pad="x" * 5_000)))
    p.send("requests", key, b"\x00\x01", [(KIND, JOB_EVENT), *p.reply_headers(True)[0]])
    p.send("requests", b"x" * 40, b"", [(KIND, TICK)], 0)  # a tick under another key
    yield 200
    # At an id's home: a keyed client id misrouted, too large, with oversized headers, and
    # reports no route would write.
    claim = p.uuid7().encode()
    client = orjson.dumps(ojs("ids.job", [1], by_args(), id=claim.decode()))
    p.send("requests", b"not-the-id", client, [("request_id", b"ids-misrouted")])
    p.send("requests", claim, b"{broken", [(KIND, ID_REPORT)])  # a dead letter
    p.send("requests", claim, b'{"job_id": "x"}', [(KIND, ID_REPORT)])  # one too
    p.send("requests", claim, client, big_headers)
    big = ojs("ids.job", [1], by_args(), id=claim.decode(), pad="x" * 5_000)
    p.send("requests", claim, orjson.dumps(big))
    yield 200
    # On `job_events`: unreadable, too large, oversized headers, keyed wrong, invalid.
    some = p.uuid7()

    def started(**fields: Any) -> bytes:
        return orjson.dumps({"job_id": some, "type": "job.started", **fields})

    for key, value in [
        (some.encode(), b"{not json"),
        (some.encode(), started(type="job.completed", result="x" * 140_000)),
        (some.encode(), started(type="job.bogus")),
        (some.encode(), started(state="active")),
        (some.encode(), started(job_id=None)),
        (some.encode(), started(unique_key="K")),
        (some.encode(), started(visibility_timeout_ms=0)),
        (b"elsewhere", started()),
        (None, started()),
    ]:
        p.send("job_events", key, value, p.reply_headers(True)[0])
        yield 29
    p.send("job_events", some.encode(), started(), big_headers + p.reply_headers(True)[0])


def background_job(r: random.Random) -> dict[str, Any]:
    """A job of any dialect over a few keys (so duplicates happen), in the workers' queue."""
    n = r.randint(1, 5)
    return r.choice([
        ojs("bg.email", [r.randint(1, 8)], by_args(), queue="bg"),
        ojs("bg.sync", {"acct": n}, by_args(on_conflict="ignore", period="PT10S"), queue="bg"),
        ojs("bg.report", [n], by_args(on_conflict="replace"), queue="bg"),
        ojs("bg.log", [r.randint(1, 1_000)], queue="bg", max_attempts=2),
        oban(worker="Bg.Worker", queue="bg", args={"id": n}, unique={"period": 10}),
        oban_py(worker="BgWorker", queue="bg", args={"id": n}),
        zizq(f"bg:{n}", queue="bg", uniqueWhile=r.choice(["queued", "active", "exists"])),
        {**faktory([n], unique_for=8), "jobtype": "BgJob", "queue": "bg"},
    ])  # fmt: skip


def background(p: Pipeline, count: int, start_ms: int) -> Actor:
    """Producers at work: the SDK mostly, raw producers on `intake` too."""
    yield start_ms
    for _ in range(count):
        yield p.rng.randint(40, 300)
        job = background_job(p.rng)
        if p.rng.random() < 0.08:
            job = {**job, "id": p.uuid7()}
        if p.rng.random() < 0.2:
            key = p.rng.choice([None, b"raw", f"k{p.rng.randint(1, 99)}".encode()])
            p.intake(job, key=key, reply=p.rng.random() < 0.5)
        else:
            p.sdk(job, reply=p.rng.random() < 0.7)


def workers(p: Pipeline, until_ms: int) -> Actor:
    """A pool of workers fetching background jobs from what job_states shows."""
    while p.now < T0 + until_ms:
        yield p.rng.randint(80, 400)
        ready = sorted(
            job_id
            for job_id, job in p.jobs.items()
            if job and job.get("queue") == "bg" and job["state"] in ("available", "retryable")
        )
        if ready := [job_id for job_id in ready if job_id not in p.busy]:
            job_id = p.rng.choice(ready)
            p.busy.add(job_id)
            p.spawn(work(p, dict(p.jobs[job_id] or {})))


def work(p: Pipeline, job: dict[str, Any]) -> Actor:
    """One fetch and what its worker then does: ack, heartbeat, nack, fail, give up, vanish."""
    via = "sdk" if p.rng.random() < 0.75 else "runner"
    claim = p.hex()[:16]
    lease = p.rng.choice([1_000, 2_500, 5_000])
    cid = p.event(job, "job.started", via=via, claim_id=claim, visibility_timeout_ms=lease)
    fetched = yield from p.answered(cid)
    if fetched["outcome"] == "applied":
        yield p.rng.randint(50, 2_000)
        roll = p.rng.random()
        if roll < 0.1:
            p.event(job, "job.heartbeat", via=via, reply=False, visibility_timeout_ms=lease)
            yield p.rng.randint(50, 1_500)
        if roll < 0.55:
            p.event(job, "job.completed", via=via, reply=via == "sdk", result={"n": roll})
        elif roll < 0.75:
            p.event(job, "job.failed", via=via, error={"type": "Flaky", "message": "try again"})
        elif roll < 0.8:
            p.event(job, "job.failed", via=via, error={"message": "fatal", "retryable": False})
        elif roll < 0.9:
            p.event(job, "job.enqueued", via=via, claim_id=claim)  # gave up: its claim undone
        # else the worker vanished: the lease ends it
        yield p.rng.randint(100, 500)
    p.busy.discard(job["id"])


def later(p: Pipeline) -> Actor:
    """After a quiet spell (leases ended, periods passed, records tombstoned): again."""
    yield 115_000
    for job in (
        ojs("email.send", [1], by_args()),
        ojs("cache.warm", [4], by_args(period="PT5S", states=ALL_STATES)),
        ojs("life.one", [1], by_args()),
        oban(),
        oban_py(),
        zizq("send_email:42"),
    ):
        decision = yield from p.decided(p.sdk(job))
        if decision["outcome"] == "accepted":
            yield from p.answered(p.event(decision, "job.started", visibility_timeout_ms=1_500))
        yield 300
    rid = p.hex()
    p.sdk(ojs("retry.same", [1], by_args()), request_id=rid)
    p.sdk(ojs("retry.same", [1], by_args()), request_id=rid)  # a client's retry, same id


def simulate(seed: int = SEED) -> RecordedLog:
    p = Pipeline(seed)
    p.spawn(ticker(p))
    p.spawn(ojs_policies(p), 100)
    p.spawn(dialects(p), 300)
    p.spawn(client_ids(p), 500)
    p.spawn(lifecycle(p), 800)
    p.spawn(bad_records(p), 1_500)
    p.spawn(background(p, 180, 0))
    p.spawn(background(p, 40, 100_000))
    p.spawn(workers(p, 60_000), 1_000)
    p.spawn(workers(p, 112_000), 100_000)
    p.spawn(later(p))
    p.run()
    records = [r for _, log in sorted(p.logs.items()) for r in log]
    limits = {"max_request_bytes": MAX_REQUEST_BYTES, "retention_ms": RETENTION_MS}
    meta = {"seed": seed, "t0": T0}
    stores = live_contents(p.stores)
    return RecordedLog(records, p.topics, p.partitions, limits, p.outputs, stores, meta)


# -- what the golden covers ------------------------------------------------------------------


def coverage(log: RecordedLog) -> Counter[str]:
    """Counts of what the outputs show: decision outcomes and error codes, dialects, event
    results, job states (those the ticks moved apart), and records by role."""
    counts: Counter[str] = Counter()
    for record in log.records:
        kind = dict(record.headers).get(KIND, b"request").decode(errors="replace")
        counts[f"input {record.role} {kind}"] += 1
        for role, topic, _, value, _ in log.outputs[record.position]:
            counts[f"output {role or 'reply'}"] += 1
            if role not in ("decisions", "job_states", None):
                continue
            data: Any = None if value is None else orjson.loads(value)
            if role == "decisions" and "outcome" not in data:
                counts[f"audit {data['kind']}"] += 1  # an event's, a tick's, ... own record
            elif role == "decisions":
                counts[f"decision {data['outcome']}"] += 1
                counts[f"dialect {data['dialect']}"] += 1
                if data["error"]:
                    counts[f"error {data['outcome']} {data['error']['code']}"] += 1
            elif role == "job_states":
                state = "tombstone" if data is None else data["state"]
                counts[f"job {state}"] += 1
                if kind == "tick":
                    counts[f"tick {state}"] += 1
            elif topic is not None and "request_id" not in data:
                code = data["reason"] or (data["error"] or {}).get("code") or ""
                counts[f"event {data['outcome']} {code}".rstrip()] += 1
    return counts


# -- the files ----------------------------------------------------------------------------------

LOG, GOLDEN, STORES, META = "log.jsonl.gz", "golden.jsonl.gz", "stores.jsonl.gz", "meta.json"


def _enc(data: bytes | None) -> Any:
    """Bytes as JSON: text when they are UTF-8 (exactly reversible), else tagged base64."""
    if data is None:
        return None
    try:
        return data.decode()
    except UnicodeDecodeError:
        return ["b64", base64.b64encode(data).decode()]


def _dec(raw: Any) -> bytes | None:
    if raw is None:
        return None
    return raw.encode() if isinstance(raw, str) else base64.b64decode(raw[1])


def _headers(raw: Any) -> tuple[tuple[str, bytes], ...]:
    return tuple((name, _dec(value) or b"") for name, value in raw)


def _write_lines(path: Path, rows: Iterator[Any]) -> None:
    with path.open("wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as out:
        for row in rows:
            out.write(orjson.dumps(row) + b"\n")


def _read_lines(path: Path) -> Iterator[Any]:
    with gzip.open(path, "rb") as lines:
        yield from (orjson.loads(line) for line in lines)


def write(log: RecordedLog, directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    _write_lines(
        directory / LOG,
        (
            [
                r.role,
                r.partition,
                r.offset,
                r.timestamp_ms,
                _enc(r.key),
                _enc(r.value),
                [[n, _enc(v)] for n, v in r.headers],
            ]
            for r in log.records
        ),
    )
    _write_lines(
        directory / GOLDEN,
        (
            [
                *r.position,
                [
                    [
                        role,
                        topic,
                        _enc(key),
                        _enc(value),
                        None if headers is None else [[n, _enc(v)] for n, v in headers],
                    ]
                    for role, topic, key, value, headers in log.outputs[r.position]
                ],
            ]
            for r in log.records
        ),
    )
    _write_lines(
        directory / STORES,
        (
            [role, partition, [[_enc(key), name, _enc(value)] for key, name, value in items]]
            for (role, partition), items in sorted(log.stores.items())
        ),
    )
    meta = {
        **log.meta,
        "topics": log.topics,
        "partitions": log.partitions,
        "limits": log.limits,
        "records": len(log.records),
        "coverage": dict(sorted(coverage(log).items())),
    }
    (directory / META).write_bytes(orjson.dumps(meta, option=orjson.OPT_INDENT_2) + b"\n")


def load(directory: Path) -> RecordedLog:
    meta = orjson.loads((directory / META).read_bytes())
    records = [
        Record(role, p, o, ts, _dec(key), _dec(value), list(_headers(headers)))
        for role, p, o, ts, key, value, headers in _read_lines(directory / LOG)
    ]
    outputs: dict[RecordAt, list[Out]] = {
        (role, p, o): [
            (r, t, _dec(k), _dec(v), None if h is None else _headers(h)) for r, t, k, v, h in outs
        ]
        for role, p, o, outs in _read_lines(directory / GOLDEN)
    }
    stores: StoreContents = {
        (role, p): [(_dec(k) or b"", name, _dec(v) or b"") for k, name, v in items]
        for role, p, items in _read_lines(directory / STORES)
    }
    return RecordedLog(
        records, meta["topics"], meta["partitions"], meta["limits"], outputs, stores, meta
    )


if __name__ == "__main__":
    import subprocess
    import sys

    from tests.unit.test_differential import decide_log

    made = simulate()
    # The outputs captured as the simulation went must be those of the log decided alone.
    from gateway.stage.parsing import Limits

    stores: StoreContents = {}
    if decide_log(made, Limits(**made.limits), stores) != made.outputs or stores != made.stores:
        sys.exit("the log decided again gives other outputs: the simulation is not the log")
    here = Path(__file__).resolve().parent
    commit = subprocess.run(
        ["git", "-C", str(here), "rev-parse", "--short=12", "HEAD"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    made.meta["commit"] = commit
    write(made, Path(sys.argv[1]))
