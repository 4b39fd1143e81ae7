"""Tenant limits (OJS multi-tenancy §8): how many of a tenant's jobs may wait, how many may
be scheduled, and how fast it may enqueue. The one authority for a tenant's counts.

A tenant's counts live at its home (wire.tenant_home), decided there only, in log order, at
the request record's broker time (`admit`). Every request of a tenant's job passes its home
before it is decided, so the counts are exact from the tenant's first job, whatever limits
are set later, whichever server enqueues:

- `waiting`: the tenant's jobs admitted and not yet started or ended. A job gives its place
  back (`release`) when it first becomes active, or when it ends without running; a request
  that made no job (a duplicate, a refusal) gives it back at once. A retried job waits
  again without a place: the limit holds the producer back, never its running jobs.
  `max_queue_depth` bounds it: OJS counts available and scheduled jobs, this counts the
  same jobs until their first start.
- `scheduled`: of those, the ones admitted with a run time in the future; `max_scheduled`
  bounds it. A job counts as scheduled until its first start, a little past its run time.
- `max_enqueue_rate` {limit, period}: a generic cell rate over admitted requests
  (core/gcra.py: a burst of `limit`, then one every period / limit; any window of one
  period admits at most 2 * limit - 1). A refused request uses up nothing.
- `max_concurrency`: how many of the tenant's jobs may run at once, held by the rate key
  `tenant:<tenant>` (core/rates.py decides its permits at its own home): the home gives
  every job it admits that rate limit (`concurrency_limit`), and an operator's change
  reaches jobs admitted before as the key's override (sdk/commands.tenant_commands). A job
  carrying its own rate limit, or sent in another dialect than OJS's, cannot also be held
  by its tenant's: while the tenant has max_concurrency it is refused (`concurrency_refusal`).

The state is the limits and four numbers (waiting, scheduled, the rate's tat, refusals): a
tenant with no limit and no job holding a place is deleted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import orjson

from gateway.core import gcra
from gateway.core.errors import (
    INVALID_REQUEST,
    UNSUPPORTED_OPTION,
    GatewayError,
    Invalid,
    invalid_request,
    shown,
    unsupported,
)
from gateway.core.periods import format_period
from gateway.core.rate_policy import MAX_CONCURRENCY, Override, rate_pair
from gateway.core.tenants import is_valid_tenant
from gateway.core.times import format_rfc3339

TENANT_LIMIT_EXCEEDED = "tenant_limit_exceeded"
KEY_PREFIX = "tenant:"  # + tenant: the rate key of a tenant's max_concurrency
SLOT_FIELD = "tenant_slot"  # on a job holding a place: {"tenant", "scheduled"}
MAX_COUNT = 100_000_000
MAX_REASON_CHARS = 500
REFILL_GUESS_MS = 1000  # when a full queue may have room again: unknowable, so soon
_FIELDS = frozenset(
    {"max_queue_depth", "max_scheduled", "max_enqueue_rate", "max_concurrency", "reason"}
)
_NOT_BUILT = ("fairness_weight", "priority_boost")


@dataclass(frozen=True, slots=True)
class TenantLimits:
    max_queue_depth: int | None = None
    max_scheduled: int | None = None
    rate_limit: int | None = None  # admitted requests per period
    rate_period_ms: int | None = None
    max_concurrency: int | None = None

    def to_dict(self) -> dict[str, Any]:
        rate = None
        if self.rate_limit is not None and self.rate_period_ms is not None:
            rate = {"limit": self.rate_limit, "period": format_period(self.rate_period_ms)}
        return {"max_queue_depth": self.max_queue_depth, "max_scheduled": self.max_scheduled,
                "max_enqueue_rate": rate, "max_concurrency": self.max_concurrency}  # fmt: skip

    @staticmethod
    def of(raw: object) -> TenantLimits:
        """Limits as `to_dict` wrote them (raises Invalid if they are not)."""
        if not isinstance(raw, Mapping):
            raise invalid_request("tenant limits are an object")
        return parse_limits(raw, TenantLimits())[0]

    @property
    def none(self) -> bool:
        return self == TenantLimits()


@dataclass(frozen=True, slots=True)
class TenantState:
    """A tenant's counts at its home (see the module's doc). `tat`: the rate's theoretical
    arrival time, in 1/limit milliseconds, so that it stays a whole number."""

    tenant: str
    limits: TenantLimits = TenantLimits()
    waiting: int = 0
    scheduled: int = 0
    tat: int = 0
    refused: int = 0

    def dump(self) -> bytes:
        return orjson.dumps({
            "tenant": self.tenant, "limits": self.limits.to_dict(), "waiting": self.waiting,
            "scheduled": self.scheduled, "tat": self.tat, "refused": self.refused,
        })  # fmt: skip

    @staticmethod
    def load(raw: bytes | Mapping[str, Any] | None) -> TenantState | None:
        """A stored or published state; None if absent or not one."""
        try:
            data = orjson.loads(raw) if isinstance(raw, bytes) else raw
            if not isinstance(data, Mapping) or not isinstance(data.get("tenant"), str):
                return None
            return TenantState(
                data["tenant"], TenantLimits.of(data.get("limits") or {}),
                int(data.get("waiting", 0)), int(data.get("scheduled", 0)),
                int(data.get("tat", 0)), int(data.get("refused", 0)),
            )  # fmt: skip
        except (orjson.JSONDecodeError, TypeError, ValueError, Invalid):
            return None


@dataclass(frozen=True, slots=True)
class Breach:
    """Which limit a request would break: its name, the count now, the limit, and when a
    retry may pass (epoch ms)."""

    limit: str
    current: int
    maximum: int
    retry_at_ms: int

    def details(self, tenant: str, now_ms: int) -> dict[str, Any]:
        wait_ms = max(self.retry_at_ms - now_ms, 0)
        return {
            "tenant_id": tenant, "limit": self.limit, "current": self.current,
            "maximum": self.maximum, "retry_at": format_rfc3339(self.retry_at_ms),
            "retry_after_seconds": -(-wait_ms // 1000) or 1,
        }  # fmt: skip


_BEFORE_START = frozenset(("available", "scheduled", "pending"))


def holds_place(job: Mapping[str, Any]) -> bool:
    """Whether a job still holds its tenant's place: it has neither started nor ended."""
    return job.get("state") in _BEFORE_START


def is_scheduled(scheduled_at_ms: int | None, scheduled_in_ms: int | None, now_ms: int) -> bool:
    """Whether a request asks for a run time in the future (absolute or relative): its place
    counts against max_scheduled."""
    return (scheduled_at_ms or 0) > now_ms or (scheduled_in_ms or 0) > 0


def admit(
    state: TenantState | None, tenant: str, scheduled: bool, now_ms: int
) -> tuple[TenantState, Breach | None]:
    """A request of the tenant's job at its home: a place taken, or the limit it breaks."""
    state = state or TenantState(tenant)
    limits = state.limits
    breach = None
    if limits.max_queue_depth is not None and state.waiting >= limits.max_queue_depth:
        breach = Breach("max_queue_depth", state.waiting, limits.max_queue_depth,
                        now_ms + REFILL_GUESS_MS)  # fmt: skip
    elif scheduled and limits.max_scheduled is not None and state.scheduled >= limits.max_scheduled:
        breach = Breach("max_scheduled", state.scheduled, limits.max_scheduled,
                        now_ms + REFILL_GUESS_MS)  # fmt: skip
    tat = state.tat
    if breach is None and limits.rate_limit is not None and limits.rate_period_ms is not None:
        limit, period = limits.rate_limit, limits.rate_period_ms
        tat, retry = gcra.admit(state.tat, limit, period, now_ms)
        if retry is not None:
            breach = Breach("max_enqueue_rate", gcra.held(tat, limit, period, now_ms), limit,
                            retry)  # fmt: skip
    if breach is not None:
        return replace(state, refused=state.refused + 1), breach
    return replace(
        state, waiting=state.waiting + 1, scheduled=state.scheduled + int(scheduled), tat=tat
    ), None  # fmt: skip


def release(state: TenantState, scheduled: bool) -> TenantState:
    """A place given back: its job started or ended, or its request made no job."""
    return replace(
        state, waiting=max(state.waiting - 1, 0),
        scheduled=max(state.scheduled - int(scheduled), 0),
    )  # fmt: skip


def set_limits(state: TenantState | None, tenant: str, limits: TenantLimits) -> TenantState:
    """The tenant's limits replaced; a changed rate starts afresh."""
    state = state or TenantState(tenant)
    old = state.limits
    same_rate = (old.rate_limit, old.rate_period_ms) == (limits.rate_limit, limits.rate_period_ms)
    return replace(state, limits=limits, tat=state.tat if same_rate else 0)


def idle(state: TenantState) -> bool:
    """Nothing to remember: no limit and no job holding a place."""
    return state.limits.none and state.waiting == 0 and state.scheduled == 0


def breach_error(tenant: str, breach: Breach) -> GatewayError:
    return GatewayError(
        TENANT_LIMIT_EXCEEDED,
        f"tenant {tenant!r} has reached its {breach.limit} ({breach.current} of "
        f"{breach.maximum}); retry after {format_rfc3339(breach.retry_at_ms)}",
    )


def shown_limits(tenant: str, state: TenantState | None, running: int = 0) -> dict[str, Any]:
    """The tenant's limits with their counts now, as the tenant routes show them; `running`:
    the permits its concurrency key holds."""
    state = state or TenantState(tenant)
    limits = state.limits
    rate = limits.to_dict()["max_enqueue_rate"]
    return {
        "max_queue_depth": {"limit": limits.max_queue_depth, "current": state.waiting},
        "max_scheduled": {"limit": limits.max_scheduled, "current": state.scheduled},
        "max_concurrency": {"limit": limits.max_concurrency, "current": running},
        "max_enqueue_rate": rate,
        "refused": state.refused,
    }


def parse_limits(raw: Mapping[str, Any], current: TenantLimits) -> tuple[TenantLimits, str | None]:
    """PUT /ojs/v1/admin/tenants/{id}/limits: the limits it names set (null clears one), the
    others kept, and its `reason`; raises Invalid naming a field it cannot take."""
    for name in _NOT_BUILT:
        if name in raw:
            raise unsupported(name, "the gateway limits a tenant's queue depth, scheduled jobs, "
                              "enqueue rate and concurrency")  # fmt: skip
    unknown = sorted(str(k) for k in raw if k not in _FIELDS)
    if unknown:
        raise invalid_request(
            f"{unknown[0]} is not a tenant limit; use max_queue_depth, max_scheduled, "
            "max_enqueue_rate {limit, period}, reason"
        )
    reason = raw.get("reason")
    if reason is not None and (not isinstance(reason, str) or len(reason) > MAX_REASON_CHARS):
        raise invalid_request(f"reason must be a string of at most {MAX_REASON_CHARS} characters")
    limits = current
    for name, high in (
        ("max_queue_depth", MAX_COUNT), ("max_scheduled", MAX_COUNT),
        ("max_concurrency", MAX_CONCURRENCY),
    ):  # fmt: skip
        if name in raw:
            limits = replace(limits, **{name: _count(raw[name], name, high)})
    if "max_enqueue_rate" in raw:
        given = raw["max_enqueue_rate"]
        if given is None:
            limits = replace(limits, rate_limit=None, rate_period_ms=None)
        elif not isinstance(given, Mapping):
            raise invalid_request(f'max_enqueue_rate must be {{"limit": n, "period": "PT1S"}} '
                                  f"or null, not {shown(given)}")  # fmt: skip
        else:
            extra = sorted(str(k) for k in given if k not in ("limit", "period"))
            if extra:
                raise invalid_request(f"max_enqueue_rate.{extra[0]} is not a field; use limit, "
                                      "period")  # fmt: skip
            limit, period = rate_pair({"rate": dict(given)}, "max_enqueue_rate")
            limits = replace(limits, rate_limit=limit, rate_period_ms=period)
    return limits, reason


def _count(raw: object, name: str, high: int) -> int | None:
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int) or not 0 <= raw <= high:
        raise invalid_request(f"{name} must be a whole number from 0 to {high}, or null to "
                              f"clear it, not {shown(raw)}")  # fmt: skip
    return raw


def parse_tenant_command(value: bytes) -> tuple[str, dict[str, Any], str | None] | GatewayError:
    """A command to a tenant's home (`tenant_command`): `{"tenant", "set", "reason"}`, `set`
    the limits to change as PUT named them (checked by `parse_limits`), which the home
    applies to the limits it holds: two operators' changes never undo each other."""
    try:
        command = orjson.loads(value)
        given = command.get("set") if isinstance(command, Mapping) else None
        if (
            not isinstance(command, Mapping) or not is_valid_tenant(command.get("tenant"))
            or not isinstance(given, dict) or "reason" in given
        ):  # fmt: skip
            raise invalid_request('a tenant command is {"tenant", "set", "reason"}')
        parse_limits(given, TenantLimits())
        reason = command.get("reason")
        return command["tenant"], given, reason if isinstance(reason, str) else None
    except orjson.JSONDecodeError:
        return GatewayError(INVALID_REQUEST, "a tenant command is JSON")
    except Invalid as exc:
        return exc.error


def tenant_command(tenant: str, given: Mapping[str, Any], reason: str | None) -> bytes:
    """The record `parse_tenant_command` reads: the limits PUT named, as it named them."""
    changes = {k: v for k, v in given.items() if k != "reason"}
    return orjson.dumps({"tenant": tenant, "set": changes, "reason": reason})


def concurrency_key(tenant: str) -> str:
    """The rate key holding a tenant's max_concurrency."""
    return KEY_PREFIX + tenant


def concurrency_limit(tenant: str, limits: TenantLimits) -> dict[str, Any] | None:
    """The rate limit a job the tenant's home admits is given (None: the tenant has no
    max_concurrency), in the shape a job carries it."""
    if limits.max_concurrency is None:
        return None
    return {"key": concurrency_key(tenant), "concurrency": limits.max_concurrency}


def concurrency_refusal(
    limits: TenantLimits, own_rate_limit: bool, ojs: bool
) -> GatewayError | None:
    """Why a job cannot be held by its tenant's max_concurrency (None: it can, or there is none)."""
    if limits.max_concurrency is None or (ojs and not own_rate_limit):
        return None
    what = "its own rate_limit" if own_rate_limit else "a dialect other than OJS's"
    return GatewayError(
        UNSUPPORTED_OPTION,
        f"a job of a tenant with max_concurrency cannot carry {what} yet: its tenant's "
        "concurrency is held by the rate key the gateway gives it",
    )


def reserved_key_refusal(key: str | None, passed_home: bool) -> GatewayError | None:
    """Why a job may not carry the rate key `key` (None: it may): a tenant's concurrency key
    is the gateway's, given by the tenant's home, never a job's own."""
    if key is None or not key.startswith(KEY_PREFIX) or passed_home:
        return None
    return GatewayError(
        INVALID_REQUEST,
        f"rate_limit.key {key!r}: keys starting with {KEY_PREFIX!r} hold a tenant's "
        "max_concurrency and are the gateway's to give; name another key",
    )


def concurrency_override(limits: TenantLimits) -> Override:  # the limits PUT named
    """The override of the tenant's rate key an operator's change sets, so that jobs admitted
    before it are held by it too; a cleared limit leaves them the widest one."""
    return Override(concurrency=MAX_CONCURRENCY if limits.max_concurrency is None
                    else limits.max_concurrency)  # fmt: skip
