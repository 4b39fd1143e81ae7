"""The OJS retry policy of a job: how many attempts, and how long to wait between them.

Parsed once at enqueue (`options.retry` or top-level `retry`) into a canonical
object stored with the job, so the processor computes every backoff from the
job alone. Durations are ISO 8601 (`"PT1S"`) or, as some clients send them,
`initial_interval_ms` / `max_interval_ms` integers.

Backoff follows the OJS retry page: delay(n) for the retry after attempt n is
initial * coefficient^(n-1) (exponential, the default), initial * n^coefficient
(polynomial), initial * n (linear) or initial (none), capped at max_interval,
then multiplied by a jitter factor in [0.5, 1.5). The core has no randomness:
the factor comes from SHA-256 over (job id, attempt), so replaying the log
gives every retry the same time and different jobs still spread out.

Stored and shown are two forms. Records (decisions, `jobs`, `job_states`) keep
`RetryPolicy.to_dict`: integer milliseconds and the strategy always named.
Every surface that shows a job to a caller (HTTP answers and GET, fetch, the
SDK's results, the CLI) shows `ojs_retry` of it instead, the OJS retry object:
ISO 8601 intervals (the `_ms` integers where the client sent those under
`options.retry`), `backoff` only when it is not exponential or was sent.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from gateway.core.errors import invalid_request
from gateway.core.limits import duration_problem
from gateway.core.periods import period_or_raise

DEFAULT_MAX_ATTEMPTS = 3
DEFAULT_INITIAL_MS = 1_000
DEFAULT_COEFFICIENT = 2.0
DEFAULT_MAX_INTERVAL_MS = 300_000
STRATEGIES = ("exponential", "polynomial", "linear", "none")
# OJS's OpenAPI document names the strategy `backoff_type` (alias `backoff_strategy`),
# and a constant delay `constant`: the same policy under its other names.
_STRATEGY_FIELDS = ("backoff", "backoff_type", "backoff_strategy")
_STRATEGY_ALIASES = {"constant": "none"}
_FIELDS = {
    "max_attempts", "initial_interval", "initial_interval_ms", "backoff_coefficient",
    "max_interval", "max_interval_ms", "jitter", "non_retryable_errors", *_STRATEGY_FIELDS,
    "on_exhaustion",
}  # fmt: skip


# Not frozen (see core/envelope.py): a value all the same, hashed by its fields.
@dataclass(slots=True, unsafe_hash=True)
class RetryPolicy:
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    initial_ms: int = DEFAULT_INITIAL_MS
    coefficient: float = DEFAULT_COEFFICIENT
    max_interval_ms: int = DEFAULT_MAX_INTERVAL_MS
    jitter: bool = True
    strategy: str = "exponential"
    non_retryable: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "max_attempts": self.max_attempts,
            "initial_interval_ms": self.initial_ms,
            "backoff_coefficient": self.coefficient,
            "max_interval_ms": self.max_interval_ms,
            "jitter": self.jitter,
            "backoff": self.strategy,
            "non_retryable_errors": list(self.non_retryable),
        }

    @staticmethod
    def from_dict(raw: Mapping[str, Any] | None) -> RetryPolicy:
        """Read `to_dict` output back (stored state, so trusted); None is the default policy."""
        if not raw:
            return RetryPolicy()
        return RetryPolicy(
            max_attempts=int(raw.get("max_attempts", DEFAULT_MAX_ATTEMPTS)),
            initial_ms=int(raw.get("initial_interval_ms", DEFAULT_INITIAL_MS)),
            coefficient=float(raw.get("backoff_coefficient", DEFAULT_COEFFICIENT)),
            max_interval_ms=int(raw.get("max_interval_ms", DEFAULT_MAX_INTERVAL_MS)),
            jitter=bool(raw.get("jitter", True)),
            strategy=str(raw.get("backoff", "exponential")),
            non_retryable=tuple(raw.get("non_retryable_errors") or ()),
        )

    def delay_ms(self, attempt: int, job_id: str) -> int:
        """How long after failed attempt `attempt` (1-based) the next one may start."""
        n = max(attempt, 1)
        cap = float(self.max_interval_ms)
        try:
            if self.strategy == "none":
                raw = float(self.initial_ms)
            elif self.strategy == "linear":
                raw = float(self.initial_ms * n)
            elif self.strategy == "polynomial":
                raw = self.initial_ms * float(n) ** self.coefficient
            else:
                raw = self.initial_ms * self.coefficient ** (n - 1)
        except OverflowError:
            # Growth past any float is past the cap too, unless nothing grows. Attempts
            # and coefficients come from the log, so this must stay total.
            raw = cap if self.initial_ms else 0.0
        capped = min(raw, cap)
        if self.jitter:
            capped *= jitter_factor(job_id, attempt)
        return max(0, int(capped))


def jitter_factor(job_id: str, attempt: int) -> float:
    """A reproducible factor in [0.5, 1.5), uniform over jobs and attempts."""
    digest = hashlib.sha256(f"gateway.jitter\x00{job_id}\x00{attempt}".encode()).digest()
    return 0.5 + int.from_bytes(digest[:8], "big") / 2**64


def retry_or_raise(raw: object, field: str, max_attempts: int | None) -> RetryPolicy:
    """The job's policy; `max_attempts` (from max_attempts or options.max_attempts) wins."""
    if raw is None:
        return _default(max_attempts or DEFAULT_MAX_ATTEMPTS, field)
    if not isinstance(raw, Mapping):
        raise invalid_request(f"{field} must be an object (an OJS retry policy)")
    unknown = sorted(set(raw) - _FIELDS)
    if unknown:
        raise invalid_request(
            f"{field}.{unknown[0]} is not a retry policy field; allowed fields are "
            + ", ".join(sorted(_FIELDS))
        )
    policy_attempts = raw.get("max_attempts")
    if policy_attempts is not None and not _positive_int(policy_attempts):
        raise invalid_request(f"{field}.max_attempts must be an integer of at least 1")
    if max_attempts is not None and policy_attempts is not None and max_attempts != policy_attempts:
        raise invalid_request(
            f"max_attempts ({max_attempts}) and {field}.max_attempts ({policy_attempts}) "
            "differ; give it once"
        )
    attempts = max_attempts or policy_attempts or DEFAULT_MAX_ATTEMPTS
    initial = _interval(raw, "initial_interval", field, DEFAULT_INITIAL_MS)
    cap = _interval(raw, "max_interval", field, DEFAULT_MAX_INTERVAL_MS)
    coefficient = raw.get("backoff_coefficient", DEFAULT_COEFFICIENT)
    if isinstance(coefficient, bool) or not isinstance(coefficient, int | float) or coefficient < 1:
        raise invalid_request(f"{field}.backoff_coefficient must be a number of at least 1.0")
    jitter = raw.get("jitter", True)
    if not isinstance(jitter, bool):
        raise invalid_request(f"{field}.jitter must be true or false")
    given = {name: raw[name] for name in _STRATEGY_FIELDS if name in raw}
    if len(set(map(str, given.values()))) > 1:
        raise invalid_request(f"{field}: {' and '.join(given)} differ; give the strategy once")
    strategy = next(iter(given.values()), "exponential")
    strategy = _STRATEGY_ALIASES.get(strategy, strategy) if isinstance(strategy, str) else None
    if strategy not in STRATEGIES:
        names = ", ".join([*STRATEGIES, *_STRATEGY_ALIASES])
        raise invalid_request(f"{field}.{next(iter(given), 'backoff')} must be one of {names}")
    errors = raw.get("non_retryable_errors") or []
    if not isinstance(errors, list) or not all(isinstance(e, str) for e in errors):
        raise invalid_request(f"{field}.non_retryable_errors must be a list of error type strings")
    return RetryPolicy(
        attempts, initial, float(coefficient), cap, jitter, str(strategy), tuple(errors)
    )


@lru_cache(maxsize=256)
def _default(max_attempts: int, field: str) -> RetryPolicy:
    """The policy of a job that gives none (most do), built once per max_attempts."""
    return retry_or_raise({}, field, max_attempts)


def _interval(raw: Mapping[str, Any], name: str, field: str, default: int) -> int:
    iso, millis = raw.get(name), raw.get(f"{name}_ms")
    if iso is not None and millis is not None:
        raise invalid_request(f"give {field}.{name} or {field}.{name}_ms, not both")
    if millis is not None:
        if isinstance(millis, bool) or not isinstance(millis, int) or millis < 0:
            raise invalid_request(f"{field}.{name}_ms must be a non-negative integer")
        problem = duration_problem(millis, f"{field}.{name}_ms")
        if problem is not None:
            raise invalid_request(problem)
        return millis
    if iso is None:
        return default
    if not isinstance(iso, str):
        raise invalid_request(f'{field}.{name} must be an ISO 8601 duration such as "PT1S"')
    return period_or_raise(iso, f"{field}.{name}") or default


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def ojs_retry(stored: Mapping[str, Any], sent: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A stored retry policy (`RetryPolicy.to_dict`) as the OJS retry object callers see.

    `sent` is the retry object the client sent under `options.retry` (kept on the job as
    sent): an interval it gave in milliseconds is shown in milliseconds, and `backoff`
    and `on_exhaustion` are shown when it gave them. A policy already shown (not every
    stored field present) comes back as it is, so showing a job twice shows it once.
    """
    if not stored.keys() >= _STORED_FIELDS:
        return dict(stored)
    sent = sent or {}
    out: dict[str, Any] = {"max_attempts": stored.get("max_attempts")}
    for name in ("initial_interval", "max_interval"):
        millis = stored.get(f"{name}_ms")
        if f"{name}_ms" in sent:
            out[f"{name}_ms"] = millis
        elif isinstance(millis, int):
            out[name] = iso_duration(millis)
    out["backoff_coefficient"] = stored.get("backoff_coefficient")
    out["jitter"] = stored.get("jitter")
    out["non_retryable_errors"] = list(stored.get("non_retryable_errors") or [])
    if stored.get("backoff", "exponential") != "exponential" or "backoff" in sent:
        out["backoff"] = stored.get("backoff")
    if "on_exhaustion" in sent:
        out["on_exhaustion"] = sent["on_exhaustion"]
    return out


def with_ojs_retry(job: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a job record with its `retry` shown as `ojs_retry` (nothing else changed)."""
    out = dict(job)
    retry = job.get("retry")
    if isinstance(retry, Mapping):
        options = job.get("options")
        sent = options.get("retry") if isinstance(options, Mapping) else None
        out["retry"] = ojs_retry(retry, sent if isinstance(sent, Mapping) else None)
    return out


def iso_duration(millis: int) -> str:
    """Milliseconds as an ISO 8601 duration: 1000 -> PT1S, 300000 -> PT5M, 1500 -> PT1.5S."""
    if millis <= 0:
        return "PT0S"
    days, rest = divmod(millis, 86_400_000)
    hours, rest = divmod(rest, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    seconds, ms = divmod(rest, 1000)
    text = "P" + (f"{days}D" if days else "")
    clock = (f"{hours}H" if hours else "") + (f"{minutes}M" if minutes else "")
    if seconds or ms:
        clock += f"{seconds}.{ms:03d}".rstrip("0").rstrip(".") + "S"
    return text + ("T" + clock if clock else "")


_STORED_FIELDS = frozenset(RetryPolicy().to_dict())
