"""Per-key concurrency (`unique.concurrency`; sidekiq-unique-jobs' runtime locks): any number
of a key's jobs may wait, at most N of them run at once.

A job accepted under a policy with a limit carries it (`unique_concurrency`, set by the
gateway, never taken from a request). The one rule, `claim_refusal`: a claim
(job.started) of such a job is refused with `concurrency_limit` while the key's other
active jobs number its limit or more; the job stays as it was (available) and runs when
a slot frees. The processor applies it with the key's entries (lifecycle.on_key): it is
the key's single writer, so no crash, rebalance or racing fetch lets a key run more than
its limit. Fetch asks the same rule (`slot_free`) of the view's count of a key's active
jobs, so it does not propose a job it would be refused (http/workers.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from gateway.core.errors import GatewayError, invalid_request
from gateway.core.states import State

if TYPE_CHECKING:  # entries.py reads policies, which parse limits here
    from gateway.core.entries import Entry

CONCURRENCY_LIMIT = "concurrency_limit"
JOB_FIELD = "unique_concurrency"
# A key's entries are read for every claim: the limit stays within what a key may hold.
MAX_CONCURRENCY = 1000


def parse_concurrency(raw: object, field: str) -> int | None:
    """`unique.concurrency`: a whole number of jobs from 1 to MAX_CONCURRENCY; None: none."""
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int) or not 1 <= raw <= MAX_CONCURRENCY:
        raise invalid_request(
            f"{field} must be a whole number from 1 to {MAX_CONCURRENCY}: how many jobs of "
            "the key may run at once"
        )
    return raw


def limit_of(job: Mapping[str, Any]) -> int | None:
    """The job's own limit, as its record carries it; None: the job has none."""
    limit = job.get(JOB_FIELD)
    return limit if isinstance(limit, int) and not isinstance(limit, bool) else None


def slot_free(limit: int, active_others: int) -> bool:
    """Whether a job of `limit` may start while `active_others` jobs of its key run."""
    return active_others < limit


def claim_refusal(job: Mapping[str, Any], entries: Iterable[Entry]) -> GatewayError | None:
    """None if the job may start now, beside its key's `entries`; else why not."""
    limit = limit_of(job)
    if limit is None:
        return None
    job_id = str(job["id"])
    running = sum(1 for e in entries if e.state is State.ACTIVE and e.job_id != job_id)
    if slot_free(limit, running):
        return None
    return GatewayError(
        CONCURRENCY_LIMIT,
        f"the concurrency limit of job {job_id}'s unique key is reached ({running} of its "
        f"jobs active, limit {limit}): it is not handed out until one of them ends",
    )
