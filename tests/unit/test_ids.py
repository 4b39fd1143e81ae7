"""One authority for job ids: the claim rules (core/ids.py) and the id stage, router and dedup
stage together over in-memory logs, in any interleaving."""

from __future__ import annotations

from collections import deque
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.audit.replay import Store
from gateway.core import Outcome, Request, parse_request
from gateway.core.ids import IdClaim, claim_id, report_id
from gateway.partitioner import partition_for
from gateway.processor.dedup import Dedup
from gateway.processor.ids import IdStage
from gateway.processor.metrics import Metrics
from gateway.processor.parsing import Limits
from gateway.processor.records import Output, Source
from gateway.processor.router import Router
from gateway.wire import ID_CLAIM_HEADER, ID_CLAIMED

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
    claim, refusal = claim_id(None, request(1), "route-a", T0)
    assert refusal is None and claim == IdClaim("route-a", pending=1)


def test_the_route_that_holds_an_id_may_send_more_requests_with_it():
    claim, refusal = claim_id(IdClaim("route-a", 0, {"id": JOB_ID}), request(1), "route-a", T0)
    assert refusal is None and claim is not None and claim.pending == 1


def test_another_route_is_refused_as_a_taken_id_naming_the_holder():
    holder = {"id": JOB_ID, "type": "email.send", "queue": "default", "state": "active",
              "created_at": "2026-01-01T00:00:00.000Z"}  # fmt: skip
    claim = IdClaim("route-a", 0, holder)
    after, refusal = claim_id(claim, request(2), "route-b", T0)
    assert after == claim and refusal is not None
    assert refusal.outcome is Outcome.REJECTED and refusal.error is not None
    assert refusal.error.code == "duplicate" and "active" in refusal.error.message
    assert refusal.existing is not None and refusal.existing.job_id == JOB_ID


def test_a_claim_is_released_when_no_decision_is_pending_and_no_job_is_held():
    claim = IdClaim("route-a", pending=2)
    claim = report_id(claim, "route-a", None, decided=True)
    assert claim == IdClaim("route-a", 1)
    assert report_id(claim, "route-a", None, decided=True) is None


def test_a_held_job_keeps_the_claim_until_it_leaves():
    claim = report_id(IdClaim("route-a", 1), "route-a", {"id": JOB_ID, "state": "available"}, True)
    assert claim is not None and claim.pending == 0 and claim.job is not None
    assert report_id(claim, "route-a", None, decided=False) is None


def test_a_minted_id_reported_by_its_route_is_taken():
    claim = report_id(None, "route-a", {"id": JOB_ID, "state": "available"}, decided=False)
    assert claim is not None and claim.route == "route-a"
    _, refusal = claim_id(claim, request(3), "route-b", T0)
    assert refusal is not None


def test_another_routes_report_never_touches_a_claim():
    claim = IdClaim("route-a", 1)
    assert report_id(claim, "route-b", None, decided=True) == claim
    assert report_id(claim, "route-b", {"id": JOB_ID}, decided=False) == claim


def test_a_claim_round_trips():
    claim = IdClaim("route-a", 3, {"id": JOB_ID, "state": "active"})
    assert IdClaim.load(claim.dump()) == claim and IdClaim.load(None) is None


# -- the stages together ---------------------------------------------------------


class Gateway:
    """intake → router → job_ids → id stage → requests → dedup, and the reports back, each
    log in order, over in-memory stores; `step` picks which pending log moves next."""

    def __init__(self) -> None:
        self.logs: dict[str, deque[tuple[Output, int]]] = {
            "intake": deque(), "job_ids": deque(), "requests": deque(),
        }  # fmt: skip
        self.decisions: list[dict[str, Any]] = []
        self.stores: dict[tuple[str, int], Store] = {}
        self.offsets: dict[str, int] = {}
        metrics, limits = Metrics(), Limits()
        self.router = Router(self.emit, metrics, limits)
        self.ids = IdStage(PARTITIONS, self.emit, metrics, limits)
        self.dedup = Dedup(PARTITIONS, self.emit, metrics, limits, self.state_of)
        self.clock = T0

    def emit(self, output: Output, _source: Source) -> None:
        if output.role == "decisions" and output.value is not None:
            self.decisions.append(orjson.loads(output.value))
        elif output.role in self.logs:
            partition = partition_for(output.key or b"", PARTITIONS) if output.key else 0
            self.logs[output.role].append((output, partition))

    def store(self, topic: str, partition: int) -> Store:
        return self.stores.setdefault((topic, partition), Store())

    def state_of(self, source: Source, key: bytes) -> Any:
        return self.store(source.topic, source.partition).state(key)

    def send(self, job: dict[str, Any], **headers: bytes) -> None:
        self.logs["intake"].append(
            (Output(orjson.dumps(job), None, headers=list(headers.items())), 0)
        )

    def step(self, topic: str) -> None:
        output, partition = self.logs[topic].popleft()
        self.clock += 1
        offset = self.offsets[topic] = self.offsets.get(topic, -1) + 1
        source = Source(topic, partition, offset, self.clock, dict(output.headers or []))
        if topic == "intake":
            self.router.on_record(output.value, output.key, source)
            return
        store = self.store(topic, partition)
        store.at(self.clock)
        stage = self.ids if topic == "job_ids" else self.dedup
        stage.on_record(output.value, output.key, source, store.state(output.key or b""))

    def run(self, order: list[int] | None = None) -> None:
        """Until every log is empty; `order` picks among the non-empty logs, then in turn."""
        picks = deque(order or [])
        while any(self.logs.values()):
            ready = [t for t, log in self.logs.items() if log]
            self.step(ready[picks.popleft() % len(ready)] if picks else ready[0])

    def accepted(self) -> list[dict[str, Any]]:
        return [d for d in self.decisions if d["outcome"] == "accepted"]


def job(arg: int, job_id: str = JOB_ID) -> dict[str, Any]:
    return {"type": "email.send", "args": [arg], "id": job_id, "unique": {"keys": ["type", "args"]}}


def test_two_keys_one_client_id_one_job():
    gateway = Gateway()
    gateway.send(job(1))
    gateway.send(job(2))
    gateway.run()
    [accepted] = gateway.accepted()
    [refused] = [d for d in gateway.decisions if d["outcome"] != "accepted"]
    assert accepted["job_id"] == JOB_ID and refused["error"]["code"] == "duplicate"
    assert refused["source"]["topic"] == "job_ids"


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
    claims = [
        IdClaim.load(s.state(JOB_ID.encode()).get_bytes("claim"))
        for (topic, _), s in gateway.stores.items()
        if topic == "job_ids"
    ]
    assert [c.pending for c in claims if c is not None] == [0]


def test_a_forged_claim_header_on_intake_is_dropped():
    gateway = Gateway()
    gateway.send(job(1))
    gateway.send(job(2), **{ID_CLAIM_HEADER: ID_CLAIMED})
    gateway.run()
    assert len(gateway.accepted()) == 1


def test_a_client_id_sent_straight_to_requests_is_claimed_first():
    gateway = Gateway()
    gateway.send(job(1))
    gateway.run()
    direct = job(2)
    key = parse_request(direct)
    assert isinstance(key, Request) and key.unique_key
    gateway.logs["requests"].append(
        (Output(orjson.dumps(direct), key.unique_key.encode(), headers=[]),
         partition_for(key.unique_key.encode(), PARTITIONS))
    )  # fmt: skip
    gateway.run()
    assert len(gateway.accepted()) == 1 and gateway.decisions[-1]["outcome"] == "rejected"
