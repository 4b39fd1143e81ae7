"""Errors are values: a code a program can branch on and a message a user can act on.

Public functions of the core return `T | GatewayError`; they never raise for
bad input. Internally, parsers raise `Invalid` to unwind deep validation and
the public function turns it back into the value.
"""

from __future__ import annotations

from dataclasses import dataclass

# Malformed JSON, a missing or invalid field, an invalid policy (OJS: "Malformed request").
INVALID_REQUEST = "invalid_request"
# OJS: job args that fail a schema. The gateway checks no schema, so it answers this nowhere;
# malformed JSON is INVALID_REQUEST on every surface.
INVALID_PAYLOAD = "invalid_payload"
INVALID_EVENT = "invalid_event"
DUPLICATE = "duplicate"
PAYLOAD_TOO_LARGE = "payload_too_large"
# A dialect's option whose behaviour the gateway does not have yet: refused, never ignored
# and never mapped onto something else. The message names the option.
UNSUPPORTED_OPTION = "unsupported_option"
# The gateway failed on a record it should have handled; the record is kept on dead_letters.
INTERNAL = "internal"


@dataclass(frozen=True, slots=True)
class GatewayError:
    code: str
    message: str

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def to_dict(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


class Invalid(Exception):
    """Carries a GatewayError out of nested validation; never escapes a public function."""

    def __init__(self, error: GatewayError) -> None:
        super().__init__(str(error))
        self.error = error


def invalid_request(message: str) -> Invalid:
    return Invalid(GatewayError(INVALID_REQUEST, message))


def unsupported(option: str, why: str) -> Invalid:
    """`option` (as the request names it) is refused: the gateway cannot do what it asks yet."""
    return Invalid(GatewayError(UNSUPPORTED_OPTION, f"{option} is not supported yet: {why}"))


def json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def shown(value: object) -> str:
    """A short rendering of a bad value for a message."""
    if isinstance(value, str):
        text = value if len(value) <= 40 else value[:37] + "..."
        return f'"{text}"'
    return json_type(value)
