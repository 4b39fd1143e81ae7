"""Idempotency keys: the rules (core/idempotency.py), and the router and the dedup stage (the
key's home, then the request's route) together over in-memory logs, in any interleaving."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.audit.account import Trail
from gateway.audit.explain import explain_record
from gateway.audit.findings import ReplayReport
from gateway.audit.log import LogRecord
from gateway.audit.replay import PartitionReplay
from gateway.audit.trail_store import TrailStore
from gateway.audit.verify import Layout
from gateway.core import GatewayError
from gateway.core.idempotency import (
    IDEMPOTENCY_KEY_REUSED,
    MAX_KEY_CHARS,
    Admission,
    Admitted,
    Answer,
    Item,
    admit,
    answered,
    body_digest,
    key_problem,
)
from gateway.processor.metrics import Metrics
from gateway.stage.dedup import Dedup
from gateway.stage.parsing import Limits
from gateway.stage.records import Output
from gateway.wire import (
    CORRELATION_ID_HEADER,
    IDEMPOTENCY_CHECKED_HEADER,
    IDEMPOTENCY_ITEM_HEADER,
    IDEMPOTENCY_KEY_HEADER,
    REPLY_TO_HEADER,
)
from tests.unit.test_ids import PARTITIONS, Gateway

T0 = 1_770_000_000_000
DAY = 24 * 3600 * 1000

# -- the rules ----------------------------------------------------------------


@settings(max_examples=200)
@given(st.text(min_size=1, max_size=MAX_KEY_CHARS))
def test_a_key_is_1_to_256_printable_characters(key: str) -> None:
    problem = key_problem(key)
    assert (problem is None) == key.isprintable()
    if problem is not None:
        assert problem.code == "invalid_request" and "printable" in problem.message


@pytest.mark.parametrize("key", ["", "k" * (MAX_KEY_CHARS + 1), "a\nb", "tab\there", 7, None])
def test_a_bad_key_is_refused_naming_it(key: object) -> None:
    problem = key_problem(key, "the Idempotency-Key header")
    assert isinstance(problem, GatewayError) and problem.code == "invalid_request"
    assert "Idempotency-Key" in problem.message


bodies = st.dictionaries(
    st.text(max_size=5).filter(lambda k: k != "request_id"),
    st.one_of(st.integers(), st.text(max_size=5), st.none()),
    max_size=5,
)


@settings(max_examples=200)
@given(body=bodies, one=st.text(max_size=8), other=st.text(max_size=8))
def test_the_body_compared_is_the_json_without_its_request_id(body, one, other) -> None:
    shuffled = dict(reversed(list(body.items())))
    assert body_digest({**body, "request_id": one}) == body_digest(
        {"request_id": other, **shuffled}
    )


@settings(max_examples=300)
@given(
    attempts=st.lists(
        st.tuples(st.integers(0, 2), st.sampled_from(["d1", "d2"]), st.integers(0, 3 * DAY)),
        min_size=1, max_size=12,
    ),
    count=st.one_of(st.none(), st.integers(1, 3)),
)  # fmt: skip
def test_within_its_window_a_key_admits_each_item_with_one_body_only(attempts, count) -> None:
    """Whatever the order: an item admitted with a digest within the key's window is
    admitted again with that digest only; the window counts from the key's first admission;
    a request of another size than the key's is refused."""
    before: Admission | None = None
    first: dict[int, str] = {}
    started: int | None = None
    now = T0
    for index, digest, step in attempts:
        now += step
        item = Item(0, None) if count is None else Item(index % count, count)
        verdict = admit("k", before, item, digest, now, DAY)
        if started is None or started + DAY <= now:
            first, started = {}, now  # past the window: as new
        expected = first.setdefault(item.index, digest)
        if expected == digest:
            assert isinstance(verdict, Admitted)
            before = verdict.admission
            assert before.until_ms == started + DAY
        else:
            assert isinstance(verdict, GatewayError)
            assert verdict.code == IDEMPOTENCY_KEY_REUSED and "'k'" in verdict.message
    other = Item(0, None if count else 1)
    refused = admit("k", before, other, "d1", now, DAY)
    assert isinstance(refused, GatewayError) and refused.code == IDEMPOTENCY_KEY_REUSED


@settings(max_examples=200)
@given(
    record=st.recursive(
        st.one_of(
            st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=False), st.text(), st.booleans()
        ),
        lambda inner: (
            st.dictionaries(st.text(max_size=4), inner, max_size=3) | st.lists(inner, max_size=3)
        ),
        max_leaves=10,
    ),
    replays=st.integers(0, 1000),
)
def test_an_answer_keeps_the_record_byte_for_byte(record: Any, replays: int) -> None:
    raw = orjson.dumps({"outcome": "accepted", "r": record})
    answer = Answer("d", T0 + DAY, raw, replays)
    loaded = Answer.load(answer.dump())
    assert loaded == answer and loaded is not None and loaded.record == raw
    assert answered(loaded, "d", T0) == answer
    assert answered(loaded, "e", T0) is None and answered(loaded, "d", T0 + DAY) is None


def test_an_item_is_i_of_n() -> None:
    assert Item.parse(None) == Item.parse("") == Item()
    assert Item.parse("2/3") == Item(2, 3) and Item(2, 3).dump() == "2/3"
    for bad in ("3/3", "x/3", "1", "-1/2"):
        assert isinstance(Item.parse(bad), GatewayError)


# -- the stages together ---------------------------------------------------------


def keyed(arg: int) -> dict[str, Any]:
    return {"type": "email.send", "args": [arg], "unique": {"keys": ["type", "args"]}}


def plain(arg: int) -> dict[str, Any]:
    return {"type": "report", "args": [arg]}


class Idempotent(Gateway):
    def __init__(self, limits: Limits | None = None) -> None:
        super().__init__()
        if limits is not None:
            self.metrics = Metrics()
            self.dedup = Dedup(PARTITIONS, self.emit, self.metrics, limits, self.state_of)
        self.asked = 0

    def ask(self, job: dict[str, Any], key: str, item: str | None = None, **headers: bytes) -> str:
        """Send a request with an idempotency key, its own request id and reply address."""
        self.asked += 1
        correlation = f"c{self.asked}"
        extra = {IDEMPOTENCY_ITEM_HEADER: item.encode()} if item else {}
        self.send(
            {**job, "request_id": f"r{self.asked}"},
            **{IDEMPOTENCY_KEY_HEADER: key.encode(), REPLY_TO_HEADER: b"replies",
               CORRELATION_ID_HEADER: correlation.encode(), **extra, **headers},
        )  # fmt: skip
        return correlation

    def replies(self) -> dict[str, bytes]:
        return {
            dict(o.headers or [])[CORRELATION_ID_HEADER].decode(): o.value or b""
            for o in self.sent
            if o.topic == "replies"
        }

    def jobs(self) -> list[Output]:
        return [o for o in self.sent if o.role == "jobs"]


@pytest.mark.parametrize(
    "job", [keyed(1), plain(1), {**plain(1), "id": "019b0a4c-1f00-7000-8000-0000000000aa"}]
)
def test_a_retry_gets_the_original_answer_byte_for_byte_and_no_new_job(job) -> None:
    gateway = Idempotent()
    first = gateway.ask(job, "order-1")
    gateway.run()
    again = gateway.ask(job, "order-1")
    gateway.run()
    replies = gateway.replies()
    assert replies[first] == replies[again]
    assert orjson.loads(replies[first])["outcome"] == "accepted"
    assert len(gateway.jobs()) == 1 and len(gateway.accepted()) == 1
    # The retry leaves an audit record of its own: the answer it was given again.
    trail = [orjson.loads(o.value or b"") for o in gateway.sent if o.role == "decisions"]
    [again_record] = [t for t in trail if (t.get("what") or {}).get("answered_again")]
    assert again_record["what"] == {
        "idempotency_key": "order-1", "answered_again": 1, "answer_of": "r1",
    }  # fmt: skip
    told = explain_record(again_record).reason[0]
    assert told.startswith("answered again: idempotency key 'order-1' was answered for request r1")
    # And the home's, once: what the key admitted and where it went.
    [admitted] = [t for t in trail if (t.get("what") or {}).get("item", 0) is None]
    assert admitted["kind"] == "forwarded" and admitted["what"]["idempotency_key"] == "order-1"
    counted = gateway.metrics.registry.get_sample_value
    for result, count in (("admitted", 2), ("answered_again", 1)):
        assert counted("gateway_idempotent_requests_total", {"result": result}) == count


def test_a_rejected_duplicate_is_answered_again_as_it_was() -> None:
    gateway = Idempotent()
    gateway.send(keyed(1))
    gateway.run()
    first = gateway.ask({**keyed(1), "meta": {"n": 1}}, "again")
    gateway.run()
    again = gateway.ask({**keyed(1), "meta": {"n": 1}}, "again")
    gateway.run()
    replies = gateway.replies()
    assert replies[first] == replies[again]
    assert orjson.loads(replies[first])["outcome"] == "rejected"


@pytest.mark.parametrize("other", [keyed(2), plain(2), {**keyed(1), "meta": {"x": 1}}])
def test_the_same_key_with_another_body_is_refused_naming_it(other) -> None:
    gateway = Idempotent()
    gateway.ask(keyed(1), "order-1")
    gateway.run()
    refused = gateway.ask(other, "order-1")
    gateway.run()
    reply = orjson.loads(gateway.replies()[refused])
    assert reply["outcome"] == "invalid" and reply["error"]["code"] == IDEMPOTENCY_KEY_REUSED
    assert "order-1" in reply["error"]["message"]
    assert len(gateway.jobs()) == 1
    counted = gateway.metrics.registry.get_sample_value
    assert counted("gateway_idempotent_requests_total", {"result": "reused"}) == 1


def test_after_its_window_a_key_is_new() -> None:
    gateway = Idempotent(Limits(idempotency_ms=1000))
    gateway.ask(keyed(1), "k")
    gateway.run()
    gateway.clock += 1000
    later = gateway.ask(keyed(2), "k")
    gateway.run()
    assert orjson.loads(gateway.replies()[later])["outcome"] == "accepted"
    assert len(gateway.jobs()) == 2


def test_a_batch_is_answered_as_a_whole_and_another_batch_under_its_key_refused() -> None:
    gateway = Idempotent()
    batch = [keyed(1), plain(2), keyed(3)]
    first = [gateway.ask(job, "b", f"{i}/3") for i, job in enumerate(batch)]
    gateway.run()
    again = [gateway.ask(job, "b", f"{i}/3") for i, job in enumerate(batch)]
    gateway.run()
    replies = gateway.replies()
    assert [replies[c] for c in first] == [replies[c] for c in again]
    assert len(gateway.jobs()) == 3
    changed = [
        gateway.ask(job, "b", f"{i}/3") for i, job in enumerate([keyed(1), plain(9), keyed(3)])
    ]
    smaller = [gateway.ask(job, "b", f"{i}/2") for i, job in enumerate(batch[:2])]
    single = gateway.ask(keyed(1), "b")
    gateway.run()
    replies = gateway.replies()
    outcomes = [orjson.loads(replies[c])["outcome"] for c in changed]
    assert outcomes == ["accepted", "invalid", "accepted"]  # the unchanged: their first answers
    assert replies[changed[0]] == replies[first[0]]
    for c in [*smaller, single]:
        assert orjson.loads(replies[c])["error"]["code"] == IDEMPOTENCY_KEY_REUSED
    assert len(gateway.jobs()) == 3


def test_a_forged_checked_mark_on_intake_is_dropped() -> None:
    gateway = Idempotent()
    gateway.ask(keyed(1), "k")
    gateway.run()
    forged = gateway.ask(keyed(2), "k", None, **{IDEMPOTENCY_CHECKED_HEADER: b"whatever"})
    gateway.run()
    assert orjson.loads(gateway.replies()[forged])["error"]["code"] == IDEMPOTENCY_KEY_REUSED


def test_a_bad_key_on_a_raw_request_is_refused() -> None:
    gateway = Idempotent()
    refused = gateway.ask(keyed(1), "k" * (MAX_KEY_CHARS + 1))
    gateway.run()
    reply = orjson.loads(gateway.replies()[refused])
    assert reply["outcome"] == "invalid" and "256" in reply["error"]["message"]
    assert gateway.jobs() == []


@settings(max_examples=100, deadline=None)
@given(
    attempts=st.lists(st.sampled_from(["a", "b"]), min_size=2, max_size=6),
    order=st.lists(st.integers(0, 5), max_size=80),
)
def test_in_any_interleaving_a_key_makes_one_job_and_one_answer(attempts, order) -> None:
    """Attempts of one key, with one body or another, all in flight together, the
    partitions moving in any order: the first body the key's home admits makes one job,
    every attempt with it gets the same bytes, every other attempt is refused."""
    bodies = {"a": plain(1), "b": keyed(2)}
    gateway = Idempotent()
    sent = [(gateway.ask(bodies[a], "k"), a) for a in attempts]
    gateway.run(order)
    replies = gateway.replies()
    assert len(gateway.jobs()) == 1
    made = orjson.loads(gateway.jobs()[0].value or b"")
    winner = "a" if made["type"] == "report" else "b"
    answers = {replies[c] for c, a in sent if a == winner}
    assert len(answers) == 1
    for c, a in sent:
        if a != winner:
            assert orjson.loads(replies[c])["error"]["code"] == IDEMPOTENCY_KEY_REUSED


# -- replay --------------------------------------------------------------------------


def test_a_log_with_idempotency_keys_replays_identically() -> None:
    gateway = Idempotent()  # Gateway.read keeps requests as read
    for attempt in range(3):
        gateway.ask(keyed(1), "single")
        gateway.ask(plain(2), "plain")
        gateway.ask(keyed(3) if attempt == 0 else plain(3), "reused")
        for i, job in enumerate([keyed(4), plain(5)]):
            gateway.ask(job, "batch", f"{i}/2")
        gateway.run([attempt, attempt + 1])
    trail: dict[int, list[LogRecord]] = {}
    for output in gateway.sent:
        if output.role == "decisions" and output.partition is not None:
            part = trail.setdefault(output.partition, [])
            part.append(LogRecord("decisions", output.partition, len(part), 0, output.key,
                                  output.value))  # fmt: skip
    report = ReplayReport()
    kinds = set()
    for partition, records in sorted(gateway.read.items()):
        decisions = trail.get(partition, [])
        kinds |= {orjson.loads(d.value or b"")["kind"] for d in decisions}
        with tempfile.TemporaryDirectory() as root:
            store = TrailStore(Path(root) / "replay")
            try:
                mine = Trail(partition, Layout("requests", "intake", PARTITIONS), report)
                PartitionReplay(PARTITIONS, Limits(), store, report).run(records, mine, decisions)
            finally:
                store.close()
    assert (report.differences, report.findings) == ([], [])
    assert report.different == 0 and not report.unverifiable and report.verified > 10
    assert report.verified + report.rerouted == report.records  # every record accounted for
    assert {"request", "forwarded"} <= kinds
