"""Provisional entries: what this process's answers say, until the committed records do.

The processor answers before it commits (early answers), so a job this process
has just answered for may not be on `job_states` yet. The binding puts the job
as the answer carries it here at once, and the view reads it before the stored
one until the committed record arrives. A decision is a pure function of the
log, so that record is this very job, even when the processor crashed first
and its successor decided again; the entry goes when the view reads it (or its
tombstone), or after PROVISIONAL_S at the latest. A cron's answered state is
kept likewise. Not thread-safe on its own: the view's lock guards the changes.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Mapping
from typing import Any

from gateway.view.keys import version

# How long a provisional entry waits for its committed record at most: a crashed
# processor's successor takes over and commits well within it.
PROVISIONAL_S = 60.0
_CONTROLS_READ = 16  # committed states remembered per cron key
# Versions of jobs the view read last, so an answer that arrives after its own
# record (answers with the commit) leaves no provisional entry behind.
_REMEMBERED = 100_000


class Provisional:
    def __init__(self) -> None:
        # job id -> (the job as answered, None if deleted; until when; its version)
        self.jobs: dict[str, tuple[dict[str, Any] | None, float, tuple[str, int]]] = {}
        self._read: OrderedDict[tuple[str, int], None] = OrderedDict()
        # key -> (a cron's state as an answer gave it, None if deleted; until when)
        self.controls: dict[bytes, tuple[bytes | None, float]] = {}
        # key -> the last committed states read (a cron's answer may come after its own
        # record and a later one were read: it is then no news, and must not hide the later)
        self._controls_read: dict[bytes, deque[bytes | None]] = {}

    def job(self, job_id: str) -> tuple[bool, dict[str, Any] | None]:
        """Whether the job has a live provisional entry, and the job it holds (a copy)."""
        entry = self.jobs.get(job_id)
        if entry is not None:
            job, until, _ = entry
            if until > time.monotonic():
                return True, None if job is None else dict(job)
            self.jobs.pop(job_id, None)
        return False, None

    def answered(self, job_id: str, job: dict[str, Any] | None) -> None:
        """The job as an answer left it (None: deleted), unless its record was read."""
        entry_version = version(job_id, job)
        if entry_version not in self._read:
            self.jobs[job_id] = (job, time.monotonic() + PROVISIONAL_S, entry_version)

    def confirm(self, job_id: str, job: Mapping[str, Any] | None) -> None:
        """A committed record read: it ends the job's provisional entry if it is that one."""
        read = version(job_id, job)
        self._read[read] = None
        self._read.move_to_end(read)
        if len(self._read) > _REMEMBERED:
            self._read.popitem(last=False)
        entry = self.jobs.get(job_id)
        if entry is not None and entry[2] == read:
            del self.jobs[job_id]

    def live(self) -> dict[str, dict[str, Any] | None]:
        """Every job with a live provisional entry (None: deleted)."""
        now = time.monotonic()
        return {job_id: job for job_id, (job, until, _) in list(self.jobs.items()) if until > now}

    def control_answered(self, key: bytes, value: bytes | None) -> None:
        """A cron's state as an answer left it, unless that record was read already."""
        if value in self._controls_read.get(key, ()):
            return
        self.controls[key] = (value, time.monotonic() + PROVISIONAL_S)

    def control_read(self, key: bytes, value: bytes | None) -> None:
        """A committed cron's or queue's state read: it ends the answered one it matches."""
        self._controls_read.setdefault(key, deque(maxlen=_CONTROLS_READ)).append(value)
        answered = self.controls.get(key)
        if answered is not None and answered[0] == value:
            del self.controls[key]
