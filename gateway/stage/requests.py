"""The handler of requests: decided by `core.decide`, or sent where they must go first.

Routing. A job lives under its route (`wire.route`): its unique_key, else its id. The SDK
and the router give a job without a policy an id before it reaches `requests` and key it
by that id, so its requests and events meet in one key's state like a fingerprint's; a
request with neither that arrives on `requests` anyway is sent back through `intake` to
get one. A keyed job's client id is claimed at the id's home first (core/ids.py), and a
counted tenant's job passes its tenant's home after that (stage/tenants.py).

Every accepted job is stored in its route's state (`job/<id>`) and written to
`job_states`, in the same transaction as its decision (shared.py keeps the records).
"""

from __future__ import annotations

import logging
from typing import Any

from gateway import wire
from gateway.core import Decision, Entry, GatewayError, Outcome, Request, decide, stored_job
from gateway.core.decision_records import published_job
from gateway.core.lifecycle import cancelled_by_replace
from gateway.core.tenant_limits import SLOT_FIELD, reserved_key_refusal
from gateway.core.updates import updated_record, wants_records
from gateway.partitioner import partition_for
from gateway.stage.context import Staged
from gateway.stage.idempotency import Idempotency
from gateway.stage.ids import Ids
from gateway.stage.parsing import dialect_of, parse_limited
from gateway.stage.records import (
    Output,
    Source,
    decision_outputs,
    refused_request,
    request_id,
    stored_json,
)
from gateway.stage.shared import Shared
from gateway.stage.tenants import Tenants, given_back, refusal_of, slot_of
from gateway.stage.trail import JOB

log = logging.getLogger("gateway.processor")


class Requests:
    def __init__(
        self, shared: Shared, ids: Ids, idempotency: Idempotency, tenants: Tenants
    ) -> None:
        self._shared = shared
        self._ids = ids
        self._idempotency = idempotency
        self._tenants = tenants

    def refused(self, source: Source, error: GatewayError, _key: bytes | None) -> list[Output]:
        """What a request refused before it was decided writes: as any invalid decision,
        and the place its tenant's home took for it given back."""
        outputs = refused_request(source, error)
        slot = slot_of(source)
        return outputs if slot is None else [*outputs, given_back(slot)]

    def handle(self, value: bytes | None, key: bytes | None, source: Source, state: Staged) -> bool:
        """Decide a request (True), or send it where it must go first (False)."""
        shared = self._shared
        request = parse_limited(value, shared.limits, source.headers)
        idem = self._idempotency.key_of(source) if isinstance(request, Request) else None
        if idem is not None and self._idempotency.unchecked(source):
            self._idempotency.at_home(request, value, key, source, state, idem)  # type: ignore[arg-type]
            return False
        if isinstance(request, Request) and _unclaimed(request, source):
            home = str(request.envelope.id).encode()
            if key == home and self._ids.home(home) == source.partition:
                # A retry under an idempotency key gets its first answer here, where every
                # attempt arrives first, before the id's claim could decide it otherwise.
                if idem is not None and self._idempotency.replayed_at_home(
                    source, key, state, idem
                ):
                    return True
                self._ids.claim(request, value, source, state)
            else:
                again = Output(value or b"", home, "requests", headers=list(source.headers.items()))
                shared.emit(again, source)
            return False
        tenant = self._tenants.unplaced(request, source) if isinstance(request, Request) else None
        if tenant is not None and self._tenants.is_home(tenant, key, source.partition):
            self._tenants.at_home(request, tenant, value, key, source, state)  # type: ignore[arg-type]
            return False
        if isinstance(request, Request) and self._misrouted(request, key, source.partition):
            self._reroute(request, value, key, source)
            return False
        slot = slot_of(source)
        if idem is not None and self._idempotency.replayed(source, key, state, idem):
            if slot is not None:
                shared.emit(given_back(slot), source)
            return True
        if tenant is not None:
            # Its tenant's home next (after a retry's first answer: never refused for a
            # limit it passed once), which sends it back here.
            self._tenants.at_home(request, tenant, value, key, source, state)  # type: ignore[arg-type]
            return False
        tenant_refusal = refusal_of(source)
        own = request.envelope.rate_limit if isinstance(request, Request) else None
        reserved = reserved_key_refusal(None if own is None else own.key, slot is not None)
        if tenant_refusal is None and reserved is not None:
            tenant_refusal = reserved, {}
        if tenant_refusal is not None:
            # Its tenant's home found it over a limit: the route answers, so that a claimed
            # id learns of it; not kept for an idempotency key, whose retry may pass later.
            error, details = tenant_refusal
            dialect = dialect_of(request, value)
            raw = request.envelope.raw if isinstance(request, Request) else None
            for output in refused_request(source, error, dialect, raw, details):
                shared.emit(output, source)
            shared.metrics.decided(Outcome.INVALID, dialect, source.timestamp_ms)
            return True
        unique_key = request.unique_key if isinstance(request, Request) else None
        entries = shared.load_entries(state) if unique_key else ()
        known = self._ids.known(state, request) if isinstance(request, Request) else None
        records = _records(entries, state, shared) if wants_records(request) else None
        decision = decide(
            entries, request, source.timestamp_ms, shared.limits.retention_ms,
            seed=source.seed, known=known, at_home=self._ids.at_home(source.partition),
            records=records,
        )  # fmt: skip
        if unique_key:
            shared.store_entries(state, entries, decision.entries, source.timestamp_ms)
        decision, job_ref = self._existing_in_full(decision, state)
        raw = request.envelope.raw if isinstance(request, Request) else None
        dialect = dialect_of(request, value)
        encoded = None  # the new job's JSON, as the jobs topic gets it
        req_id = request_id(source, raw)
        for output in decision_outputs(decision, source, req_id, dialect, job_ref=job_ref):
            shared.emit(output, source)
            if output.role == "jobs":
                encoded = output.value
            elif output.role == "decisions" and idem is not None and output.value is not None:
                self._idempotency.keep(source, state, idem, output.value)
        made = self._record_jobs(decision, state, source, encoded, slot)
        if slot is not None and not made:
            shared.emit(given_back(slot), source)
        shared.metrics.decided(decision.outcome, dialect, source.timestamp_ms)
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "decided",
                extra={"outcome": str(decision.outcome), "unique_key": decision.unique_key},
            )
        return True

    def _reroute(
        self, request: Request, value: bytes | None, key: bytes | None, source: Source
    ) -> None:
        """Deciding here could let two copies of one fingerprint be decided on two
        partitions: keyed by its route, it lands where that route is decided; one without
        an id goes through the router, which gives it one."""
        self._shared.metrics.reroutes.inc()
        log.warning("request on the wrong partition re-routed", extra={"source": source.as_dict()})
        route = wire.route(request)
        headers = list(source.headers.items())
        again = (
            Output(value or b"", key, role="intake", headers=headers)
            if route is None
            else Output(value or b"", route.encode(), role="requests", headers=headers)
        )
        self._shared.emit(again, source)

    def _existing_in_full(self, decision: Decision, state: Staged) -> tuple[Decision, str | None]:
        """The job a duplicate matched, reported as its record holds it (an entry keeps only
        what deciding needs): an ignored request's caller gets the whole job back. With
        the name of the record it was read from, if it was."""
        existing = decision.existing
        if existing is None or existing.job is not None:
            return decision, None
        record = self._shared.load_job(state, existing.job_id)
        if record is None:
            return decision, None
        shown = decision.with_existing(existing.with_job(published_job(record)))
        return shown, JOB + existing.job_id

    def _misrouted(self, request: Request, key: bytes | None, partition: int) -> bool:
        route = wire.route(request)
        if route is None:
            return True  # no key and no id: the router gives it an id to route by
        wanted = route.encode()
        return key != wanted or partition_for(wanted, self._shared.partitions) != partition

    def _record_jobs(
        self, decision: Decision, state: Staged, source: Source, encoded: bytes | None,
        slot: dict[str, Any] | None,
    ) -> bool:  # fmt: skip
        """Store and publish the jobs a decision made or moved: a new one (`encoded`: its
        JSON, whose record is encoded from it), holding its tenant's `slot`, a duplicate
        kept as a job (dead or rescheduled: never on `jobs` here), replaced ones cancelled,
        an updated one (Oban's replace) with its changed fields. Whether a job it made took
        the tenant's place (the caller's new job, or the duplicate kept)."""
        shared = self._shared
        if decision.outcome is Outcome.UPDATED and decision.job is not None:
            # The stored record keeps what the update does not touch (attempts, stamps).
            stored = shared.load_job(state, str(decision.job["id"]))
            if stored is not None:
                shared.put_job(state, updated_record(stored, decision), source)
                return False
        made = decision.job is not None and decision.outcome is not Outcome.UPDATED
        if decision.job is not None:
            job_id = str(decision.job["id"])
            job = stored_job(decision.job, decision.unique_key, source.partition)
            route = job["route"]
            if slot is None or not made:
                shared.put_job(state, job, source, stored_json(encoded, decision.job, job))
            else:
                shared.put_job(state, {**job, SLOT_FIELD: slot}, source)
            if route != job_id and source.header(wire.CLAIMED_ID_HEADER) != job_id:
                self._ids.minted(source, job, route)
        if decision.duplicate is not None:  # a duplicate kept as a job: dead or rescheduled
            job = stored_job(decision.duplicate, decision.unique_key, source.partition)
            # It takes the request's place: a rescheduled one waits in it until it starts,
            # a dead one gives it back as it is stored (put_job), as any job that ended.
            shared.put_job(state, job if slot is None else {**job, SLOT_FIELD: slot}, source)
            made = slot is not None
            if source.header(wire.CLAIMED_ID_HEADER) != job["id"]:
                self._ids.minted(source, job, job["route"])
        for entry in decision.cancelled:
            old = shared.load_job(state, entry.job_id)
            cancelled = None if old is None else cancelled_by_replace(old, decision.decided_at)
            if cancelled is not None:
                shared.put_job(state, cancelled, source)
        return made


def _records(entries: tuple[Entry, ...], state: Staged, shared: Shared) -> dict[str, Any]:
    """The job records of the key's live entries, for a request that may debounce one."""
    records = {}
    for entry in entries:
        if not entry.terminal:
            record = shared.load_job(state, entry.job_id)
            if record is not None:
                records[entry.job_id] = record
    return records


def _unclaimed(request: Request, source: Source) -> bool:
    """A keyed request with a client id its home has not claimed for it."""
    job_id = request.envelope.id
    return (
        job_id is not None
        and wire.route(request) != job_id
        and source.header(wire.CLAIMED_ID_HEADER) != job_id
    )
