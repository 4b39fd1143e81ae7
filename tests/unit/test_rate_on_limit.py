"""`on_limit` reschedule and drop over every stage (core/rate_moves.py): a claim the rate
key's home refuses goes back to the job's route, which moves the job and answers the claim
`rate_limited`; `wait` leaves it available; a forged mark is dropped by the router."""

from __future__ import annotations

from collections import deque

import orjson

from gateway import wire
from gateway.audit.explain import explain_record
from gateway.core.times import parse_rfc3339
from gateway.partitioner import partition_for
from gateway.stage.records import Output
from gateway.view.events import derive
from tests.unit.test_ids import PARTITIONS
from tests.unit.test_rate_stories import Story


def claim(story: Story, job_id: str, straight: bool = False) -> str:
    """A claim as fetch sends it, to the job's rate key's home (or, `straight`, as a worker
    sends it to the job's route); its correlation id."""
    if straight:
        return story.claim(job_id, straight=True)
    story.asked += 1
    correlation = f"c{story.asked}"
    policy = story.job(job_id)["rate_limit"]
    home = wire.rate_home(policy["key"])
    body = {"job_id": job_id, "type": "job.started", "claim_id": correlation,
            "rate_limit": policy}  # fmt: skip
    story.logs.setdefault(("requests", partition_for(home, PARTITIONS)), deque()).append(
        Output(orjson.dumps(body), home, headers=[
            (wire.KIND_HEADER, wire.RATE), (wire.REPLY_TO_HEADER, b"replies"),
            (wire.CORRELATION_ID_HEADER, correlation.encode()),
        ])
    )  # fmt: skip
    story.run()
    return correlation


def test_reschedule_schedules_the_job_for_the_next_permit() -> None:
    story = Story()
    jobs = story.enqueue(2, {"key": "k", "rate": 1, "period": "second", "on_limit": "reschedule"})
    story.run()
    first = claim(story, jobs[0])
    granted_at = parse_rfc3339(story.job(jobs[0])["started_at"])
    second = claim(story, jobs[1])
    answer = story.answer(second)
    assert answer["outcome"] == "refused" and answer["error"]["code"] == "rate_limited"
    assert "scheduled by its on_limit reschedule" in answer["error"]["message"]
    moved = story.job(jobs[1])
    assert story.answer(first)["outcome"] == "applied" and moved["state"] == "scheduled"
    # When the sliding second frees a permit: the first start plus the period.
    at = parse_rfc3339(moved["scheduled_at"])
    assert at is not None and granted_at is not None and abs(at - (granted_at + 1000)) <= 5
    [told] = [r for r in story.trail() if r.get("kind") == "event"
              and (r.get("what") or {}).get("rate", {}).get("moved_to")]  # fmt: skip
    assert "scheduled by its on_limit reschedule" in explain_record(told).reason[0]


def test_drop_discards_the_job_and_says_so_in_an_event() -> None:
    story = Story()
    jobs = story.enqueue(2, {"key": "d", "concurrency": 1, "on_limit": "drop"})
    claim(story, jobs[0])
    refused = claim(story, jobs[1], straight=True)  # a worker's own claim, via the home too
    story.run()
    assert story.answer(refused)["error"]["code"] == "rate_limited"
    dropped = story.job(jobs[1])
    assert dropped["state"] == "discarded" and dropped["error"]["type"] == "rate_limited"
    published = [o for o in story.sent if o.role == "job_states" and o.key == jobs[1].encode()]
    before, after = (orjson.loads(o.value or b"") for o in published[-2:])
    kinds = [e["type"] for e in derive((0, 9, before, after))]
    assert kinds[-1] == "rate_limit.dropped" and "job.discarded" in kinds
    event = derive((0, 9, before, after))[-1]
    assert event["data"] == {"key": "d", "job_id": jobs[1], "job_type": "rl.job_1"}


def test_wait_leaves_the_job_available_and_a_forged_mark_is_dropped() -> None:
    story = Story()
    jobs = story.enqueue(2, {"key": "w", "concurrency": 1})
    claim(story, jobs[0])
    forged = {"on_limit": "drop", "retry_at": None, "key": "w",
              "error": {"code": "rate_limited", "message": "x"}}  # fmt: skip
    body = {"job_id": jobs[1], "type": "job.started"}
    story.logs.setdefault(("job_events", 0), deque()).append(Output(
        orjson.dumps(body), jobs[1].encode(),
        headers=[(wire.RATE_REFUSED_HEADER, orjson.dumps(forged))],
    ))  # fmt: skip
    story.run()
    assert story.job(jobs[1])["state"] == "available"
