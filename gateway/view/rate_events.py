"""OJS rate limiting's events (RL-006), derived from a rate key's state as its home
publishes it on `job_states` (core/rates.py), like the lifecycle events (events.py): the
same on every serve process, from the record alone.

- `rate_limit.exceeded` {key, strategy, limit, current}: a permit granted left the key with
  none (its next claim waits until one is given back, or the window moves on); `strategy`
  names the limit it reached, `concurrency` or `rate`. Its time is the grant's.
- `rate_limit.released` {key, strategy: "concurrency", job_id}: a job gave its permit back
  (it left active, or its claim did not apply). The state holds no time of it: `time` is
  null.

A refused claim changes no state and so is no event: `exceeded` tells when claims begin to
wait. `rate_limit.dropped` {key, job_id, job_type} is derived from the job's own record: a
job its on_limit `drop` discarded (core/rate_moves.py), at its discarded_at.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.core.rates import RATE_LIMITED, RateState, overridden, permits, window
from gateway.core.times import format_rfc3339

SOURCE = "ojs://gateway/rate_limits"


def is_rate_state(state: Mapping[str, Any] | None) -> bool:
    return state is not None and "holders" in state and "key" in state


def derive_rate(
    partition: int, offset: int, before: Mapping[str, Any] | None, after: Mapping[str, Any] | None
) -> list[dict[str, Any]]:
    """The events one published rate key state amounts to, beside the one before it."""
    was, now = RateState.load(before), RateState.load(after)
    key = (now or was).key if (now or was) is not None else None  # type: ignore[union-attr]
    if key is None:
        return []
    held_before = {} if was is None else {h[0]: h for h in was.holders}
    held_after = {} if now is None else {h[0]: h for h in now.holders}
    found: list[tuple[str, str | None, dict[str, Any]]] = []
    for permit, (_, job_id, _) in held_before.items():
        if permit not in held_after:
            found.append(("rate_limit.released", None,
                          {"key": key, "strategy": "concurrency", "job_id": job_id}))  # fmt: skip
    granted = [h for p, h in held_after.items() if p not in held_before]
    if now is not None and granted and now.policy is not None:
        at = max(h[2] for h in granted)
        if permits(now, now.policy, at) == 0:
            found.append(("rate_limit.exceeded", format_rfc3339(at), _reached(now, at)))
    return [
        {
            "specversion": "1.0", "id": f"evt_{partition}-{offset}-r{index}", "type": kind,
            "source": SOURCE, "time": time, "subject": key,
            "datacontenttype": "application/json", "data": data,
        }
        for index, (kind, time, data) in enumerate(found)
    ]  # fmt: skip


def _reached(state: RateState, at: int) -> dict[str, Any]:
    rule = overridden(state, state.policy, at)
    assert rule is not None
    held = len(state.holders)
    if rule.concurrency is not None and held >= rule.concurrency:
        return {"key": state.key, "strategy": "concurrency", "limit": rule.concurrency,
                "current": held}  # fmt: skip
    return {"key": state.key, "strategy": "rate", "limit": rule.limit,
            "current": len(window(state.starts, rule, at))}  # fmt: skip


def dropped_event(
    partition: int, offset: int, was: Any, job: Mapping[str, Any]
) -> dict[str, Any] | None:
    """`rate_limit.dropped` for a job record its on_limit `drop` just discarded; else None."""
    error = job.get("error")
    policy = job.get("rate_limit")
    if (
        job.get("state") != "discarded" or was not in ("available", "scheduled")
        or not isinstance(error, Mapping) or error.get("type") != RATE_LIMITED
        or not isinstance(policy, Mapping)
    ):  # fmt: skip
        return None
    return {
        "specversion": "1.0", "id": f"evt_{partition}-{offset}-d", "type": "rate_limit.dropped",
        "source": SOURCE, "time": job.get("discarded_at"), "subject": policy.get("key"),
        "datacontenttype": "application/json",
        "data": {"key": policy.get("key"), "job_id": job.get("id"), "job_type": job.get("type")},
    }  # fmt: skip
