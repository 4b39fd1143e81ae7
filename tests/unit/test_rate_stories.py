"""Rate limits over every stage (router, a rate key's home, the jobs' routes) and in-memory
stores: claims from fetch (sent to the home) and from a worker straight at a job's route
(sent on to the home), permits applied, given back when a job leaves active or at once
when a claim does not apply, in any interleaving of the partitions' logs."""

from __future__ import annotations

from collections import deque
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway import wire
from gateway.audit.explain import explain_record
from gateway.core.rates import RateState
from gateway.core.times import format_rfc3339
from gateway.partitioner import partition_for
from gateway.stage.records import Output
from gateway.stage.trail import JOB
from tests.unit.test_ids import PARTITIONS, Gateway

KEY = "queue:rl"
HOME = wire.rate_home(KEY)


class Story(Gateway):
    def __init__(self) -> None:
        super().__init__()
        self.asked = 0

    def enqueue(self, n: int, rate_limit: dict[str, Any]) -> list[str]:
        for i in range(n):
            self.send({"type": f"rl.job_{i}", "args": [i], "queue": "rl",
                       "options": {"rate_limit": rate_limit}})  # fmt: skip
        self.run()
        return [d["job_id"] for d in self.accepted()][-n:]

    def job(self, job_id: str) -> dict[str, Any]:
        for store in self.stores.values():
            for (_, name), (raw, _) in store.items.items():
                if name == JOB + job_id:
                    return orjson.loads(raw)  # type: ignore[no-any-return]
        raise KeyError(job_id)

    def claim(self, job_id: str, straight: bool = False) -> str:
        """A claim as fetch sends it (to the key's home), or as a worker sends it on
        job_events (to the job's route); its correlation id, to find its answer."""
        self.asked += 1
        correlation = f"c{self.asked}"
        body: dict[str, Any] = {"job_id": job_id, "type": "job.started", "claim_id": correlation}
        headers = [(wire.REPLY_TO_HEADER, b"replies"), (wire.CORRELATION_ID_HEADER,
                                                        correlation.encode())]  # fmt: skip
        if straight:
            self.logs.setdefault(("job_events", 0), deque()).append(
                Output(orjson.dumps(body), job_id.encode(), headers=headers)
            )
        else:
            body["rate_limit"] = self.job(job_id)["rate_limit"]
            where = ("requests", partition_for(HOME, PARTITIONS))
            self.logs.setdefault(where, deque()).append(Output(
                orjson.dumps(body), HOME, headers=[(wire.KIND_HEADER, wire.RATE), *headers]
            ))  # fmt: skip
        return correlation

    def event(self, job_id: str, kind: str) -> None:
        body = {"job_id": job_id, "type": kind}
        self.logs.setdefault(("job_events", 0), deque()).append(
            Output(orjson.dumps(body), job_id.encode())
        )

    def answer(self, correlation: str) -> dict[str, Any]:
        [reply] = [
            orjson.loads(o.value or b"") for o in self.sent
            if o.topic == "replies" and dict(o.headers or []).get(wire.CORRELATION_ID_HEADER)
            == correlation.encode()
        ]  # fmt: skip
        return reply  # type: ignore[no-any-return]

    def home(self) -> RateState | None:
        store = self.store(partition_for(HOME, PARTITIONS))
        raw = store.items.get((HOME, "rate"))
        if raw is None or (raw[1] is not None and raw[1] <= store.high_water_ms):
            return None
        return RateState.load(raw[0])

    def trail(self) -> list[dict[str, Any]]:
        return [orjson.loads(o.value or b"") for o in self.sent if o.role == "decisions"]


def test_the_conformance_sequence_one_start_per_second() -> None:
    story = Story()
    jobs = story.enqueue(3, {"max_per_second": 1})
    first = story.claim(jobs[0])
    story.run()
    assert story.answer(first)["outcome"] == "applied"
    assert story.job(jobs[0])["state"] == "active"
    assert story.job(jobs[0])["rate_permit"]["key"] == KEY
    second = story.claim(jobs[1])
    story.run()
    refused = story.answer(second)
    assert refused["outcome"] == "refused" and refused["error"]["code"] == "rate_limited"
    assert story.job(jobs[1])["state"] == "available"
    # Explain tells why, from the home's audit record.
    [told] = [r for r in story.trail() if r.get("kind") == "rate"
              and r["what"]["rate"].get("outcome") == "refused"]  # fmt: skip
    line = explain_record(told).reason[0]
    assert "rate_limited" in line and KEY in line and "1 of 1" in line and "next permit" in line
    story.clock += 1500
    third = story.claim(jobs[1])
    story.run()
    assert story.answer(third)["outcome"] == "applied"


def test_a_worker_s_own_claim_goes_through_the_home() -> None:
    story = Story()
    jobs = story.enqueue(2, {"key": "k2", "concurrency": 1})
    home = wire.rate_home("k2")
    first = story.claim(jobs[0], straight=True)
    story.run()
    assert story.answer(first)["outcome"] == "applied"
    second = story.claim(jobs[1], straight=True)
    story.run()
    assert story.answer(second)["error"]["code"] == "rate_limited"
    # Acked: the permit goes back, and the key's home holds nothing: the key is deleted.
    story.event(jobs[0], "job.completed")
    story.run()
    assert "rate_permit" not in story.job(jobs[0])
    store = story.store(partition_for(home, PARTITIONS))
    assert (home, "rate") not in store.items
    third = story.claim(jobs[1], straight=True)
    story.run()
    assert story.answer(third)["outcome"] == "applied"


def test_a_permit_the_claim_does_not_use_goes_back_unused() -> None:
    story = Story()
    [job] = story.enqueue(1, {"key": "queue:rl", "concurrency": 2, "rate": 5, "period": "second"})
    first, again = story.claim(job), story.claim(job)
    story.run()
    answers = {story.answer(first)["outcome"], story.answer(again)["outcome"]}
    assert answers == {"applied", "ignored"}  # the second found it active already
    state = story.home()
    assert state is not None and len(state.holders) == 1 and len(state.starts) == 1


def test_a_forged_permit_is_dropped_by_the_router() -> None:
    story = Story()
    [job] = story.enqueue(1, {"key": "queue:rl", "concurrency": 1})
    body = {"job_id": job, "type": "job.started"}
    forged = [(wire.RATE_PERMIT_HEADER, b"0-1"), (wire.RATE_KEY_HEADER, KEY.encode()),
              (wire.RATE_PERMIT_AT_HEADER, b"1")]  # fmt: skip
    story.logs.setdefault(("job_events", 0), deque()).append(
        Output(orjson.dumps(body), job.encode(), headers=forged)
    )
    story.run()
    state = story.home()  # the claim went home, and was granted there
    assert state is not None and state.holders[0][0] != "0-1"


def test_a_bad_claim_or_report_at_the_home_never_stops_it() -> None:
    story = Story()
    where = ("requests", partition_for(HOME, PARTITIONS))
    bad = [(b"{", wire.RATE), (b'{"job_id":"x","type":"job.started"}', wire.RATE),
           (b"[]", wire.RATE_REPORT), (b'{"permit":1}', wire.RATE_REPORT)]  # fmt: skip
    for value, kind in bad:
        story.logs.setdefault(where, deque()).append(
            Output(value, HOME, headers=[(wire.KIND_HEADER, kind)])
        )
    story.run()
    jobs = story.enqueue(1, {"max_per_second": 1})
    answer = story.claim(jobs[0])
    story.run()
    assert story.answer(answer)["outcome"] == "applied"


def command(story: Story, key: str, override: dict[str, Any] | None, raw: bytes = b"") -> str:
    """An operator's override sent to the key's home, as PUT (or DELETE) sends it."""
    story.asked += 1
    correlation = f"c{story.asked}"
    home = wire.rate_home(key)
    value = raw or orjson.dumps({"key": key, "override": override})
    story.logs.setdefault(("requests", partition_for(home, PARTITIONS)), deque()).append(
        Output(value, home, headers=[
            (wire.KIND_HEADER, wire.RATE_COMMAND), (wire.REPLY_TO_HEADER, b"replies"),
            (wire.CORRELATION_ID_HEADER, correlation.encode()),
        ])
    )  # fmt: skip
    story.run()
    return correlation


def test_an_override_is_decided_at_the_home_and_ends_by_its_clock() -> None:
    story = Story()
    jobs = story.enqueue(2, {"key": "queue:rl", "concurrency": 2})
    until = format_rfc3339(story.clock + 5000)
    set_it = story.answer(command(story, KEY, {"concurrency": 0, "expires_at": until}))
    assert set_it["outcome"] == "applied"
    assert set_it["rate_limit"]["override"]["concurrency"] == 0
    refused = story.claim(jobs[0])
    story.run()
    assert story.answer(refused)["error"]["code"] == "rate_limited"
    [told] = [r for r in story.trail() if r.get("kind") == "rate"
              and r["what"]["rate"].get("outcome") == "refused"]  # fmt: skip
    assert "under the override concurrency 0 until" in explain_record(told).reason[0]
    story.clock += 5000  # past expires_at by the home's clock: the job's own limit again
    granted = story.claim(jobs[0])
    story.run()
    assert story.answer(granted)["outcome"] == "applied"
    # Set with no end, then cleared.
    assert story.answer(command(story, KEY, {"concurrency": 1}))["outcome"] == "applied"
    second = story.claim(jobs[1])
    story.run()
    assert story.answer(second)["error"]["code"] == "rate_limited"
    cleared = story.answer(command(story, KEY, None))
    assert cleared["outcome"] == "applied" and cleared["rate_limit"]["override"] is None
    lines = [explain_record(r).reason[0] for r in story.trail() if r.get("kind") == "rate"
             and "cleared" in r["what"]["rate"]]  # fmt: skip
    assert any("cleared" in line for line in lines)
    third = story.claim(jobs[1])
    story.run()
    assert story.answer(third)["outcome"] == "applied"


def test_a_bad_override_command_is_answered_and_never_stops_the_home() -> None:
    story = Story()
    bad = [b"{", b"[]", b'{"key": "k"}', b'{"key": "k", "override": {"concurrency": -1}}',
           b'{"key": "other", "override": {"concurrency": 1}}']  # fmt: skip
    for raw in bad:
        answer = story.answer(command(story, "k", None, raw))
        assert answer["outcome"] == "invalid", raw
    jobs = story.enqueue(1, {"max_per_second": 1})
    claimed = story.claim(jobs[0])
    story.run()
    assert story.answer(claimed)["outcome"] == "applied"


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.sampled_from(["claim", "straight", "ack",
                                                              "fail", "wait"])),
                max_size=40),
       st.lists(st.integers(0, 7), max_size=200))  # fmt: skip
def test_in_any_interleaving_no_more_than_the_limits(
    steps: list[tuple[int, str]], order: list[int]
) -> None:
    story = Story()
    jobs = story.enqueue(6, {"key": "queue:rl", "concurrency": 2, "rate": 3, "period": "second"})
    for index, action in steps:
        job_id = jobs[index]
        if action in ("claim", "straight"):
            story.claim(job_id, straight=action == "straight")
        elif action == "ack":
            story.event(job_id, "job.completed")
        elif action == "fail":
            story.event(job_id, "job.failed")
        else:
            story.clock += 400
        story.run(order)
    story.run()
    # Every permit a job holds is one its home holds, and no more run than the limit.
    active = [j for j in map(story.job, jobs) if j["state"] == "active"]
    assert len(active) <= 2
    state = story.home()
    held = set() if state is None else {h[0] for h in state.holders}
    assert {j["rate_permit"]["id"] for j in active} == held
    # In the home's own records, no second holds more than 3 starts of permits used.
    granted = [r for r in story.trail() if r.get("kind") == "rate"
               and r["what"]["rate"].get("outcome") == "granted"]  # fmt: skip
    unused = {r["what"]["rate"]["released"] for r in story.trail() if r.get("kind") == "rate"
              and r["what"]["rate"].get("unused")}  # fmt: skip
    starts = sorted(int(r["what"]["rate"]["permit_at"]) for r in granted
                    if r["what"]["rate"]["permit"] not in unused)  # fmt: skip
    for i in range(len(starts) - 3):
        assert starts[i + 3] - starts[i] >= 1000


def test_a_claim_of_a_finished_job_takes_no_permit() -> None:
    story = Story()
    [job] = story.enqueue(1, {"key": "queue:rl", "concurrency": 1})
    story.claim(job, straight=True)
    story.run()
    story.event(job, "job.completed")
    story.run()
    assert story.job(job)["state"] == "completed"
    late = story.claim(job, straight=True)
    story.run()
    assert story.answer(late)["outcome"] == "refused"
    assert story.answer(late)["error"]["code"] == "invalid_request"  # completed, a terminal state
    assert story.home() is None  # nothing held, nothing counted
