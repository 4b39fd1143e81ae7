"""Per-partition schedules of what falls due as event time passes, without traffic.

Three things must happen when a partition's event time passes an instant rather
than when a record about them arrives:

- TOMBSTONES: a finished job's record leaves its route's state by the store's
  event-time TTL, `retention_ms` after the job ended (`core.job_expires_at`).
  The store deletes it without a word, so the processor writes the job's
  tombstone to `job_states` once time has passed it: compaction then drops the
  job from the topic, and every view reading it drops the job too.
- LEASES: an active job's attempt ends at its lease or its timeout, and a
  waiting job's chance to run at its expires_at (`core.job_deadline`); then
  the core's `expire_job` fails the attempt, or discards the job.
- CRONS: a cron's next slot (stage/commands.py); the entry is (the cron's
  key, its name), and `core.crons.fire` says whether it is still due.

Each is a schedule of (route, item) by due time, swept on every record of
the partition (a tick carries time when no other record does). An entry only
says "look at this job then": the sweep reads the job's record and asks the
core again, so an entry a later change made stale is skipped, never obeyed.

A schedule lives in the partition's state under a key of its own, in buckets of
`bucket_ms` by due time, with point reads only (the store offers no ordered
scan inside a transaction):
    next         -> the first bucket not yet swept (absent: nothing scheduled yet)
    <bucket>     -> how many entries the bucket holds
    <bucket>/<i> -> [route, item] of its i-th entry
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import orjson

from gateway.stage.context import KeyState, Staged

# A schedule's state: as a record's handling stages it, or (a replay seeding what an audit
# record read) as the store holds it.
State = Staged | KeyState
_NEXT = "next"


@dataclass(frozen=True)
class Schedule:
    # The key whose state holds the schedule. No route starts with NUL (routes
    # are fingerprints and job ids), so it never meets a job's key.
    key: bytes
    bucket_ms: int
    # A partition idle for long (a processor that was down) sweeps its backlog
    # over several records, so that no one record reads without end.
    max_buckets_per_record: int = 8_640

    def add(self, state: State, route: str, job_id: str, due_ms: int, now_ms: int) -> None:
        """Look at `job_id` (stored under `route`) once time has passed `due_ms`; `now_ms`
        is the time of the record that adds it."""
        next_bucket = _int(state.get_bytes(_NEXT))
        bucket = due_ms // self.bucket_ms
        # A sweep leaves `next` at most at the current bucket, so one past it was set by an
        # add: the buckets before it were never swept, and an earlier entry moves it back.
        if next_bucket is None or next_bucket > max(bucket, now_ms // self.bucket_ms):
            state.set_bytes(_NEXT, _bytes(bucket))
        elif bucket < next_bucket:
            bucket = next_bucket  # already due (or a clock that stepped back): the next sweep
        count = _int(state.get_bytes(str(bucket))) or 0
        state.set_bytes(f"{bucket}/{count}", orjson.dumps([route, job_id]))
        state.set_bytes(str(bucket), _bytes(count + 1))

    def seen_at(self, due_ms: int) -> int:
        """When an entry due at `due_ms` is swept: the end of its bucket. A record at or
        after this time, and only such a record, acts on it (replay and explain too)."""
        return (due_ms // self.bucket_ms + 1) * self.bucket_ms

    def nothing_due(self, next_bucket: int | None, now_ms: int) -> bool:
        """Whether a schedule whose first unswept bucket is `next_bucket` has nothing due."""
        return next_bucket is None or now_ms // self.bucket_ms <= next_bucket

    def sweep(self, state: State, now_ms: int) -> tuple[list[tuple[str, str]], int | None]:
        """(route, job id) of every entry whose bucket ended by `now_ms`, taken off the
        schedule, and the schedule's first unswept bucket afterwards (None: nothing was ever
        scheduled). A bucket is swept only once it has ended, so an entry is seen up to
        `bucket_ms` after its time, and never before it."""
        next_bucket = _int(state.get_bytes(_NEXT))
        if self.nothing_due(next_bucket, now_ms):
            return [], next_bucket
        assert next_bucket is not None
        stop = min(now_ms // self.bucket_ms, next_bucket + self.max_buckets_per_record)
        taken = []
        for bucket in range(next_bucket, stop):
            count = _int(state.get_bytes(str(bucket)))
            if count is None:
                continue  # an empty bucket: nothing to read, nothing to delete
            for i in range(count):
                item = state.get_bytes(f"{bucket}/{i}")
                state.delete(f"{bucket}/{i}")
                if item is not None:
                    route, job_id = orjson.loads(item)
                    taken.append((str(route), str(job_id)))
            state.delete(str(bucket))
        state.set_bytes(_NEXT, _bytes(stop))
        return taken, stop


_UNKNOWN = object()


class Known:
    """The first unswept bucket of each partition's schedules, as this process last saw it,
    so that a record with nothing due reads no schedule from the store (two reads a record).

    Exact, never a guess, so decisions are the same with it or without it: a value is
    kept only as the store holds it once a record's handling succeeded (its writes applied;
    a failed handling's are dropped, and so is what it saw), a schedule that gets an entry
    is read again, and everything is forgotten when `epoch` changes (the processor passes
    its stores' epoch: after a rebalance the store may be another's, and an abandoned
    transaction takes back what it wrote).
    """

    def __init__(self, epoch: Callable[[], object] | None = None) -> None:
        self._epoch = epoch
        self._at: object = None
        self._values: dict[tuple[bytes, int], int | None] = {}
        self._pending: dict[tuple[bytes, int], object] = {}

    def nothing_due(self, schedule: Schedule, partition: int, now_ms: int) -> bool:
        if self._epoch is not None and (at := self._epoch()) is not self._at:
            self._at = at
            self._values.clear()
        where = (schedule.key, partition)
        value = self._pending.get(where, self._values.get(where, _UNKNOWN))
        return value is not _UNKNOWN and schedule.nothing_due(value, now_ms)  # type: ignore[arg-type]

    def saw(self, schedule: Schedule, partition: int, next_bucket: int | None) -> None:
        self._pending[(schedule.key, partition)] = next_bucket

    def forget(self, schedule: Schedule, partition: int) -> None:
        self._pending[(schedule.key, partition)] = _UNKNOWN

    def settle(self, succeeded: bool) -> None:
        """After a record's handling: keep what it saw, or (it failed) none of it."""
        for where, value in self._pending.items():
            if succeeded and value is not _UNKNOWN:
                self._values[where] = value  # type: ignore[assignment]
            else:
                self._values.pop(where, None)
        self._pending.clear()


# Tombstones may wait ten seconds; an idle partition catches up a day per record.
TOMBSTONES = Schedule(b"\x00job-expiry", 10_000)
# A lease is a few seconds: it falls due at the first tick (two a second) past its
# bucket's end, so within 0.6 s; an idle partition catches up 14 minutes per record.
LEASES = Schedule(b"\x00job-lease", 100)
# A cron's next slot (stage/commands.py): it fires at the first tick past its bucket,
# within 0.6 s, so a cron firing every second keeps up.
CRONS = Schedule(b"\x00cron-slot", 100)


def _int(raw: bytes | None) -> int | None:
    return None if raw is None else int(raw)


def _bytes(value: int) -> bytes:
    return str(value).encode()
