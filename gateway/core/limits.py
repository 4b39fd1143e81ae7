"""How large an input may be, so that every record derived from it fits its topic.

Every topic takes records of at most 1 MiB (`max.message.bytes` 1048588, the
broker's default). The processor checks each output against MAX_RECORD_BYTES
before it produces anything (processor/total.py); the limits below keep every
valid input well inside it, so that check is a safety net, not a refusal.
"""

from __future__ import annotations

from gateway.core.errors import PAYLOAD_TOO_LARGE, GatewayError

# What any one record the processor writes may weigh: key, value and headers,
# with room under 1048588 for Kafka's own framing.
MAX_RECORD_BYTES = 1_000_000
# All headers of one input record together: they travel on with a request
# (router to requests) and some are copied into its answers.
MAX_HEADERS_BYTES = 16 * 1024
# A request_id or correlation_id is copied into every record about its request.
MAX_ID_BYTES = 255
# A job event's JSON.
MAX_EVENT_BYTES = 64 * 1024


def headers_refusal(headers: dict[str, bytes]) -> GatewayError | None:
    size = sum(len(name.encode()) + len(value) for name, value in headers.items())
    if size > MAX_HEADERS_BYTES:
        return GatewayError(
            PAYLOAD_TOO_LARGE,
            f"the record's headers are {size} bytes; the limit is {MAX_HEADERS_BYTES}",
        )
    return None


def event_size_refusal(value: bytes | None) -> GatewayError | None:
    size = len(value or b"")
    if size > MAX_EVENT_BYTES:
        return GatewayError(
            PAYLOAD_TOO_LARGE, f"the job event is {size} bytes; the limit is {MAX_EVENT_BYTES}"
        )
    return None
