"""The per-principal enqueue rate (OJS security SEC-014, `serve --max-enqueue-rate`): a
principal of the credentials file may enqueue at most N jobs a second in this serve
worker (without a credentials file there is no principal, and no limit), a batch counting
its jobs, by a generic cell rate (core/gcra.py): a burst of N, then one every 1/N s. One
over is 429 `rate_limited` with `Retry-After`; every enqueue answer carries
`X-RateLimit-Limit`, `-Remaining` and `-Reset` (OJS rate limiting §10.4). Each serve
worker counts its own: with W workers on P processes a principal may enqueue up to
N x W x P a second in all. A tenant's limits, decided in the log, are exact across them
(core/tenant_limits.py).
"""

from __future__ import annotations

import time

from gateway.core import INVALID_REQUEST, gcra
from gateway.http import access
from gateway.http.errors import ApiError

RATE_LIMITED = "rate_limited"
_PERIOD_MS = 1000
_KEPT_MAX = 10_000  # identities remembered; those whose burst is whole again go first


class EnqueueRate:
    """Jobs a second per identity, at most `limit` each (0: no limit)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._tat: dict[str, int] = {}

    def take(self, identity: str | None, count: int) -> dict[str, str]:
        """`count` jobs of `identity` (None: nobody named, no limit) now: the rate headers
        to answer with; raises the 429."""
        if self.limit <= 0 or identity is None:
            return {}
        now = time.time_ns() // 1_000_000
        if len(self._tat) >= _KEPT_MAX:
            self._forget(now)
        tat = self._tat.get(identity, 0)
        after, retry_at = gcra.admit(tat, self.limit, _PERIOD_MS, now, count)
        if retry_at is not None and retry_at < 0:
            raise ApiError(
                400, INVALID_REQUEST,
                f"a batch of {count} jobs is more than the {self.limit} a second "
                "--max-enqueue-rate allows at once: send at most that many in one batch",
                details={"limit": self.limit, "jobs": count},
            )  # fmt: skip
        if retry_at is not None:
            headers = self._headers(tat, now)
            wait_s = max(-(-(retry_at - now) // 1000), 1)
            headers["Retry-After"] = str(wait_s)
            raise ApiError(
                429, RATE_LIMITED,
                f"{identity} enqueues more than {self.limit} jobs a second; retry after "
                f"{wait_s} s", retryable=True,
                details={"limit": self.limit, "window_seconds": _PERIOD_MS // 1000,
                         "retry_after_seconds": wait_s},
                headers=headers,
            )  # fmt: skip
        self._tat[identity] = after
        return self._headers(after, now)

    def _headers(self, tat: int, now: int) -> dict[str, str]:
        used = gcra.held(tat, self.limit, _PERIOD_MS, now)
        return {
            "X-RateLimit-Limit": str(self.limit),
            "X-RateLimit-Remaining": str(self.limit - used),
            "X-RateLimit-Reset": str(-(-gcra.full_at(max(tat, now * self.limit), self.limit)
                                       // 1000)),
        }  # fmt: skip

    def _forget(self, now: int) -> None:
        whole = now * self.limit
        self._tat = {k: t for k, t in self._tat.items() if t > whole}
        if len(self._tat) >= _KEPT_MAX:
            self._tat.clear()


def identity() -> str | None:
    """Whose rate an enqueue counts against: its principal's (None: no credentials file)."""
    name = access.principal_name()
    return None if name is None else f"principal {name!r}"
