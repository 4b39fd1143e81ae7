"""A fetch's view of rate permits: whether a job's rate keys (its own, its queue's:
core/queue_rates.py) show a permit beside what the fetch proposed already and this process's
claims in flight. Advisory: each key's home decides (core/rates.py); a stale view costs one
refused claim.
"""

from __future__ import annotations

from typing import Any

from gateway import wire
from gateway.core import State
from gateway.core.queue_rates import needed as needed_keys
from gateway.core.queue_rates import policy_in
from gateway.core.rate_policy import WAIT, RateLimit, job_policy
from gateway.core.rates import RateState, permits
from gateway.http.binding import Binding

MOVED = "\x00moved"  # beside a rate slot: a job its on_limit moves was proposed
FULL_SEP = "\x01"  # between the keys one Full names


def rate_slot(key: str) -> str:
    """A rate key among the keys a fetch counts slots of (apart from unique keys)."""
    return "rate\x00" + key


def rate_permit(
    binding: Binding, job: dict[str, Any], taken: dict[str, int], full: set[str], now_ms: int
) -> bool:
    """Whether the view shows each rate key the job needs (its own, its queue's) a permit
    beside the jobs proposed already and this process's claims in flight (advisory: the
    keys' homes decide). A job whose on_limit moves it is proposed once a fetch without one
    of its own key, so that the home's refusal reschedules or drops it (core/rate_moves.py)."""
    own = job_policy(job)
    needed = rate_keys(binding, job)
    if not needed:
        return True
    slots = [rate_slot(p.key) for p in needed]
    if any(slot in full for slot in slots):
        return False
    for policy, slot in zip(needed, slots, strict=True):
        if slot not in taken:
            state = RateState.load(binding.view.controls(wire.rate_home(policy.key)).get(""))
            taken[slot] = permits(state, policy, now_ms) - _in_flight(binding, policy.key)
    short = [s for s in slots if taken[s] <= 0]
    if not short:
        for slot in slots:
            taken[slot] -= 1
        return True
    moved = own is not None and own.on_limit != WAIT and short == [rate_slot(own.key)]
    if not moved or short[0] + MOVED in taken:
        return False
    taken[short[0] + MOVED] = 1
    return True


def _queue_limits(binding: Binding, queue: object) -> RateLimit | None:
    """The queue's rate limit as this view last read it (core/queue_rates.py)."""
    if not isinstance(queue, str):
        return None
    return policy_in(binding.view.controls(wire.queue_rate_key(queue)).get(""))


def rate_keys(binding: Binding, job: dict[str, Any]) -> tuple[RateLimit, ...]:
    """The rate keys a claim of the job needs a permit of (core/queue_rates.py)."""
    return needed_keys(job_policy(job), _queue_limits(binding, job.get("queue")))


def _in_flight(binding: Binding, key: str) -> int:
    """This process's claims in flight of waiting jobs that need a permit of `key`."""
    claiming = (binding.view.get(i) for i in list(binding.claims))
    return sum(
        1 for j in claiming
        if j is not None and j.get("state") != State.ACTIVE
        and any(p.key == key for p in rate_keys(binding, j))
    )  # fmt: skip
