"""What a record of `requests` is: told once, from its `kind` header, and handed to the one
handler of its kind (dedup.py). The router marks job events; ticks, queue and cron
commands, id reports, what goes to a rate key's home (claims, reports, overrides) and a
tenant's reports and limits are marked by whoever writes them; anything else is a request
(a tenant's home admits requests as requests: stage/tenants.py).
"""

from __future__ import annotations

from enum import StrEnum

from gateway import wire
from gateway.stage.records import Source


class Kind(StrEnum):
    REQUEST = "request"
    EVENT = "event"
    TICK = "tick"
    COMMAND = "command"
    ID_REPORT = "id_report"
    RATE = "rate"
    TENANT = "tenant"


_BY_HEADER = {
    wire.JOB_EVENT: Kind.EVENT,
    wire.QUEUE_COMMAND: Kind.COMMAND,
    wire.CRON_COMMAND: Kind.COMMAND,
    wire.QUEUE_RATE_COMMAND: Kind.COMMAND,
    wire.ID_REPORT: Kind.ID_REPORT,
    wire.RATE: Kind.RATE,
    wire.RATE_REPORT: Kind.RATE,
    wire.RATE_COMMAND: Kind.RATE,
    wire.TENANT_REPORT: Kind.TENANT,
    wire.TENANT_COMMAND: Kind.TENANT,
}


def kind_of(source: Source, value: bytes | None) -> Kind:
    """A tick is marked so and empty: a marked record with a value is read as a request
    (and answered), so that no record with something in it goes unanswered."""
    marked = source.headers.get(wire.KIND_HEADER)
    if marked == wire.TICK:
        return Kind.REQUEST if value else Kind.TICK
    return _BY_HEADER.get(marked, Kind.REQUEST)  # type: ignore[arg-type]
