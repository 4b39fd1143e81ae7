"""An enqueue request: validated envelope, canonical policy, key and dialect, built once."""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from gateway.core.envelope import Envelope, envelope_or_raise
from gateway.core.errors import INVALID_PAYLOAD, GatewayError, Invalid
from gateway.core.fingerprint import fingerprint_or_raise
from gateway.core.policy import UniquePolicy, policy_or_raise

OJS = "ojs"


@dataclass(frozen=True, slots=True)
class Request:
    envelope: Envelope
    # None when the job carries no unique policy: it is accepted without a key.
    policy: UniquePolicy | None
    unique_key: str | None
    # Which option language the request spoke; every dialect maps onto the same policy.
    dialect: str = OJS


def parse_request(raw: object) -> Request | GatewayError:
    """Validate an OJS job (envelope or HTTP form) and compute its key."""
    try:
        envelope = envelope_or_raise(raw)
        if envelope.unique_field is None:
            return Request(envelope, None, None)
        policy = _policy(envelope.unique, envelope.unique_field)
        key = fingerprint_or_raise(
            policy, envelope.type, envelope.queue, envelope.args, envelope.meta,
            envelope.unique_field,
        )  # fmt: skip
    except Invalid as exc:
        return exc.error
    return Request(envelope, policy, key)


def parse_request_json(data: bytes | str) -> Request | GatewayError:
    """`parse_request` of a JSON text; malformed JSON is an `invalid_payload` error."""
    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        return GatewayError(INVALID_PAYLOAD, f"the request is not valid JSON: {exc}")
    return parse_request(raw)


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
