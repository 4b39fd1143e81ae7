"""What a route tells a home, on `requests` (keyed by the home, marked by kind): the job it
holds under a claimed id (core/ids.py), a rate permit given back (core/rates.py), a tenant's
place given back (core/tenant_limits.py)."""

from __future__ import annotations

from typing import Any

import orjson

from gateway import wire
from gateway.core.ids import REPORT_ANSWER
from gateway.core.limits import MAX_RECORD_BYTES
from gateway.stage.records import Output


def id_report(
    job_id: str, route: str, job: dict[str, Any] | None, decided: bool,
    answer: tuple[str, bytes] | None = None,
) -> Output:  # fmt: skip
    """What a route tells the id's home (core/ids.py): the job it holds under `job_id` now
    (None: none), whether this follows a decision the home's claim sent it, and the answer an
    idempotency key's request got (name, bytes), last and as kept, when it fits a record."""
    record: dict[str, Any] = {"job_id": job_id, "route": route, "job": job, "decided": decided}
    value = orjson.dumps(record)
    if answer is not None:
        named = orjson.dumps({**record, "answer_name": answer[0]})
        if len(named) + len(answer[1]) + len(REPORT_ANSWER) + 1 <= MAX_RECORD_BYTES - 1024:
            value = b"%b%b%b}" % (named[:-1], REPORT_ANSWER, answer[1])
    headers = [(wire.KIND_HEADER, wire.ID_REPORT)]
    return Output(value, job_id.encode(), role="requests", headers=headers)


def rate_report(key: str, permit: str, unused: bool) -> Output:
    """A permit given back to its rate key's home (core/rates.py): the job that held it left
    active, or (`unused`) its claim did not apply."""
    value = orjson.dumps({"permit": permit, "unused": unused})
    return Output(value, wire.rate_home(key), role="requests",
                  headers=[(wire.KIND_HEADER, wire.RATE_REPORT)])  # fmt: skip


def tenant_report(tenant: str, scheduled: bool) -> Output:
    """A place given back to its tenant's home (core/tenant_limits.py): its job started or
    ended, or its request made no job; `scheduled`: the place was a scheduled job's."""
    return Output(orjson.dumps({"scheduled": scheduled}), wire.tenant_home(tenant), role="requests",
                  headers=[(wire.KIND_HEADER, wire.TENANT_REPORT)])  # fmt: skip
