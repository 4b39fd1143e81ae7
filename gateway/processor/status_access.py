"""Who may read the processor's status port (`--metrics-port`), given a credentials file.

/metrics then needs the key of a principal holding `inspect` (roles read-only, operator
and admin), checked as the HTTP binding checks one (gateway/auth/bearer.py) and refused
in the same OJS error envelope: 401 `unauthenticated` without a valid key, naming the
scheme; 403 `permission_denied` without the operation. Each refusal leaves a line in the
security log, as the binding's do. /ready and /live stay open: they say whether the
processor answers and owns partitions, how many, or why not, and name no host, topic or
group; `gateway serve --processor-url` asks /ready without a key.

The file is read again when it changes, or on SIGHUP (`Guard.on_sighup`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gateway.auth import bearer, roles
from gateway.auth.keyring import Watcher
from gateway.core.actor import Actor
from gateway.http import errors
from gateway.http.errors import ApiError

security_log = logging.getLogger("gateway.security")

OPERATION = roles.INSPECT
# A 401 names the scheme that would be accepted (RFC 9110 §11.6.1), as the binding's does.
CHALLENGE = 'Bearer realm="gateway"'


class Guard:
    """The check of one status port against one credentials file; answers from any thread."""

    def __init__(self, watcher: Watcher) -> None:
        self.watcher = watcher

    def on_sighup(self, _signum: int, _frame: Any) -> None:
        """A SIGHUP handler: the file is read again at the next request (takes no lock)."""
        self.watcher.reread_soon()

    def refusal(
        self, route: str, authorization: Sequence[str], address: str | None, request_id: str
    ) -> ApiError | None:
        """The 401 or 403 for a request to `route` ("GET /metrics"), logged; None: let in."""
        principal = None
        try:
            principal = bearer.authenticate(self.watcher.current(), authorization, address)
        except bearer.Unauthenticated as exc:
            refused = errors.unauthenticated(str(exc))
        else:
            if OPERATION in principal.operations:
                return None
            refused = errors.permission_denied(principal.name, OPERATION)
        who = Actor(
            principal.name if principal else None, principal.role if principal else None,
            address, request_id,
        )  # fmt: skip
        fields: dict[str, Any] = {"principal": None, "role": None, "source": None}
        security_log.warning(
            "refused request",
            extra={**fields, **who.fields(), "route": route, "status": refused.status,
                   "outcome": "refused"},
        )  # fmt: skip
        return refused


def guard_of(credentials: Path | None) -> Guard | None:
    """The guard of a status port, None without a credentials file (the port is open);
    CredentialsError if the file cannot be used."""
    return None if credentials is None else Guard(Watcher(credentials))
