"""The generated workload every system gets: the same jobs, in the same order.

A share of the requests repeats an earlier job (same body, so the same
uniqueness key); the rest are new jobs. Policies are mostly `reject` and
`ignore`, some with a period. Periods are far longer than a run, so every
system must find exactly the repeats to be duplicates: that is the check.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.core import Request, parse_request_json

PERIOD = "PT6H"
PERIOD_MS = 6 * 3600 * 1000
# Without a period a key is held for the job's life; Redis gets the retention as its TTL.
HOLD_MS = 7 * 24 * 3600 * 1000
# (on_conflict, period) and their weights: mostly reject and ignore, some with a period.
POLICY_MIX = (
    ("reject", None, 45), ("ignore", None, 40), ("reject", PERIOD, 8), ("ignore", PERIOD, 7),
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Item:
    key: str  # the fingerprint, as the gateway computes it
    value: bytes  # the job as sent (OJS envelope with its unique policy)
    ttl_ms: int


@dataclass(frozen=True)
class Workload:
    items: tuple[Item, ...]
    duplicate_share: float
    seed: int

    @property
    def distinct(self) -> int:
        return len({item.key for item in self.items})

    @property
    def duplicates(self) -> int:
        return len(self.items) - self.distinct

    def describe(self) -> dict[str, object]:
        return {
            "requests": len(self.items), "distinct_keys": self.distinct,
            "duplicates": self.duplicates, "duplicate_share": self.duplicate_share,
            "seed": self.seed,
            "policy_mix": [
                {"on_conflict": c, "period": p, "weight": w} for c, p, w in POLICY_MIX
            ],
        }  # fmt: skip


def generate(requests: int, duplicate_share: float, seed: int, tag: str = "") -> Workload:
    """`requests` jobs; each one after the first repeats an earlier job with the given share.

    `tag` makes every key new (a second workload beside the first one).
    """
    rng = random.Random(seed)
    fresh: list[Item] = []
    items: list[Item] = []
    weights = [w for *_, w in POLICY_MIX]
    for n in range(requests):
        if fresh and rng.random() < duplicate_share:
            items.append(rng.choice(fresh))
            continue
        on_conflict, period, _ = rng.choices(POLICY_MIX, weights)[0]
        unique: dict[str, object] = {
            "keys": ["type", "args"], "args_keys": ["user_id"], "on_conflict": on_conflict,
        }  # fmt: skip
        if period:
            unique["period"] = period
        job = {
            "type": "bench.job",
            "args": {"user_id": f"{tag}{seed}-{n}", "plan": rng.choice(("free", "pro"))},
            "unique": unique,
        }
        item = _item(job, PERIOD_MS if period else HOLD_MS)
        fresh.append(item)
        items.append(item)
    return Workload(tuple(items), duplicate_share, seed)


def _item(job: Mapping[str, Any], ttl_ms: int) -> Item:
    value = orjson.dumps(job)
    request = parse_request_json(value)
    assert isinstance(request, Request) and request.unique_key, request
    return Item(request.unique_key, value, ttl_ms)
