"""An answer that changed a stored job waits until the view has read the decision's record,
not until the view shows its values: a newer update of the job may have replaced them."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from gateway.http import jobs
from gateway.http.caught_up import caught_up
from gateway.sdk import EnqueueResult
from gateway.view.store import JobView
from gateway.view.versions import ReadVersions
from tests.http_requests import bound, call, request

T0 = 1_770_000_000_000
JOB_ID = "01900000-0000-7000-8000-000000000001"


def version(n: int, **fields: Any) -> dict[str, Any]:
    """The debounced job after its n-th request: that request's args, and run later."""
    at = f"2026-01-01T00:00:{n:02d}.000Z"
    return {"id": JOB_ID, "queue": "q", "state": "scheduled", "args": [n], "scheduled_at": at,
            **fields}  # fmt: skip


def set_by(n: int) -> dict[str, Any]:
    """What the n-th request's decision changed (its record's `updated_fields`, as values)."""
    return {"args": [n], "scheduled_at": version(n)["scheduled_at"]}


def records(
    *versions: dict[str, Any], first: int = 0
) -> list[tuple[int, int, bytes, bytes | None]]:
    return [(0, first + i, JOB_ID.encode(), orjson.dumps(v)) for i, v in enumerate(versions)]


def test_an_update_a_newer_one_replaced_in_the_same_read_is_caught_up(tmp_path: Path) -> None:
    view = JobView(tmp_path)
    sent = time.monotonic()
    view.apply(records(version(0), version(1), version(2)), T0)
    # The view shows the newest update only: waiting to see the first's values never ends.
    assert view.get(JOB_ID) == version(2)
    assert caught_up(view.versions, JOB_ID, set_by(1), sent)
    assert caught_up(view.versions, JOB_ID, set_by(2), sent)
    view.close()


def test_not_caught_up_until_the_decisions_own_record_is_read(tmp_path: Path) -> None:
    view = JobView(tmp_path)
    sent = time.monotonic()
    view.apply(records(version(0), version(1)), T0)
    assert not caught_up(view.versions, JOB_ID, set_by(2), sent)
    assert not caught_up(view.versions, "another", {}, sent)
    view.apply(records(version(2), version(3), first=2), T0)
    assert caught_up(view.versions, JOB_ID, set_by(2), sent)
    view.close()


def test_records_read_before_the_request_was_sent_do_not_count(tmp_path: Path) -> None:
    # An older record with the values the decision set again: the view is not past the
    # decision because it read that one.
    view = JobView(tmp_path)
    view.apply(records(version(1)), T0)
    sent = time.monotonic()
    assert not caught_up(view.versions, JOB_ID, set_by(1), sent)
    view.apply(records(version(2), version(1), first=1), T0)
    assert caught_up(view.versions, JOB_ID, set_by(1), sent)
    view.close()


def test_a_field_the_update_removed_is_matched_by_its_absence(tmp_path: Path) -> None:
    view = JobView(tmp_path)
    sent = time.monotonic()
    view.apply(records(version(0, tags=["a"])), T0)
    assert not caught_up(view.versions, JOB_ID, {"tags": None}, sent)
    view.apply(records(version(0), first=1), T0)
    assert caught_up(view.versions, JOB_ID, {"tags": None}, sent)
    view.close()


def test_the_records_kept_are_the_last_read_within_the_bound() -> None:
    sizes = [len(orjson.dumps(version(n))) for n in range(3)]
    versions = ReadVersions(max_bytes=sizes[1] + sizes[2])
    sent = time.monotonic()
    versions.read([(JOB_ID, orjson.dumps(version(n))) for n in range(3)])
    assert versions.since(JOB_ID, sent) == [orjson.dumps(version(n)) for n in (1, 2)]
    versions.read([("other", orjson.dumps(version(3)))])
    assert versions.since(JOB_ID, sent) == [orjson.dumps(version(2))]
    assert versions.since("other", sent) == [orjson.dumps(version(3))]


def test_a_batch_waits_for_its_items_at_once_not_in_turn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each item of a batch updating one job waits for its own record: together, so the
    batch waits as long as its slowest item, not as long as all of them."""
    waiting, most = 0, 0

    async def wait(versions: Any, job_id: str, values: Any, sent: float) -> None:
        nonlocal waiting, most
        waiting += 1
        most = max(most, waiting)
        for _ in range(3):  # stays waiting while the event loop runs the others
            await asyncio.sleep(0)
        waiting -= 1

    monkeypatch.setattr(jobs.caught_up, "wait", wait)
    updated = [
        EnqueueResult.from_record(
            {
                "outcome": "updated",
                "request_id": f"r.{n}",
                "unique_key": "k",
                "job_id": JOB_ID,
                "job": version(n),
                "updated_fields": [{"field": "args", "from": [n - 1], "to": [n]}],
            }
        )  # fmt: skip
        for n in range(1, 5)
    ]

    class Client:
        async def enqueue_many(self, jobs: Any, **_: Any) -> list[EnqueueResult]:
            return updated

    batch = {"jobs": [{"type": "email.send", "args": [n]} for n in range(1, 5)]}
    view = SimpleNamespace(versions=ReadVersions())
    answer = call(jobs.enqueue_batch, request(batch), bound(client=Client(), view=view))
    assert answer.status == 201 and answer.body["count"] == 4  # type: ignore[union-attr]
    assert most == 4
