"""Fingerprints per second on one core, fast path and reference path.

Run: python -m gateway.bench.fingerprint [--seconds S]
The process pins itself to one CPU when the platform allows it (as
`taskset -c 0` would) and reports the best of several rounds.
"""

from __future__ import annotations

import argparse
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

Fingerprinter = Callable[..., object]

# A typical small job: the unique-jobs page's worked example.
JOB: dict[str, Any] = {
    "type": "email.send",
    "queue": "notifications",
    "args": {"user_id": 42, "template": "welcome"},
}
POLICY: dict[str, Any] = {"keys": ["type", "queue", "args"], "args_keys": ["user_id"]}


def rate(compute: Fingerprinter, policy: UniquePolicy, seconds: float, rounds: int = 5) -> float:
    """Best observed fingerprints per second over `rounds` rounds of about `seconds` each."""
    args = (policy, JOB["type"], JOB["queue"], JOB["args"], None)
    batch, best = 1000, 0.0
    for _ in range(rounds):
        done, start = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - start) < seconds / rounds:
            for _ in range(batch):
                compute(*args)
            done += batch
        best = max(best, done / elapsed)
    return best


def pin_to_one_cpu() -> str:
    if not hasattr(os, "sched_setaffinity"):
        return "not pinned (no sched_setaffinity)"
    cpu = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpu})
    return f"pinned to CPU {cpu}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gateway.bench.fingerprint")
    parser.add_argument("--seconds", type=float, default=3.0, help="time per path (default 3)")
    options = parser.parse_args(argv)
    policy = parse_policy(POLICY)
    assert isinstance(policy, UniquePolicy)
    job = (JOB["type"], JOB["queue"], JOB["args"])
    fast, reference = fingerprint(policy, *job), fingerprint_reference(policy, *job)
    if fast != reference:
        raise SystemExit(f"fast path {fast} differs from reference {reference}")
    print(f"job: {JOB} with policy {POLICY}; {pin_to_one_cpu()}")
    for name, compute in (("fast path", fingerprint), ("reference", fingerprint_reference)):
        print(f"{name:>10}: {rate(compute, policy, options.seconds):>10,.0f} fingerprints/s")
    # For scale: the whole per-request parse (envelope, policy, key) the processor runs.
    raw = {**JOB, "unique": POLICY}
    per_second = rate(lambda *_: parse_request(raw), policy, options.seconds)
    print(f"{'parse_request':>10}: {per_second:>10,.0f} requests/s (validation + policy + key)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
