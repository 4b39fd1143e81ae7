"""A queue's rate limit (core/queue_rates.py) over every stage: set on every partition by a
command, it holds every job of the queue beside the job's own rate key; a claim takes a
permit of each key, one home after the other, and gives back the ones it took when the
next refuses; a job that ends gives back both."""

from __future__ import annotations

from collections import deque
from typing import Any

import orjson
import pytest

from gateway import wire
from gateway.core.errors import Invalid
from gateway.core.queue_rates import (
    needed,
    parse_queue_limits,
    parse_queue_rate_command,
    queue_rate_command,
)
from gateway.core.rate_policy import RateLimit
from gateway.core.rates import RateState
from gateway.partitioner import partition_for
from gateway.stage.records import Output
from tests.unit.test_ids import PARTITIONS
from tests.unit.test_rate_stories import Story

QUEUE_KEY = "queue:rl"


def set_limit(story: Story, limits: dict[str, Any] | None, at: int = 1) -> None:
    policy = None if limits is None else parse_queue_limits(limits, "rl")
    value = queue_rate_command("rl", policy, (at, "v"))
    for partition in range(PARTITIONS):
        story.logs.setdefault(("requests", partition), deque()).append(Output(
            value, wire.queue_key("rl"), headers=[(wire.KIND_HEADER, wire.QUEUE_RATE_COMMAND)]
        ))  # fmt: skip
    story.run()


def home(story: Story, key: str) -> RateState | None:
    at = wire.rate_home(key)
    raw = story.store(partition_for(at, PARTITIONS)).items.get((at, "rate"))
    return None if raw is None else RateState.load(raw[0])


def test_the_keys_a_claim_needs() -> None:
    own, queue = RateLimit("own", concurrency=5), RateLimit(QUEUE_KEY, concurrency=1)
    assert needed(None, None) == () and needed(own, None) == (own,)
    assert needed(own, queue) == (queue, own) and needed(None, queue) == (queue,)
    # A job whose own key is its queue's: decided by the queue's limits.
    assert needed(RateLimit(QUEUE_KEY, concurrency=9), queue) == (queue,)


def test_a_bad_limit_or_command_is_refused_naming_why() -> None:
    for body, says in [({"concurrency": -1}, "concurrency"), ({"key": "x"}, "key is not a field"),
                       ({}, "needs concurrency"), ([], "is {")]:  # fmt: skip
        with pytest.raises(Invalid) as refused:
            parse_queue_limits(body, "rl")
        assert says in refused.value.error.message
    for raw in (b"{", b"[]", b'{"queue": "rl", "rate_limit": {"key": "other", "concurrency": 1},'
                b' "version": [1, "v"]}'):  # fmt: skip
        assert not hasattr(parse_queue_rate_command(raw), "queue")


def test_a_queue_s_limit_holds_jobs_with_keys_of_their_own() -> None:
    story = Story()
    jobs = story.enqueue(2, {"key": "own", "concurrency": 5})
    set_limit(story, {"concurrency": 1})
    first = story.claim(jobs[0], straight=True)
    story.run()
    assert story.answer(first)["outcome"] == "applied"
    held = story.job(jobs[0])
    assert {held["rate_permit"]["key"], held["rate_permits_more"][0]["key"]} == {"own", QUEUE_KEY}
    second = story.claim(jobs[1], straight=True)
    story.run()
    refused = story.answer(second)
    assert refused["outcome"] == "refused" and refused["error"]["code"] == "rate_limited"
    # The permit of its own key it took on the way is given back unused.
    assert len(home(story, "own").holders) == 1  # type: ignore[union-attr]
    story.event(jobs[0], "job.completed")
    story.run()
    assert home(story, QUEUE_KEY) is None and home(story, "own") is None  # both given back
    third = story.claim(jobs[1], straight=True)
    story.run()
    assert story.answer(third)["outcome"] == "applied"


def test_a_job_without_a_key_of_its_own_is_held_by_its_queue_s_and_a_cleared_limit_frees_it():
    story = Story()
    for i in range(2):
        story.send({"type": "plain.job", "args": [i], "queue": "rl"})
    story.run()
    ids = [d["job_id"] for d in story.accepted()]
    set_limit(story, {"concurrency": 1})
    first = story.claim(ids[0], straight=True)
    story.run()
    assert story.answer(first)["outcome"] == "applied"
    assert story.job(ids[0])["rate_permit"]["key"] == QUEUE_KEY
    second = story.claim(ids[1], straight=True)
    story.run()
    assert story.answer(second)["error"]["code"] == "rate_limited"
    set_limit(story, None, at=2)  # cleared: a claim needs no permit
    again = story.claim(ids[1], straight=True)
    story.run()
    assert story.answer(again)["outcome"] == "applied"
    assert "rate_permit" not in story.job(ids[1])


def test_an_older_command_never_wins_on_any_partition() -> None:
    story = Story()
    set_limit(story, {"concurrency": 1}, at=5)
    set_limit(story, None, at=3)  # older: ignored everywhere
    published = [orjson.loads(o.value or b"") for o in story.sent
                 if o.role == "job_states" and o.key == wire.queue_rate_key("rl")]  # fmt: skip
    assert all(p["rate_limit"] is not None for p in published)


def test_a_permit_of_a_key_no_longer_needed_goes_back_unused() -> None:
    story = Story()
    [job] = story.enqueue(1, {"key": "own", "concurrency": 5})
    route = story.job(job)["route"].encode()
    body = {"job_id": job, "type": "job.started"}
    headers = [(wire.KIND_HEADER, wire.JOB_EVENT), (wire.RATE_PERMIT_HEADER, b"0-1"),
               (wire.RATE_KEY_HEADER, b"own"), (wire.RATE_PERMIT_AT_HEADER, b"1"),
               (wire.RATE_MORE_HEADER, b'[["queue:rl", "0-2", 1]]')]  # fmt: skip
    story.logs.setdefault(("requests", partition_for(route, PARTITIONS)), deque()).append(
        Output(orjson.dumps(body), route, headers=headers)
    )  # the queue's limit was cleared after its home granted this
    story.run()
    assert story.job(job)["state"] == "active" and "rate_permits_more" not in story.job(job)
    reports = [orjson.loads(o.value or b"") for o in story.sent
               if dict(o.headers or []).get(wire.KIND_HEADER) == wire.RATE_REPORT]  # fmt: skip
    assert {"permit": "0-2", "unused": True} in reports
