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
        policy = policy_or_raise(envelope.unique, envelope.unique_field)
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
