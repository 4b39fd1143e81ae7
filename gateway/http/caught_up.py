"""Read your writes for a job the processor changed in place: waiting for the view.

An answer that changes a stored job (an update, or the job a replace cancelled)
comes before this process's view has read the job's new record, and the binding
cannot build that record itself (the processor merges the change into the record
it stores). So the answer waits until the view has read the decision's record:
the view applies a job's records in log order, so a GET then shows that record or
a later one.

The decision's record is the one holding the values it set: the record before
it differs in every field it changed. It is looked for among the job's records
the view read since the request was sent, not only in the one it shows now: a
later decision of the same job may have replaced those fields already (several
updates of one key at once), and the view may read both in one batch.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

import orjson

from gateway.view.versions import ReadVersions

VIEW_WAIT_S = 5.0
_POLL_S = 0.01


def caught_up(versions: ReadVersions, job_id: str, values: Mapping[str, Any], sent: float) -> bool:
    """Whether the view read, since `sent`, a record of the job holding `values` (a field
    that is None: absent)."""
    for raw in versions.since(job_id, sent):
        job = orjson.loads(raw)
        if all(job.get(field) == value for field, value in values.items()):
            return True
    return False


async def wait(
    versions: ReadVersions,
    job_id: str,
    values: Mapping[str, Any],
    sent: float,
    timeout: float = VIEW_WAIT_S,
) -> None:
    """Until `caught_up` (or `timeout`)."""
    deadline = time.monotonic() + timeout
    while not caught_up(versions, job_id, values, sent) and time.monotonic() < deadline:
        await asyncio.sleep(_POLL_S)
