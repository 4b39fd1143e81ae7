"""An enqueue request: validated envelope, canonical policy, key and dialect, built once."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import orjson

from gateway.core.envelope import Envelope, envelope_or_raise
from gateway.core.errors import DUPLICATE, invalid_request
from gateway.core.fingerprint import fingerprint_or_raise
from gateway.core.holder import HolderRule
from gateway.core.policy import UniquePolicy, policy_or_raise

OJS = "ojs"


class Fate(StrEnum):
    """What becomes of a duplicate kept as a job of its own (core/kept_duplicates.py)."""

    DEAD = "dead"
    RESCHEDULE = "reschedule"


@dataclass(frozen=True, slots=True)
class KeepDuplicate:
    fate: Fate
    # A rescheduled duplicate's wait before its uniqueness is decided again.
    delay_ms: int = 0


# Not frozen: built for every record, and a frozen dataclass sets each field through
# object.__setattr__ (seven times the cost). Treated as a value all the same: never assigned.
@dataclass(slots=True, init=False)
class Request:
    envelope: Envelope
    # None when the job carries no unique policy: it is accepted without a key.
    policy: UniquePolicy | None
    unique_key: str | None
    # Which option language the request spoke; every dialect maps onto the same policy.
    dialect: str = OJS
    # The rule the accepted job will hold its key by (Zizq, Faktory), if any.
    holder_rule: HolderRule | None = None
    # Whether the accepted job is kept with its entry, for conflicts that update it.
    stores_job: bool = False
    # The error code of a rejected duplicate (Faktory says NOTUNIQUE).
    duplicate_code: str = DUPLICATE
    # A duplicate ignored under on_conflict ignore is also kept as a job (sidekiq-unique-jobs'
    # reject and reschedule); None: it is not.
    keep_duplicate: KeepDuplicate | None = None

    def __init__(
        self,
        envelope: Envelope,
        policy: UniquePolicy | None,
        unique_key: str | None,
        dialect: str = OJS,
        holder_rule: HolderRule | None = None,
        stores_job: bool = False,
        duplicate_code: str = DUPLICATE,
        keep_duplicate: KeepDuplicate | None = None,
    ) -> None:
        self.envelope = envelope
        self.policy = policy
        self.unique_key = unique_key
        self.dialect = dialect
        self.holder_rule = holder_rule
        self.stores_job = stores_job
        self.duplicate_code = duplicate_code
        self.keep_duplicate = keep_duplicate


def ojs_request_or_raise(raw: object) -> Request:
    """Validate an OJS job (envelope or HTTP form) and compute its key."""
    envelope = envelope_or_raise(raw)
    if envelope.unique_field is None:
        return Request(envelope, None, None)
    policy = _policy(envelope.unique, envelope.unique_field)
    if policy.debounce is not None and (
        envelope.scheduled_at is not None or envelope.scheduled_in is not None
    ):
        raise invalid_request(
            f"{envelope.unique_field}.debounce sets the job's run time (the decision's time "
            "plus its delay); drop scheduled_at, or drop the debounce"
        )
    key = fingerprint_or_raise(
        policy, envelope.type, envelope.queue, envelope.args, envelope.meta,
        envelope.unique_field,
    )  # fmt: skip
    return Request(envelope, policy, key)


_POLICIES: dict[tuple[bytes, str], UniquePolicy] = {}
_POLICIES_MAX = 4096


def _policy(raw: object, field: str) -> UniquePolicy:
    """`policy_or_raise`, remembered: producers send the same few policies over and over."""
    try:
        text = orjson.dumps(raw)
    except TypeError:  # not JSON (an SDK caller's own object): parse it as it is
        return policy_or_raise(raw, field)
    policy = _POLICIES.get((text, field))
    if policy is None:
        policy = policy_or_raise(raw, field)
        if len(_POLICIES) >= _POLICIES_MAX:
            _POLICIES.clear()
        _POLICIES[(text, field)] = policy
    return policy
