"""Job records rebuilt from the log and moved by the processor's own rules.

What-if reads decisions and job events, not the processor's state; it keeps each
job's record as its accepted decision published it and moves it with `core.on_key`
(`apply_job_event` and the key's entries after it), `core.expire_job` and, for a claim
its rate key's home refused, `on_limit_move`: the calls the processor makes, so a job's
story is the one the processor wrote. An active job expires at the first record of the log at
or after the end of its deadline's schedule bucket (`LEASES.seen_at`), as the
processor's sweep does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.core import (
    Entry,
    EventOutcome,
    EventResult,
    GatewayError,
    JobEvent,
    expire_job,
    job_deadline,
    successor,
)
from gateway.core.lifecycle import on_key
from gateway.core.queues import QueueCommand, newer, parse_queue_command, queue_state
from gateway.core.rate_moves import on_limit_move
from gateway.stage.schedule import LEASES

# A refused claim as its home marks it (stage/rates.py `limited_of`): on_limit, retry
# time, rate key, the refusal.
Limited = tuple[str, int | None, str, GatewayError]


class JobBook:
    def __init__(self) -> None:
        self.jobs: dict[str, dict[str, Any]] = {}
        # (partition, queue) -> the queue's state there, as the processor holds it
        self.queues: dict[tuple[int, str], dict[str, Any]] = {}

    def command(self, partition: int, value: bytes, now_ms: int) -> None:
        """A queue command on the partition, taken there as the processor takes it."""
        command = parse_queue_command(value)
        if not isinstance(command, QueueCommand):
            return
        where = (partition, command.queue)
        if newer(command, self.queues.get(where)):
            self.queues[where] = queue_state(command, now_ms)

    def accepted(self, job: Mapping[str, Any]) -> None:
        """A job as a decision published it (new, updated, or cancelled by a replace)."""
        self.jobs[str(job["id"])] = dict(job)

    def apply(
        self,
        event: JobEvent | GatewayError,
        entries: tuple[Entry, ...],
        now_ms: int,
        retention_ms: int,
        partition: int,
    ) -> tuple[EventResult, tuple[Entry, ...]]:
        """An event on its job (on `partition`), and the job's key's `entries` after it.
        Rate keys are the log's to decide: a claim that reaches here is one they let
        through (`limited` takes one they refused), so none is asked for a permit."""
        job = None if isinstance(event, GatewayError) else self.jobs.get(event.job_id)
        held = None if job is None else self.queues.get((partition, str(job.get("queue"))))
        paused = held is not None and bool(held.get("paused"))
        result, after = on_key(job, entries, event, now_ms, retention_ms, paused, needed=())
        self._keep(result)
        return result, after

    def limited(self, job_id: str, limited: Limited, now_ms: int) -> EventResult | None:
        """A claim its rate key's home refused: the job moved as its on_limit says (None:
        it stays as it is), as the processor moves it."""
        job = self.jobs.get(job_id)
        on_limit, retry_at, key, _ = limited
        moved = None if job is None else on_limit_move(job, on_limit, retry_at, key, now_ms)
        if moved is not None:
            self._keep(moved)
        return moved

    def released(self, entries: tuple[Entry, ...], now_ms: int) -> tuple[Entry, ...]:
        """A key's entries after a move of one of its jobs, its successor released as the
        processor releases it (core/successor.py), the successor's record moved too."""
        after, released = successor.release(entries, now_ms)
        job = None if released is None else self.jobs.get(released.job_id)
        if released is not None and job is not None:
            self.jobs[released.job_id] = successor.released_job(job, released, now_ms)
        return after

    def expire(self, now_ms: int) -> list[EventResult]:
        """The attempts a record at `now_ms` ends, failed as the processor fails them."""
        expired = []
        for job in list(self.jobs.values()):
            deadline = job_deadline(job)
            if deadline is None or LEASES.seen_at(deadline) > now_ms:
                continue
            result = expire_job(job, now_ms)
            if result is not None:
                self._keep(result)
                expired.append(result)
        return expired

    def _keep(self, result: EventResult) -> None:
        if result.outcome is not EventOutcome.APPLIED or result.job is None:
            return
        if result.deleted:
            self.jobs.pop(str(result.job["id"]), None)
        else:
            self.jobs[str(result.job["id"])] = result.job
