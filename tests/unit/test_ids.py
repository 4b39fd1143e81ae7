"""One authority for job ids: the claim rules (core/ids.py), ids minted at home, and the router
and the dedup stage (an id's home and its route) together over in-memory logs, in any
interleaving."""

from __future__ import annotations

from collections import deque
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.audit.log import LogRecord
from gateway.core import GatewayError, Outcome, Request, parse_request
from gateway.core.envelope import is_uuid7
from gateway.core.ids import IdClaim, IdReport, claim_id, holder, parse_report, report_id
from gateway.core.jobs import uuid7, uuid7_ms
from gateway.partitioner import partition_for
from gateway.processor.metrics import Metrics
from gateway.stage.dedup import Dedup
from gateway.stage.parsing import Limits
from gateway.stage.records import Output, Source
from gateway.stage.router import Router
from gateway.wire import CLAIMED_ID_HEADER, ID_CLAIM_HEADER, ID_CLAIMED, ID_REPORT, KIND_HEADER
from tests.memory_store import Store
from tests.support import is_trail

T0 = 1_770_000_000_000
JOB_ID = "019b0a4c-1f00-7000-8000-000000000001"
PARTITIONS = 4


def request(key_arg: int | None, job_id: str = JOB_ID) -> Request:
    job: dict[str, Any] = {"type": "email.send", "args": [key_arg], "id": job_id}
    if key_arg is not None:
        job["unique"] = {"keys": ["type", "args"]}
    parsed = parse_request(job)
    assert isinstance(parsed, Request)
    return parsed


# -- the rules ----------------------------------------------------------------


def test_a_free_id_is_claimed_for_its_route():
    claim, refusal = claim_id(None, None, request(1), "route-a", T0)
    assert refusal is None and claim == IdClaim("route-a", pending=1)


def test_the_route_that_holds_an_id_may_send_more_requests_with_it():
    claim, refusal = claim_id(
        IdClaim("route-a", 0, {"id": JOB_ID}), None, request(1), "route-a", T0
    )
    assert refusal is None and claim is not None and claim.pending == 1


def test_another_route_is_refused_as_a_taken_id_naming_the_holder():
    holder = {"id": JOB_ID, "type": "email.send", "queue": "default", "state": "active",
              "created_at": "2026-01-01T00:00:00.000Z"}  # fmt: skip
    claim = IdClaim("route-a", 0, holder)
    after, refusal = claim_id(claim, None, request(2), "route-b", T0)
    assert after == claim and refusal is not None
    assert refusal.outcome is Outcome.REJECTED and refusal.error is not None
    assert refusal.error.code == "duplicate" and "active" in refusal.error.message
    assert refusal.existing is not None and refusal.existing.job_id == JOB_ID


def test_a_job_living_at_the_ids_home_refuses_every_keyed_claim():
    home_job = {"id": JOB_ID, "type": "plain", "queue": "default", "state": "scheduled",
                "route": JOB_ID, "partition": 0}  # fmt: skip
    after, refusal = claim_id(None, home_job, request(2), "route-b", T0)
    assert after is None and refusal is not None and refusal.existing is not None
    assert refusal.existing.job_id == JOB_ID and "scheduled" in str(refusal.error)


def test_a_keyed_claim_holds_the_id_against_a_job_routed_by_it():
    assert holder(IdClaim("route-a", 1), JOB_ID, JOB_ID) == {"id": JOB_ID, "state": "available"}
    assert holder(IdClaim(JOB_ID, 1), JOB_ID, JOB_ID) is None
    assert holder(None, JOB_ID, JOB_ID) is None


def test_a_claim_is_released_when_no_decision_is_pending_and_no_job_is_held():
    claim = IdClaim("route-a", pending=2)
    claim = report_id(claim, "route-a", None, decided=True)
    assert claim == IdClaim("route-a", 1)
    assert report_id(claim, "route-a", None, decided=True) is None


def test_a_held_job_keeps_the_claim_until_it_leaves():
    claim = report_id(IdClaim("route-a", 1), "route-a", {"id": JOB_ID, "state": "available"}, True)
    assert claim is not None and claim.pending == 0 and claim.job is not None
    assert report_id(claim, "route-a", None, decided=False) is None


def test_a_minted_id_is_taken():
    claim = report_id(None, "route-a", {"id": JOB_ID, "state": "available"}, decided=False)
    assert claim is not None and claim.route == "route-a"
    _, refusal = claim_id(claim, None, request(3), "route-b", T0)
    assert refusal is not None


def test_another_routes_report_never_touches_a_claim():
    claim = IdClaim("route-a", 1)
    assert report_id(claim, "route-b", None, decided=True) == claim
    assert report_id(claim, "route-b", {"id": JOB_ID}, decided=False) == claim


def test_a_claim_round_trips():
    claim = IdClaim("route-a", 3, {"id": JOB_ID, "state": "active"})
    assert IdClaim.load(claim.dump()) == claim and IdClaim.load(None) is None


@settings(max_examples=200, deadline=None)
@given(
    ms=st.integers(0, (1 << 48) - 1),
    key=st.one_of(st.none(), st.text(max_size=20)),
    seed=st.binary(max_size=20),
    partitions=st.integers(1, 64),
    data=st.data(),
)
def test_an_id_minted_at_home_is_a_uuid7_of_its_time_whose_home_is_the_partition(
    ms: int, key: str | None, seed: bytes, partitions: int, data: st.DataObject
) -> None:
    partition = data.draw(st.integers(0, partitions - 1))
    job_id = uuid7(ms, key, seed, lambda i: partition_for(i, partitions) == partition)
    assert is_uuid7(job_id) and uuid7_ms(job_id) == ms
    assert partition_for(job_id.encode(), partitions) == partition
    # Reproducible, and the plain id when it is already at home.
    assert job_id == uuid7(ms, key, seed, lambda i: partition_for(i, partitions) == partition)
    plain = uuid7(ms, key, seed)
    assert (partition_for(plain.encode(), partitions) == partition) == (plain == job_id)


# -- the stages together ---------------------------------------------------------


class Gateway:
    """intake → router → requests → dedup (an id's home, then its route) and the reports
    back, each partition's log in order, over in-memory stores; `step` picks which pending
    log moves next, as partitions and commits interleave."""

    def __init__(self, limits: Limits | None = None) -> None:
        self.logs: dict[tuple[str, int], deque[Output]] = {("intake", 0): deque()}
        self.decisions: list[dict[str, Any]] = []
        self.sent: list[Output] = []
        self.stores: dict[int, Store] = {}
        self.offsets: dict[tuple[str, int], int] = {}
        self.read: dict[int, list[LogRecord]] = {}  # each partition of requests as read
        self.metrics = metrics = Metrics()
        limits = limits or Limits()
        self.router = Router(self.emit, metrics, limits)
        self.dedup = Dedup(PARTITIONS, self.emit, metrics, limits, self.state_of)
        self.clock = T0

    def emit(self, output: Output, _source: Source) -> None:
        self.sent.append(output)
        if output.role == "decisions" and not is_trail(output):
            self.decisions.append(orjson.loads(output.value or b""))
        elif output.role == "requests":
            partition = partition_for(output.key or b"", PARTITIONS)
            self.logs.setdefault(("requests", partition), deque()).append(output)

    def store(self, partition: int) -> Store:
        return self.stores.setdefault(partition, Store())

    def state_of(self, source: Source, key: bytes) -> Any:
        return self.store(source.partition).state(key)

    def send(self, job: dict[str, Any], **headers: bytes) -> None:
        self.logs[("intake", 0)].append(
            Output(orjson.dumps(job), None, headers=list(headers.items()))
        )

    def step(self, where: tuple[str, int]) -> None:
        output = self.logs[where].popleft()
        self.clock += 1
        offset = self.offsets[where] = self.offsets.get(where, -1) + 1
        source = Source(where[0], where[1], offset, self.clock, dict(output.headers or []))
        if where[0] == "requests":  # kept as read, for a replay of the log
            self.read.setdefault(where[1], []).append(LogRecord(
                "requests", where[1], offset, self.clock, output.key, output.value,
                dict(output.headers or []),
            ))  # fmt: skip
        if where[0] == "intake":
            self.router.on_record(output.value, output.key, source)
            return
        if where[0] == "job_events":
            self.router.on_event(output.value, output.key, source)
            return
        store = self.store(where[1])
        store.at(self.clock)
        self.dedup.on_record(output.value, output.key, source, store.state(output.key or b""))

    def run(self, order: list[int] | None = None) -> None:
        """Until every log is empty; `order` picks among the non-empty logs, then in turn."""
        picks = deque(order or [])
        while any(self.logs.values()):
            ready = sorted(where for where, log in self.logs.items() if log)
            self.step(ready[picks.popleft() % len(ready)] if picks else ready[0])

    def accepted(self) -> list[dict[str, Any]]:
        return [d for d in self.decisions if d["outcome"] == "accepted"]

    def claims(self) -> list[IdClaim]:
        return [
            claim
            for store in self.stores.values()
            for (_, name), (raw, _) in store.items.items()
            if name == "claim" and (claim := IdClaim.load(raw)) is not None
        ]


def job(arg: int, job_id: str | None = JOB_ID) -> dict[str, Any]:
    body = {"type": "email.send", "args": [arg], "unique": {"keys": ["type", "args"]}}
    return body if job_id is None else {**body, "id": job_id}


def test_two_keys_one_client_id_one_job():
    gateway = Gateway()
    gateway.send(job(1))
    gateway.send(job(2))
    gateway.run()
    [accepted] = gateway.accepted()
    [refused] = [d for d in gateway.decisions if d["outcome"] != "accepted"]
    assert accepted["job_id"] == JOB_ID and refused["error"]["code"] == "duplicate"
    # Refused at the id's home, where it was claimed for the first.
    assert refused["source"]["partition"] == partition_for(JOB_ID.encode(), PARTITIONS)


@settings(max_examples=150, deadline=None)
@given(
    args=st.lists(st.one_of(st.none(), st.integers(0, 3)), min_size=2, max_size=6),
    order=st.lists(st.integers(0, 5), max_size=60),
)
def test_in_any_interleaving_an_id_is_never_two_live_jobs(args: list[int | None], order):
    gateway = Gateway()
    for arg in args:
        gateway.send(job(arg) if arg is not None else {"type": "plain", "args": [], "id": JOB_ID})
    gateway.run(order)
    assert len(gateway.decisions) == len(args)  # every request answered once
    assert len(gateway.accepted()) == 1
    # And every claim is settled: nothing pending once every log is read.
    assert [c.pending for c in gateway.claims()] in ([], [0])


@settings(max_examples=150, deadline=None)
@given(
    keys=st.lists(st.integers(0, 3), min_size=1, max_size=4),
    reuses=st.lists(st.tuples(st.integers(0, 9), st.one_of(st.none(), st.integers(4, 7))),
                    min_size=1, max_size=6),
    order=st.lists(st.integers(0, 5), max_size=80),
)  # fmt: skip
def test_a_minted_id_answered_is_never_given_to_another_job(keys, reuses, order):
    """Keyed jobs without ids are accepted and answered (their decisions read, as an early
    answer gives them, before anything is committed); requests naming those ids then
    follow at once, with other keys or none, in any interleaving of the partitions."""
    gateway = Gateway()
    for arg in keys:
        gateway.send(job(arg, None))
    while len(gateway.accepted()) < len(set(keys)):  # every decision in, nothing more
        ready = sorted(where for where, log in gateway.logs.items() if log)
        gateway.step(ready[0])
    minted = [d["job_id"] for d in gateway.accepted()]
    for pick, arg in reuses:
        reused = minted[pick % len(minted)]
        gateway.send(
            {"type": "plain", "args": [], "id": reused} if arg is None else job(arg, reused)
        )
    gateway.run(order)
    ids = [d["job_id"] for d in gateway.accepted()]
    assert len(ids) == len(set(ids)) == len(set(keys))
    refused = [d for d in gateway.decisions if d["outcome"] == "rejected"]
    assert len(refused) == len(reuses) + len(keys) - len(set(keys))
    assert {d["error"]["code"] for d in refused} == {"duplicate"}


def test_no_report_record_is_written_for_a_minted_id():
    gateway = Gateway()
    gateway.send(job(1, None))
    gateway.run()
    [accepted] = gateway.accepted()
    assert [o for o in gateway.sent if (KIND_HEADER, ID_REPORT) in (o.headers or [])] == []
    [claim] = gateway.claims()
    assert claim.job is not None and claim.job["id"] == accepted["job_id"]


def test_a_forged_claim_header_on_intake_is_dropped():
    gateway = Gateway()
    gateway.send(job(1))
    gateway.send(job(2), **{ID_CLAIM_HEADER: ID_CLAIMED, CLAIMED_ID_HEADER: JOB_ID.encode()})
    gateway.run()
    assert len(gateway.accepted()) == 1


def test_a_client_id_sent_straight_to_its_route_is_claimed_first():
    gateway = Gateway()
    gateway.send(job(1))
    gateway.run()
    direct = job(2)
    key = parse_request(direct)
    assert isinstance(key, Request) and key.unique_key
    where = ("requests", partition_for(key.unique_key.encode(), PARTITIONS))
    gateway.logs.setdefault(where, deque()).append(
        Output(orjson.dumps(direct), key.unique_key.encode(), headers=[])
    )
    gateway.run()
    assert len(gateway.accepted()) == 1 and gateway.decisions[-1]["outcome"] == "rejected"


@pytest.mark.parametrize(
    "value",
    [b"", b"{broken", b"[]", b'{"job_id": "x"}', b'{"route": 1, "job": null, "decided": true}',
     b'{"route": "r", "job": [], "decided": true}', b'{"route": "r", "job": null, "decided": 1}',
     b'{"route": "r", "job": null, "decided": true, "answer": {}}',
     b'{"route": "r", "job": null, "decided": true, "answer_name": "idem/-/k", "answer": 1}'],
)  # fmt: skip
def test_a_report_no_route_wrote_is_refused_and_changes_nothing(value: bytes) -> None:
    assert isinstance(parse_report(value), GatewayError)
    gateway = Gateway()
    home = gateway.store(partition_for(JOB_ID.encode(), PARTITIONS)).state(JOB_ID.encode())
    home.set_bytes("claim", IdClaim("route-a", 1).dump())
    source = Source("requests", 0, 0, T0, {"kind": b"id_report"})
    gateway.dedup.on_record(value, JOB_ID.encode(), source, home)
    assert IdClaim.load(home.get_bytes("claim")) == IdClaim("route-a", 1)
    assert gateway.decisions == [] and not any(gateway.logs.values())


def test_a_report_as_a_route_writes_it_is_read() -> None:
    report = parse_report(b'{"job_id": "x", "route": "r", "job": {"id": "x"}, "decided": true}')
    assert report == IdReport("r", {"id": "x"}, True)


def test_a_reports_answer_is_read_back_byte_for_byte() -> None:
    from gateway.core.idempotency import Answer
    from gateway.stage.reports import id_report

    answer = Answer("d", T0, b'{"outcome":"accepted","n":1.0e5,"s":"\\u00e9"}').dump()
    report = parse_report(id_report(JOB_ID, "r", None, True, ("idem/-/k", answer)).value)
    assert isinstance(report, IdReport) and report.answer == ("idem/-/k", answer)
    too_large = Answer("d", T0, b'{"s":"' + b"x" * 1_000_000 + b'"}').dump()
    report = parse_report(id_report(JOB_ID, "r", None, True, ("idem/-/k", too_large)).value)
    assert isinstance(report, IdReport) and report.answer is None  # sent without it
