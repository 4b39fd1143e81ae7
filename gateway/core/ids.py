"""Job ids: one authority, so no two live jobs ever share an id, whatever the timing.

Every id has a home: the partition of `requests` its own bytes are routed to (the
route rule's partitioner over the id). A job without a unique key lives there,
since its route is its id. Every other holder of an id is known there too, in
the same log, before anyone can learn the id:

- a keyed job whose id the processor mints gets an id whose home is the very
  partition deciding it (`jobs.uuid7` with `at_home`), and its claim is written
  in the same state write as the job, so a request that names the id, sent
  after any answer (early or committed), comes later in that log and finds it;
  a successor after a crash mints the same id at the same offset;
- a keyed request carrying a client id goes to the id's home first, which
  claims the id for the request's route (or refuses it as taken) and sends it
  on; the route reports back after deciding, and when its job leaves.

A claim belongs to a route. Requests for the route that holds it go on (the
route's own decision then sees the id, see engine `id_taken`); a request for
another route, or for the id itself while a keyed job holds it, is refused as a
taken id. The claim counts the decisions still to come (`pending`) and keeps
the job the route holds under the id (`job`, as last reported); it is released
once no decision is pending and the route holds no job.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.core.decision import Decision
from gateway.core.engine import entry_of, id_taken
from gateway.core.errors import INVALID_REQUEST, GatewayError
from gateway.core.request import Request

# What a claim remembers of the job that holds it, to report it when refusing.
_SUMMARY_FIELDS = ("id", "type", "queue", "state", "created_at", "scheduled_at", "max_attempts")


# Not frozen (see core/envelope.py): a value all the same, hashed by its fields.
@dataclass(slots=True, unsafe_hash=True, init=False)
class IdClaim:
    route: str
    pending: int = 0
    # The job the route holds under the id, as last reported (a summary), or None.
    job: Mapping[str, Any] | None = None

    def __init__(self, route: str, pending: int = 0, job: Mapping[str, Any] | None = None) -> None:
        self.route = route
        self.pending = pending
        self.job = job

    def dump(self) -> bytes:
        return orjson.dumps({"route": self.route, "pending": self.pending, "job": self.job})

    @staticmethod
    def load(raw: bytes | None) -> IdClaim | None:
        if raw is None:
            return None
        data = orjson.loads(raw)
        return IdClaim(str(data["route"]), int(data["pending"]), data.get("job"))


def holder(claim: IdClaim | None, route: str, job_id: str) -> Mapping[str, Any] | None:
    """The job that holds `job_id` against a request for `route`, by the claim at the id's
    home: a claim of another route (its job as last reported, or, while its first decision
    is pending, the id as a waiting job), else None."""
    if claim is None or claim.route == route:
        return None
    return claim.job or {"id": job_id, "state": "available"}


def claim_id(
    claim: IdClaim | None,
    home_job: Mapping[str, Any] | None,
    request: Request,
    route: str,
    now_ms: int,
) -> tuple[IdClaim | None, Decision | None]:
    """At the id's home, a request for another `route` (a keyed job) carrying a client id:
    the claim afterwards, and the refusal if the id is held (None: the request goes on to
    its route). `home_job`: the job living at the home under the id itself, if any."""
    job_id = str(request.envelope.id)
    held = summary(home_job) if home_job is not None else holder(claim, route, job_id)
    if held is not None:
        taken = entry_of({"type": "", "queue": "", **held})
        return claim, id_taken(request, (), now_ms, taken, holds_this_key=False)
    if claim is None:
        return IdClaim(route, pending=1), None
    return IdClaim(route, claim.pending + 1, claim.job), None


def report_id(
    claim: IdClaim | None, route: str, job: Mapping[str, Any] | None, decided: bool
) -> IdClaim | None:
    """A route's report: after a decision a claim sent it (`decided`), or a job that appeared
    (an id minted for it) or left. `job` is the job the route now holds under the id, or None."""
    if claim is None or claim.route != route:
        if job is None or claim is not None:
            return claim  # nothing held here; or another route's claim stands
        return IdClaim(route, 0, summary(job))
    pending = max(claim.pending - 1, 0) if decided else claim.pending
    if pending == 0 and job is None:
        return None
    return IdClaim(route, pending, None if job is None else summary(job))


@dataclass(frozen=True, slots=True)
class IdReport:
    """A route's report to an id's home (see report_id). `answer`: after a decision under an
    idempotency key, the name and bytes of the answer the route keeps for its retries
    (core/idempotency.py's `Answer`), kept at the home too, where retries arrive first."""

    route: str
    job: Mapping[str, Any] | None
    decided: bool
    answer: tuple[str, bytes] | None = None


# The answer a report carries comes last, as the route keeps it, so that its bytes are read
# back as they are (a JSON string never holds this text: its quotes would be escaped).
REPORT_ANSWER = b',"answer":'


def parse_report(value: bytes | None) -> IdReport | GatewayError:
    """A report as a route writes it: {"job_id", "route", "job": object or null, "decided"},
    and after a decision under an idempotency key "answer_name" and "answer" (last)."""
    try:
        data = orjson.loads(value or b"")
    except orjson.JSONDecodeError as exc:
        return GatewayError(INVALID_REQUEST, f"the id report is not valid JSON: {exc}")
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("route"), str)
        or not isinstance(data.get("job"), dict | None)
        or not isinstance(data.get("decided"), bool)
    ):
        return GatewayError(
            INVALID_REQUEST,
            'an id report is {"job_id", "route": string, "job": object or null, "decided": bool}',
        )
    answer = None
    if "answer" in data:
        name, cut = data.get("answer_name"), (value or b"").find(REPORT_ANSWER)
        if not isinstance(name, str) or not isinstance(data["answer"], dict) or cut < 0:
            return GatewayError(
                INVALID_REQUEST, 'an id report\'s "answer" is an object, named by "answer_name"'
            )
        answer = (name, (value or b"")[cut + len(REPORT_ANSWER) : -1])
    return IdReport(data["route"], data["job"], data["decided"], answer)


def summary(job: Mapping[str, Any]) -> dict[str, Any]:
    return {k: job[k] for k in _SUMMARY_FIELDS if job.get(k) is not None}
