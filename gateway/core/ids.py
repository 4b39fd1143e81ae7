"""Job ids: one authority, so no two live jobs ever share an id.

A job is decided under its route (its unique key, else its id), so two
requests with the same client id and different keys would be decided on two
partitions, each blind to the other. The id stage therefore claims every
client id first, in a log keyed by the id itself, before the request goes on
to its route: one id, one partition, one order.

A claim belongs to a route. Requests for the route that holds it go on (the
route's own decision then sees the id, see engine `id_taken`); a request for
another route is refused as a taken id. The route reports back after each
decision a claim sent it, and whenever a job appears or leaves: the claim
counts the decisions still to come (`pending`) and whether the route holds a
job with the id (`job`, as last reported). It is released once no decision is
pending and the route holds no job. Jobs whose ids the gateway minted are
reported too, once their job is accepted, so a client cannot take one afterwards.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.core.engine import Decision, entry_of, id_taken
from gateway.core.request import Request

# What a claim remembers of the job that holds it, to report it when refusing.
_SUMMARY_FIELDS = ("id", "type", "queue", "state", "created_at", "scheduled_at", "max_attempts")


@dataclass(frozen=True, slots=True)
class IdClaim:
    route: str
    pending: int = 0
    # The job the route holds under the id, as last reported (a summary), or None.
    job: Mapping[str, Any] | None = None

    def dump(self) -> bytes:
        return orjson.dumps({"route": self.route, "pending": self.pending, "job": self.job})

    @staticmethod
    def load(raw: bytes | None) -> IdClaim | None:
        if raw is None:
            return None
        data = orjson.loads(raw)
        return IdClaim(str(data["route"]), int(data["pending"]), data.get("job"))


def claim_id(
    claim: IdClaim | None, request: Request, route: str, now_ms: int
) -> tuple[IdClaim | None, Decision | None]:
    """A request for `route` carrying a client id: the claim afterwards, and the refusal
    if another route holds the id (None: the request goes on to its route)."""
    if claim is None:
        return IdClaim(route, pending=1), None
    if claim.route == route:
        return IdClaim(route, claim.pending + 1, claim.job), None
    holder = claim.job or {"id": request.envelope.id, "state": "available"}
    taken = entry_of({"type": "", "queue": "", **holder})
    return claim, id_taken(request, (), now_ms, taken, holds_this_key=False)


def report_id(
    claim: IdClaim | None, route: str, job: Mapping[str, Any] | None, decided: bool
) -> IdClaim | None:
    """A route's report: after a decision a claim sent it (`decided`), or a job that appeared
    or left. `job` is the job the route now holds under the id, or None."""
    if claim is None or claim.route != route:
        if job is None or claim is not None:
            return claim  # nothing held here; or another route's claim stands
        return IdClaim(route, 0, summary(job))
    pending = max(claim.pending - 1, 0) if decided else claim.pending
    if pending == 0 and job is None:
        return None
    return IdClaim(route, pending, None if job is None else summary(job))


def summary(job: Mapping[str, Any]) -> dict[str, Any]:
    return {k: job[k] for k in _SUMMARY_FIELDS if job.get(k) is not None}
