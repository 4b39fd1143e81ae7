"""sidekiq-unique-jobs' on_conflict reject and reschedule against a real broker and
processor, through HTTP and through the SDK (the stack of test_dialects.py).

A rejected duplicate is a dead letter job (`/ojs/v1/dead-letter`); a rescheduled one
waits `schedule_in` seconds (event time, carried by the processor's ticks on an idle
partition) and is decided again: it waits again while the lock is held, and takes the
lock and is enqueued once it is free.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.test_dialects import Gateway, Stack, queue, stack, tag
from tests.integration.test_http_admin import eventually

pytestmark = pytest.mark.kafka
__all__ = ["stack"]  # the module's stack fixture, shared


@pytest.fixture(params=["http", "sdk"])
def gw(request: pytest.FixtureRequest, stack: Stack) -> Gateway:
    return Gateway(stack, request.param)


def sidekiq(q: str, arg: str, **fields: Any) -> dict[str, Any]:
    """MyJob.perform_async(arg) with sidekiq_options lock: :until_executed, ..."""
    return {"dialect": "sidekiq", "class": "MyJob", "queue": q, "args": [arg],
            "lock": "until_executed", **fields}  # fmt: skip


def pushed(gw: Gateway, job: dict[str, Any]) -> dict[str, Any]:
    status, body = gw.send(job)
    assert status in (None, 201) and body["jid"] == body["job"]["id"], body
    return dict(body["job"])


def not_pushed(gw: Gateway, job: dict[str, Any], existing: dict[str, Any]) -> None:
    """Sidekiq's push answers a nil jid, as under log, with the job holding the lock."""
    status, body = gw.send(job)
    assert status in (None, 200) and body["jid"] is None, body
    assert body["job"]["id"] == existing["id"], body


def listed(gw: Gateway, path: str, **params: Any) -> list[dict[str, Any]]:
    answer = gw.stack.http.get(path, params=params)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    return list(body.get("jobs", body.get("items", [])))


def test_reject_sends_the_duplicate_to_the_dead_letters(gw: Gateway) -> None:
    q, arg = queue(), tag()
    job = sidekiq(q, arg, on_conflict={"client": "reject", "server": "log"})
    first = pushed(gw, job)
    not_pushed(gw, job, first)
    dead = eventually(lambda: listed(gw, "/ojs/v1/dead-letter", queue=q), lambda d: len(d) == 1)
    assert dead[0]["id"] != first["id"] and dead[0]["state"] == "discarded"
    assert dead[0]["type"] == "MyJob" and dead[0]["args"] == [arg]
    assert dead[0]["errors"][-1]["type"] == "SidekiqUniqueJobs::Conflict"
    shown = listed(gw, "/ojs/v1/admin/dead-letter", queue=q)  # the Admin UI's list
    assert [j["id"] for j in shown] == [dead[0]["id"]]
    # Retried from the dead letters while the first holds the lock: refused; once it is
    # done, the retried job takes the lock.
    retry = f"/ojs/v1/dead-letter/{dead[0]['id']}/retry"
    assert gw.stack.http.post(retry).status_code != 200
    gw.start(first)
    gw.complete(first)
    retried = gw.stack.http.post(retry)
    assert retried.status_code == 200 and retried.json()["job"]["state"] == "available"


def test_reschedule_decides_the_duplicate_again_after_schedule_in(gw: Gateway) -> None:
    q, arg = queue(), tag()
    job = sidekiq(q, arg, on_conflict="reschedule", schedule_in=1)
    first = pushed(gw, job)
    not_pushed(gw, job, first)

    def pending() -> list[dict[str, Any]]:
        return listed(gw, "/ojs/v1/admin/jobs", queue=q, state="pending")

    later = eventually(pending, lambda p: len(p) == 1)[0]

    def full(job_id: str) -> dict[str, Any]:
        return dict(gw.stack.http.get(f"/ojs/v1/jobs/{job_id}").json()["job"])

    # Due while the first job holds the lock: decided again, it waits schedule_in more.
    waited = eventually(lambda: full(later["id"]), lambda j: j["reschedule"]["times"] >= 2)
    assert waited["state"] == "pending" and waited["reschedule"]["of"] == first["id"]
    gw.start(first)
    gw.complete(first)
    taken = eventually(lambda: full(later["id"]), lambda j: j["state"] != "pending")
    assert taken["state"] == "available" and taken["args"] == [arg]
    gw.keys[taken["id"]] = taken["unique_key"]
    not_pushed(gw, sidekiq(q, arg), taken)  # it holds the lock now
    gw.start(taken)
    gw.complete(taken)
