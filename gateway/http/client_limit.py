"""The per-client limit (OJS security §10.4, `serve --max-client-connections`): a client
address with that many requests in flight gets 429 `too_many_connections` for the next.

ASGI shows requests, not connections, so what is counted is a client's requests being
answered at once, from the first byte read to the last sent: an open event stream counts
for as long as it is open. A keep-alive connection between requests holds nothing. The
address is the peer's (serve reads no proxy header). Each serve worker counts its own, and
the kernel spreads a client's connections over them: with `--workers W` a client may hold
up to N x W requests in all.
"""

from __future__ import annotations

import logging
import time

from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from gateway.http import errors
from gateway.http.errors import ApiError
from gateway.http.plumbing import media_type_of, request_id_of
from gateway.http.responses import error_response

RETRY_AFTER_S = 1
# The security log names a refused address at most once a second, with how many
# requests it was refused since: a flood costs a line a second, not a line a request.
_LOG_EVERY_S = 1.0
_LOGGED_MAX = 10_000  # addresses remembered for that, at most
log = logging.getLogger("gateway.security")


class ClientLimit:
    """Requests in flight per client address, at most `limit` each (0: no limit)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open: dict[str, int] = {}  # only addresses with a request in flight
        self.refused: dict[str, tuple[float, int]] = {}  # address: (last line, refused since)

    def enter(self, host: str) -> bool:
        """Counts a request from `host` in, or says it is one too many."""
        held = self.open.get(host, 0)
        if held >= self.limit > 0:
            return False
        self.open[host] = held + 1
        return True

    def leave(self, host: str) -> None:
        """The request `enter` counted in is answered, failed or abandoned."""
        held = self.open[host] - 1
        if held:
            self.open[host] = held
        else:
            del self.open[host]

    async def refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The 429, in the OJS error envelope, before anything of the request is read."""
        request = Request(scope, receive)
        error = ApiError(
            429, errors.TOO_MANY_CONNECTIONS,
            f"this client already has {self.limit} requests in flight, the most one may "
            "have; retry once one is answered",
            retryable=True, details={"limit": self.limit},
        )  # fmt: skip
        response = error_response(error, request_id_of(request), media_type_of(request))
        response.headers["Retry-After"] = str(RETRY_AFTER_S)
        self._note(host_of(scope), request_id_of(request))
        await response(scope, receive, send)

    def _note(self, host: str, request_id: str) -> None:
        now = time.monotonic()
        last, since = self.refused.get(host, (-_LOG_EVERY_S, 0))
        if now - last < _LOG_EVERY_S:
            self.refused[host] = (last, since + 1)
            return
        if len(self.refused) >= _LOGGED_MAX:
            self.refused.clear()
        self.refused[host] = (now, 0)
        log.warning("refused request", extra={
            "principal": None, "role": None, "source": host or None,
            "request_id": request_id, "status": 429, "outcome": "refused",
            "reason": errors.TOO_MANY_CONNECTIONS, "refused_since_last_line": since,
        })  # fmt: skip


def host_of(scope: Scope) -> str:
    """The peer's address; "" when the server names none (a Unix socket, a test client)."""
    client = scope.get("client")
    return client[0] if client else ""
