"""The pure core: unique policy, fingerprint, decision engine, job-state events.

No I/O, no clock, no Kafka. The processor calls, per request record,
`parse_request_json` (any dialect) then `decide`, and per job-state event
`parse_event_json` (job_events.py) then `apply_job_event` (lifecycle.py; the
key's entries `follow` the job, what a move writes is moves.py's), and
`expire_job` (leases.py) when event time passes a job's `job_deadline` (an
active job's lease or timeout, a waiting job's expires_at).
"""

from gateway.core.decision import Change, Decision, Outcome
from gateway.core.decision_records import audit_fields, cancellations
from gateway.core.dialects import (
    DIALECTS,
    UNKNOWN_DIALECT,
    parse_request,
    parse_request_json,
    requested_dialect,
)
from gateway.core.engine import decide
from gateway.core.entries import (
    DEFAULT_RETENTION_MS,
    Entry,
    dump_entries,
    effective_state,
    entry_expires_at,
    expires_at,
    load_entries,
    prune,
)
from gateway.core.envelope import Envelope
from gateway.core.errors import (
    DUPLICATE,
    INTERNAL,
    INVALID_EVENT,
    INVALID_PAYLOAD,
    INVALID_REQUEST,
    PAYLOAD_TOO_LARGE,
    UNSUPPORTED_OPTION,
    GatewayError,
)
from gateway.core.fingerprint import canonical_form, fingerprint, fingerprint_reference
from gateway.core.holder import (
    FaktoryRule,
    Holder,
    Relock,
    StatesKind,
    StatesRule,
    UniqueUntil,
    ZizqRule,
    ZizqScope,
)
from gateway.core.job_events import JobEvent, parse_event, parse_event_json
from gateway.core.jobs import route_key, stored_job, uuid7
from gateway.core.leases import attempt_deadline, expire_job, job_deadline, past_expiry
from gateway.core.lifecycle import apply_job_event, job_effective_state, transition_events
from gateway.core.matching import Holding, holds
from gateway.core.moves import EventOutcome, EventResult, IgnoredReason, ready_at
from gateway.core.policy import Dimension, Judge, OnConflict, PeriodFrom, UniquePolicy, parse_policy
from gateway.core.request import OJS, Request
from gateway.core.retry import RetryPolicy
from gateway.core.states import DEFAULT_UNIQUE_STATES, TERMINAL_STATES, State

__all__ = [
    "DEFAULT_RETENTION_MS",
    "DIALECTS",
    "UNKNOWN_DIALECT",
    "OJS",
    "Change",
    "FaktoryRule",
    "Holder",
    "Holding",
    "Judge",
    "PeriodFrom",
    "Relock",
    "StatesKind",
    "StatesRule",
    "UniqueUntil",
    "ZizqRule",
    "ZizqScope",
    "entry_expires_at",
    "holds",
    "DEFAULT_UNIQUE_STATES",
    "DUPLICATE",
    "INTERNAL",
    "INVALID_EVENT",
    "INVALID_PAYLOAD",
    "INVALID_REQUEST",
    "PAYLOAD_TOO_LARGE",
    "UNSUPPORTED_OPTION",
    "TERMINAL_STATES",
    "Decision",
    "Dimension",
    "Entry",
    "Envelope",
    "EventOutcome",
    "EventResult",
    "GatewayError",
    "IgnoredReason",
    "JobEvent",
    "OnConflict",
    "Outcome",
    "Request",
    "RetryPolicy",
    "State",
    "UniquePolicy",
    "apply_job_event",
    "attempt_deadline",
    "expire_job",
    "job_deadline",
    "past_expiry",
    "job_effective_state",
    "ready_at",
    "stored_job",
    "transition_events",
    "route_key",
    "audit_fields",
    "canonical_form",
    "cancellations",
    "decide",
    "dump_entries",
    "expires_at",
    "effective_state",
    "fingerprint",
    "fingerprint_reference",
    "load_entries",
    "parse_event",
    "parse_event_json",
    "parse_policy",
    "parse_request",
    "parse_request_json",
    "prune",
    "requested_dialect",
    "uuid7",
]
