"""The processor's output records, built from core decisions and input metadata.

Shapes only: every rule that chooses an outcome lives in gateway.core. This
module turns a Decision (or an event result) into the Kafka records the
processor writes, by topic role, with their keys and headers.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import orjson

from gateway import wire
from gateway.core import (
    UNKNOWN_DIALECT,
    Decision,
    EventOutcome,
    EventResult,
    GatewayError,
    Outcome,
    audit_fields,
    cancellations,
    decide,
    route_key,
)
from gateway.core.decision_records import JOB_REF, on_jobs, published_job
from gateway.core.jobs import job_route
from gateway.core.limits import MAX_ID_BYTES
from gateway.core.times import format_rfc3339

Headers = list[tuple[str, bytes]]


# Source and Output are built for every record and every output: not frozen, since a
# frozen dataclass sets each field through object.__setattr__ (about twice the cost).
@dataclass(slots=True, init=False)
class Source:
    """Where an input record came from, and what it carried besides its value."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    headers: dict[str, bytes]

    def __init__(
        self, topic: str, partition: int, offset: int, timestamp_ms: int, headers: dict[str, bytes]
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.timestamp_ms = timestamp_ms
        self.headers = headers

    def as_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "offset": self.offset}

    @property
    def seed(self) -> bytes:
        """Identifies the record, so ids derived from it replay identically."""
        return f"{self.topic}/{self.partition}/{self.offset}".encode()

    @property
    def is_job_event(self) -> bool:
        return self.headers.get(wire.KIND_HEADER) == wire.JOB_EVENT

    def header(self, name: str) -> str | None:
        value = self.headers.get(name)
        return None if value is None else value.decode("utf-8", "replace")


@dataclass(slots=True, init=False)
class Output:
    """One record to produce: to a catalogue role, or to a reply topic by name."""

    value: bytes | None  # None: a tombstone
    key: bytes | None
    role: str | None = None
    topic: str | None = None
    headers: Headers | None = None
    # The partition, for an audit record: the one its source record came from, so that
    # each partition's audit trail sits beside its input (None: by key).
    partition: int | None = None
    # A duplicate's decision record as its audit record writes it, naming the job it met
    # instead of carrying it: (those bytes, the key's route, the job record's name), for the
    # trail, which writes them when the state it carries holds that job (stage/trail.py).
    referenced: tuple[bytes, str, str] | None = None

    def __init__(
        self,
        value: bytes | None,
        key: bytes | None,
        role: str | None = None,
        topic: str | None = None,
        headers: Headers | None = None,
        partition: int | None = None,
        referenced: tuple[bytes, str, str] | None = None,
    ) -> None:
        self.value = value
        self.key = key
        self.role = role
        self.topic = topic
        self.headers = headers
        self.partition = partition
        self.referenced = referenced


def command_reply(source: Source, key: bytes | None, record: dict[str, Any]) -> Output | None:
    """For a command that asked (reply_to), what became of it: `outcome` (applied or
    invalid), the `error` if invalid, and what the command changed."""
    reply_to = source.header(wire.REPLY_TO_HEADER)
    if not reply_to:
        return None
    correlation = source.headers.get(wire.CORRELATION_ID_HEADER, b"")
    record = {**record, "partition": source.partition, "source": source.as_dict()}
    return Output(
        _json(record), key or source.seed, topic=reply_to,
        headers=[(wire.CORRELATION_ID_HEADER, correlation)],
    )  # fmt: skip


def refused_command(source: Source, error: GatewayError, key: bytes | None = None) -> list[Output]:
    reply = command_reply(
        source, key, {"outcome": str(EventOutcome.INVALID), "error": error.to_dict()}
    )
    return [] if reply is None else [reply]


def headers_of(raw: Any) -> dict[str, bytes]:
    """Kafka headers (a list of pairs, a mapping or None) as a dict of bytes; last one wins."""
    if not raw:
        return {}
    pairs = raw.items() if isinstance(raw, dict) else raw
    return {k: (v if isinstance(v, bytes) else str(v).encode()) for k, v in pairs if v is not None}


def request_id(source: Source, value: object) -> str:
    """The request_id header, else the request's own field, else its place in the log;
    an id longer than MAX_ID_BYTES is not taken (it would be copied into every output)."""
    from_header = source.header(wire.REQUEST_ID_HEADER)
    if from_header and len(from_header) <= MAX_ID_BYTES:
        return from_header
    given = value.get("request_id") if isinstance(value, dict) else None
    if isinstance(given, str) and given and len(given) <= MAX_ID_BYTES:
        return given
    return f"{source.topic}/{source.partition}/{source.offset}"


def decision_outputs(
    decision: Decision, source: Source, req_id: str, dialect: str,
    details: dict[str, Any] | None = None, job_ref: str | None = None,
) -> list[Output]:  # fmt: skip
    """Everything one decision writes: cancellations, the job, a rejection, the record;
    `details`: a refusal's, in its rejection and its record; `job_ref`: the name of the job
    record in the key's state its existing job was shown from, which its audit record
    names instead of carrying the job (core/decision_records.py, JOB_REF)."""
    key = decision.unique_key.encode() if decision.unique_key else None
    key_header: Headers = [(wire.UNIQUE_KEY_HEADER, key)] if key else []
    outputs = [
        Output(_json(c), key, role="cancellations", headers=key_header)
        for c in cancellations(decision)
    ]
    job: bytes | None = None
    if decision.job is not None:
        job = _json(decision.job)
        if on_jobs(decision):
            route = route_key(decision.unique_key, str(decision.job["id"])).encode()
            outputs.append(Output(job, route, role="jobs", headers=key_header))
    if decision.error is not None:
        envelope = rejection(
            decision.error, req_id, source, details or _duplicate_details(decision)
        )
        outputs.append(Output(_json(envelope), key, role="rejections"))
    record = decision_record(decision, source, req_id, dialect)
    if details is not None:
        record["details"] = details
    if job is not None:
        record["job"] = orjson.Fragment(job)  # the same bytes, not encoded twice
    referenced = None
    if (
        job_ref is not None and decision.job is None and details is None
        and decision.existing_state is not None and decision.unique_key is not None
    ):  # fmt: skip
        # `job` is the record's last field: the record without it, then either ending.
        shown = record.pop("job")
        head = _json(record)[:-1]
        value = b'%b,"job":%b}' % (head, _json(shown))
        referenced = (b'%b,"%b":%b}' % (head, JOB_REF.encode(), _json(job_ref)),
                      decision.unique_key, job_ref)  # fmt: skip
    else:
        value = _json(record)
    id_header: Headers = [(wire.REQUEST_ID_HEADER, req_id.encode())]
    outputs.append(Output(
        value, key, role="decisions", headers=id_header, partition=source.partition,
        referenced=referenced,
    ))  # fmt: skip
    reply_to = source.header(wire.REPLY_TO_HEADER)
    if reply_to:
        correlation = source.headers.get(wire.CORRELATION_ID_HEADER, req_id.encode())
        # Never a null key: a compacted reply topic refuses one.
        outputs.append(Output(
            value, key or req_id.encode(), topic=reply_to,
            headers=[(wire.CORRELATION_ID_HEADER, correlation)],
        ))  # fmt: skip
    return outputs


def released_output(job: dict[str, Any], unique_key: str) -> Output:
    """A key's successor on `jobs`, released as its job finished: as a new job is."""
    published = published_job(job)
    key = unique_key.encode()
    return Output(_json(published), key, role="jobs", headers=[(wire.UNIQUE_KEY_HEADER, key)])


def refused_request(
    source: Source, error: GatewayError, dialect: str = UNKNOWN_DIALECT, raw: object = None,
    details: dict[str, Any] | None = None,
) -> list[Output]:  # fmt: skip
    """What a request refused before it could be decided writes: as any invalid decision."""
    decision = decide((), error, source.timestamp_ms, seed=source.seed)
    return decision_outputs(decision, source, request_id(source, raw), dialect, details)


def refused_event(source: Source, error: GatewayError) -> list[Output]:
    """What an event refused before it could be applied writes: its reply, if it asked."""
    reply = event_reply(EventResult(EventOutcome.INVALID, error=error), None, source)
    return [] if reply is None else [reply]


def job_state(job: dict[str, Any], encoded: bytes | None = None) -> Output:
    """The job as it is now, for `job_states` (compacted, keyed by job id); `encoded`: its
    JSON, when known."""
    return Output(encoded or _json(job), str(job["id"]).encode(), role="job_states")


def stored_json(
    encoded: bytes | None, decided: dict[str, Any], stored: dict[str, Any]
) -> bytes | None:
    """A new job's record as JSON from the decided job's (`stored_job` adds its route and
    partition at the end), without encoding the job again; None when it cannot be so."""
    if encoded is None or "route" in decided or "partition" in decided:
        return None
    return b'%b,"route":%b,"partition":%d}' % (
        encoded[:-1], _json(stored["route"]), stored["partition"],
    )  # fmt: skip


def job_state_tombstone(job_id: str) -> Output:
    """The end of a job on `job_states`: its record left the processor's store."""
    return Output(None, job_id.encode(), role="job_states")


def cancellation(job: dict[str, Any], previous: str, unique_key: Any) -> Output:
    """A cancellation record for the job's worker, keyed like every record about the job."""
    record = {
        "job_id": job["id"],
        "unique_key": unique_key,
        "previous_state": previous,
        "reason": "cancelled",
        "replaced_by": None,
        "cancelled_at": job.get("cancelled_at"),
    }
    key = job_route(job).encode()
    return Output(_json(record), key, role="cancellations")


def event_reply(result: EventResult, route: str | None, source: Source) -> Output | None:
    """For an event that asked (reply_to), what became of it, once it is committed.

    A caller that waits for this knows the next decision on the key sees the
    event; `job` is the job as it stands after it (moved or not).
    """
    reply_to = source.header(wire.REPLY_TO_HEADER)
    if not reply_to:
        return None
    record = {
        "job_id": result.job_id,
        "unique_key": None if result.job is None else result.job.get("unique_key"),
        "route": route,
        **event_summary(result),
        "job": result.job,
        "deleted": result.deleted,
        "source": source.as_dict(),
    }
    correlation = source.headers.get(wire.CORRELATION_ID_HEADER, b"")
    # Never a null key: a compacted reply topic refuses one.
    key = (route or result.job_id or "").encode() or source.seed
    headers = [(wire.CORRELATION_ID_HEADER, correlation)]
    return Output(_json(record), key, topic=reply_to, headers=headers)


def event_summary(result: EventResult) -> dict[str, Any]:
    """What an event did: in its reply, and in its audit record."""
    return {
        "outcome": str(result.outcome),
        "reason": None if result.reason is None else str(result.reason),
        "previous_state": None if result.previous_state is None else str(result.previous_state),
        "state": None if result.state is None else str(result.state),
        "error": None if result.error is None else result.error.to_dict(),
    }


def decision_record(
    decision: Decision, source: Source, req_id: str, dialect: str
) -> dict[str, Any]:
    """The audit record: one per request, whatever became of it."""
    record = {"request_id": req_id, **audit_fields(decision)}
    record.update(
        decided_at=format_rfc3339(decision.decided_at),
        source=source.as_dict(),
        dialect=dialect,
        job=decision.job if decision.job is not None else decision.existing_job,
    )
    return record


def rejection(
    error: GatewayError, req_id: str, source: Source, details: dict[str, Any] | None = None
) -> dict[str, Any]:
    """An OJS error envelope, with where the refused request came from."""
    return {
        "error": {
            "code": error.code,
            "message": error.message,
            "retryable": False,
            "details": details or {},
            "request_id": req_id,
        },
        "source": source.as_dict(),
    }


def _duplicate_details(decision: Decision) -> dict[str, Any] | None:
    if decision.outcome is not Outcome.REJECTED or decision.existing is None:
        return None
    return {
        "existing_job_id": decision.existing.job_id,
        "existing_job_state": str(decision.existing_state),
        "unique_key": decision.unique_key,
    }


def record_size(output: Output) -> int:
    """The bytes a record puts against its topic's max.message.bytes, framing aside."""
    size = len(output.key or b"") + len(output.value or b"")
    for name, value in output.headers or ():
        size += len(name.encode()) + len(value)
    return size


# How much of a failed record its dead letter keeps: enough to read and re-send
# a request, never more than the topic takes.
DEAD_VALUE_BYTES = 256 * 1024
DEAD_KEY_BYTES = 1024
DEAD_HEADERS = 32
DEAD_HEADER_BYTES = 1024


def dead_letter(
    stage: str, source: Source, value: bytes | None, key: bytes | None, cause: str
) -> Output:
    """A failed record, bounded, with where it came from and why it failed."""
    value = value or b""
    headers = list(source.headers.items())
    record = {
        "stage": stage,
        "error": cause,
        "source": {**source.as_dict(), "timestamp_ms": source.timestamp_ms},
        "key": _b64(key, DEAD_KEY_BYTES),
        "value": _b64(value, DEAD_VALUE_BYTES),
        "value_bytes": len(value),
        "headers": [
            {"name": name[:DEAD_HEADER_BYTES], "value": _b64(raw, DEAD_HEADER_BYTES)}
            for name, raw in headers[:DEAD_HEADERS]
        ],
        "truncated": (
            len(value) > DEAD_VALUE_BYTES or len(key or b"") > DEAD_KEY_BYTES
            or len(headers) > DEAD_HEADERS
            or any(len(n) > DEAD_HEADER_BYTES or len(v) > DEAD_HEADER_BYTES for n, v in headers)
        ),
    }  # fmt: skip
    return Output(_json(record), source.seed, role="dead_letters")


def _b64(data: bytes | None, limit: int) -> str | None:
    return None if data is None else base64.b64encode(data[:limit]).decode()


def _json(value: Any) -> bytes:
    return orjson.dumps(value)
