"""Fingerprints per second on one core: the fast path, the reference path, a whole parse.

The process pins itself to one CPU while it measures (as `taskset -c 0`
would) and puts its affinity back afterwards.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from gateway.core import (
    UniquePolicy,
    fingerprint,
    fingerprint_reference,
    parse_policy,
    parse_request,
)

# A typical small job: the unique-jobs page's worked example.
JOB: dict[str, Any] = {
    "type": "email.send",
    "queue": "notifications",
    "args": {"user_id": 42, "template": "welcome"},
}
POLICY: dict[str, Any] = {"keys": ["type", "queue", "args"], "args_keys": ["user_id"]}
ROUNDS = 5


def fingerprint_rates(seconds: float) -> dict[str, dict[str, float]]:
    """Per path, median/min/max fingerprints per second over rounds, about `seconds` per path."""
    from gateway.bench.report import spread

    policy = parse_policy(POLICY)
    assert isinstance(policy, UniquePolicy)
    args = (policy, JOB["type"], JOB["queue"], JOB["args"], None)
    if fingerprint(*args) != fingerprint_reference(*args):
        raise AssertionError("the fast path and the reference path disagree")
    raw = {**JOB, "unique": POLICY}
    paths: dict[str, Callable[[], object]] = {
        "fingerprint (fast path)": lambda: fingerprint(*args),
        "fingerprint (rfc8785 reference)": lambda: fingerprint_reference(*args),
        "parse_request (validation + policy + key)": lambda: parse_request(raw),
    }
    with _one_cpu():
        return {name: spread(_rates(compute, seconds)) or {} for name, compute in paths.items()}


def _rates(compute: Callable[[], object], seconds: float) -> list[float]:
    rates, batch = [], 1000
    for _ in range(ROUNDS):
        done, start = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - start) < seconds / ROUNDS:
            for _ in range(batch):
                compute()
            done += batch
        rates.append(done / elapsed)
    return rates


class _one_cpu:  # noqa: N801 - used as a context manager
    def __enter__(self) -> None:
        self.saved = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
        if self.saved:
            os.sched_setaffinity(0, {min(self.saved)})

    def __exit__(self, *_: object) -> None:
        if self.saved:
            os.sched_setaffinity(0, self.saved)
