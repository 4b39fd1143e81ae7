"""A job id used again around retention: the record a finished job's retention deletes from
`job_states` is its own, never that of a live job that took its id since.

Stories over every stage (router, the id's home, the routes) and in-memory stores, with a
retention of seconds and ticks to carry time: `job_states` read as a compacted topic must hold
every job a route holds live, as its route holds it.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.stage.parsing import Limits
from gateway.stage.records import Output
from gateway.wire import KIND_HEADER, TICK, TICK_KEY
from tests.unit.test_ids import JOB_ID, PARTITIONS, Gateway

RETENTION_MS = 5_000
LIVE = {"available", "scheduled", "pending", "active", "retryable"}


class Story(Gateway):
    def __init__(self) -> None:
        super().__init__(Limits(retention_ms=RETENTION_MS))

    def holder(self) -> tuple[bytes, dict[str, Any]] | None:
        """The route that holds a record of the job id, and the record (live first)."""
        held = [
            (key, orjson.loads(raw))
            for partition, store in self.stores.items()
            for (key, name), (raw, stamp) in store.items.items()
            if name == "job/" + JOB_ID and (stamp is None or stamp > store.high_water_ms)
        ]
        held.sort(key=lambda kv: kv[1]["state"] not in LIVE)
        return held[0] if held else None

    def event(self, kind: str, **fields: Any) -> None:
        held = self.holder()
        if held is None:
            return
        route, job = held
        body = {"job_id": JOB_ID, "type": kind, **fields}
        if job.get("unique_key"):
            body["unique_key"] = job["unique_key"]
        self.logs.setdefault(("job_events", 0), deque()).append(Output(orjson.dumps(body), route))

    def wait(self, ms: int) -> None:
        """Time passes: a tick on every partition after `ms`."""
        self.run()
        self.clock += ms
        for partition in range(PARTITIONS):
            self.logs.setdefault(("requests", partition), deque()).append(
                Output(b"", TICK_KEY, headers=[(KIND_HEADER, TICK)])
            )
        self.run()

    def job_states(self) -> dict[bytes, bytes]:
        """`job_states` as a compacted topic reads: the last record of each key."""
        table: dict[bytes, bytes] = {}
        for output in self.sent:
            if output.role == "job_states" and output.key is not None:
                if output.value is None:
                    table.pop(output.key, None)
                else:
                    table[output.key] = output.value
        return table

    def assert_live_job_published(self) -> None:
        held = self.holder()
        if held is None or held[1]["state"] not in LIVE:
            return
        published = self.job_states().get(JOB_ID.encode())
        assert published is not None, f"live job {held[1]['state']} at {held[0]!r} vanished"
        assert orjson.loads(published) == held[1]


def plain() -> dict[str, Any]:
    return {"type": "plain", "args": [], "id": JOB_ID, "max_attempts": 1}


def keyed(arg: int) -> dict[str, Any]:
    return {"type": "keyed", "args": [arg], "id": JOB_ID, "max_attempts": 1,
            "unique": {"keys": ["type", "args"]}}  # fmt: skip


def discard(story: Story) -> None:
    story.event("job.started")
    story.run()
    story.event("job.failed", error={"message": "boom"}, retryable=False)
    story.run()


def test_a_deleted_dead_letters_tombstone_spares_the_keyed_job_that_took_its_id() -> None:
    story = Story()
    story.send(plain())
    story.run()
    discard(story)
    story.event("job.deleted")
    story.run()
    story.send(keyed(1))
    story.run()
    assert [d["outcome"] for d in story.decisions] == ["accepted", "accepted"]
    story.wait(RETENTION_MS + 60_000)  # the plain job's scheduled tombstone falls due
    held = story.holder()
    assert held is not None and held[1]["state"] == "available"
    story.assert_live_job_published()


def test_a_plain_job_past_retention_but_not_yet_swept_spares_the_keyed_job_after_it() -> None:
    story = Story()
    story.send(plain())
    story.run()
    discard(story)
    story.clock += RETENTION_MS + 1  # its record is gone from the store, its tombstone not due
    story.send(keyed(1))
    story.run()
    assert story.decisions[-1]["outcome"] == "accepted"
    story.wait(60_000)
    story.assert_live_job_published()


STEPS = st.sampled_from(("plain", "keyed1", "keyed2", "discard", "complete", "delete", "retry",
                         "wait", "wait_long", "unswept"))  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(steps=st.lists(STEPS, min_size=1, max_size=14))
def test_any_story_of_an_id_reused_around_retention_never_hides_a_live_job(steps) -> None:
    story = Story()
    for step in steps:
        if step == "plain":
            story.send(plain())
        elif step.startswith("keyed"):
            story.send(keyed(int(step[-1])))
        elif step == "discard":
            discard(story)
        elif step == "complete":
            story.event("job.started")
            story.run()
            story.event("job.completed")
        elif step == "delete":
            story.event("job.deleted")
        elif step == "retry":
            story.event("job.enqueued")
        elif step == "wait":
            story.wait(RETENTION_MS // 2)
        elif step == "unswept":
            story.clock += RETENTION_MS + 1  # records past retention read as gone, unswept
        else:
            story.wait(RETENTION_MS + 60_000)
        story.run()
        story.assert_live_job_published()


# -- an idempotency key's answer, whoever holds the id later ----------------------------------


def attempt(story: Story, body: dict[str, Any], key: bytes = b"K") -> dict[str, Any]:
    """One attempt under an idempotency key: the answer it got (its reply)."""
    before = len(story.sent)
    story.send(body, idempotency_key=key, reply_to=b"replies", correlation_id=b"c")
    story.run()
    [reply] = [o for o in story.sent[before:] if o.topic == "replies"]
    return orjson.loads(reply.value or b"")


def test_a_refused_claim_is_the_answer_to_every_retry_even_once_the_id_is_free() -> None:
    story = Story()
    story.send(plain())
    story.run()
    first = attempt(story, keyed(1))
    assert first["outcome"] == "rejected" and first["error"]["code"] == "duplicate"
    assert attempt(story, keyed(1)) == first  # answered again, not decided again
    discard(story)
    story.event("job.deleted")
    story.run()  # the id is free now: a new request naming it would be accepted
    assert attempt(story, keyed(1)) == first
    assert [d["outcome"] for d in story.decisions] == ["accepted", "rejected"]


def test_an_accepted_claim_is_the_answer_to_every_retry_whoever_takes_the_id_next() -> None:
    story = Story()
    first = attempt(story, keyed(1))
    assert first["outcome"] == "accepted" and first["job_id"] == JOB_ID
    discard(story)
    story.event("job.deleted")
    story.wait(RETENTION_MS + 60_000)  # its scheduled tombstone frees the id
    story.send(keyed(2))  # another key takes the id
    story.run()
    assert story.decisions[-1]["outcome"] == "accepted"
    assert attempt(story, keyed(1)) == first
    assert [d["outcome"] for d in story.decisions] == ["accepted", "accepted"]
