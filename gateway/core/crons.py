"""Crons: a named schedule that enqueues a job from its template at every slot.

The processor holds each cron in the state of its key (wire.cron_key) on one
partition of `requests`, the single writer of it. Commands register (upsert:
OJS cron says registration MUST be one, so a fleet can declare its crons at
start), enable or disable, and delete it. On every record of that partition
(ticks carry time when nothing else does) a due cron fires: the processor
writes one request built here, in the same transaction as the cron's advanced
state, so a slot fires once however often the partition is replayed or taken
over. Missed slots (nothing ran the partition, or it lagged a slot behind)
fire once on catch-up, named by the first missed slot, and the schedule moves
on to the first future slot (OJS cron 7.3).

A firing is an ordinary request, decided on its own route like any other, and
its unique policy carries the cron's overlap policy:
- skip (the default): key (type, meta.cron_name) in every state but the
  terminal ones, reject: a slot that comes while the previous run has not
  finished (waiting, active or retrying) is refused as its duplicate, and the
  audit records it (OJS says "still active"; its conformance suite also skips
  a slot whose previous run no worker has taken yet);
- cancel_previous: the same key, replace: the active run is cancelled;
- allow, enqueue: key (type, meta.cron_name, meta.cron_slot) in every state,
  ignore: each slot is one job, never two. This gateway has no concurrency
  limits, so `enqueue` does not hold a new run back while the previous one runs.
A template may not carry its own unique policy: the overlap policy is it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.core.cron_expr import CronExpr, next_after, parse_cron, parse_zone
from gateway.core.dialects import parse_request
from gateway.core.errors import INVALID_REQUEST, GatewayError
from gateway.core.limits import MAX_CRON_BYTES
from gateway.core.request import Request
from gateway.core.states import ALL_STATES, TERMINAL_STATES
from gateway.core.times import format_rfc3339, parse_rfc3339

NAME_RULE = (
    "1 to 255 characters: lowercase letters, digits, hyphens and dots, first a letter or digit"
)
_NAME = re.compile(r"[a-z0-9][a-z0-9.\-]{0,254}")
OVERLAP_POLICIES = ("skip", "allow", "cancel_previous", "enqueue")
DEFAULT_OVERLAP = "skip"
_OPS = ("register", "enable", "delete")
_DEFINITION_FIELDS = {
    "name", "expression", "cron", "timezone", "job_template", "type", "args", "options",
    "meta", "overlap_policy", "enabled", "description",
}  # fmt: skip
_TEMPLATE_FIELDS = {"type", "args", "options", "meta"}
# Shown but never taken from a registration (OJS cron 2.2: system-managed fields).
_MANAGED = {
    "last_run_at", "next_run_at", "run_count", "created_at", "updated_at", "status", "error",
}  # fmt: skip
_SLOT = "2000-01-01T00:00:00.000Z"  # a template is checked as a firing at this slot


@dataclass(frozen=True, slots=True)
class CronCommand:
    op: str  # register, enable, delete
    name: str
    definition: dict[str, Any] | None = None  # register: the cron as `definition` made it
    enabled: bool | None = None  # enable


def is_valid_name(name: object) -> bool:
    return isinstance(name, str) and _NAME.fullmatch(name) is not None


def definition(raw: object) -> dict[str, Any] | GatewayError:
    """A registration (OJS cron's fields, or the HTTP binding's `expression` and
    `job_template`) checked and in one form: name, expression, timezone, job_template
    (type, args, options, meta), overlap_policy, enabled, description."""
    if not isinstance(raw, Mapping):
        return _bad("a cron is a JSON object")
    unknown = set(raw) - _DEFINITION_FIELDS - _MANAGED
    if unknown:
        return _bad(f"unknown cron fields: {', '.join(sorted(unknown))}")
    name = raw.get("name")
    if not is_valid_name(name):
        return _bad(f"a cron's name is {NAME_RULE}")
    expression = _one_of(raw, "expression", "cron")
    if isinstance(expression, GatewayError):
        return expression
    parsed = parse_cron(expression)
    if isinstance(parsed, GatewayError):
        return parsed
    timezone = raw.get("timezone", "UTC")
    zone = parse_zone(timezone)
    if isinstance(zone, GatewayError):
        return zone
    if next_after(parsed, zone, 0, 0) is None:
        return _bad(f"cron expression {expression!r} names no time that exists: it never fires")
    template = _template(raw)
    if isinstance(template, GatewayError):
        return template
    overlap = raw.get("overlap_policy", DEFAULT_OVERLAP)
    if overlap not in OVERLAP_POLICIES:
        return _bad(f"overlap_policy must be one of: {', '.join(OVERLAP_POLICIES)}")
    enabled = raw.get("enabled", True)
    description = raw.get("description")
    if not isinstance(enabled, bool):
        return _bad("enabled must be true or false")
    if description is not None and not isinstance(description, str):
        return _bad("description must be a string")
    cron = {
        "name": name, "expression": expression.strip(), "timezone": timezone,
        "job_template": template, "overlap_policy": overlap, "enabled": enabled,
        "description": description,
    }  # fmt: skip
    firing = parse_request(firing_job(cron, parse_rfc3339(_SLOT) or 0, 0))
    if isinstance(firing, GatewayError):
        return _bad(f"job_template: {firing.message}")
    size = len(orjson.dumps(cron))
    if size > MAX_CRON_BYTES:
        return _bad(f"the cron is {size} bytes as JSON; the limit is {MAX_CRON_BYTES}")
    return cron


def _one_of(raw: Mapping[str, Any], first: str, second: str) -> str | GatewayError:
    a, b = raw.get(first), raw.get(second)
    if a is not None and b is not None and a != b:
        return _bad(f"{first} and {second} differ; give the cron expression once")
    value = a if a is not None else b
    if not isinstance(value, str):
        return _bad(f"{first} (or {second}) is required: the cron expression, a string")
    return value


def _template(raw: Mapping[str, Any]) -> dict[str, Any] | GatewayError:
    nested = raw.get("job_template")
    top = {k: raw[k] for k in _TEMPLATE_FIELDS if k in raw}
    # Both agree in a cron as it is shown (`shown`): one read back can be sent again.
    agree = isinstance(nested, Mapping) and all(nested.get(k) == v for k, v in top.items())
    if nested is not None and top and not agree:
        return _bad("give the job either as job_template or as type, args and options, not both")
    template = nested if nested is not None else top
    if not isinstance(template, Mapping):
        return _bad("job_template must be an object: type, args, options, meta")
    unknown = set(template) - _TEMPLATE_FIELDS
    if unknown:
        return _bad(f"unknown job_template fields: {', '.join(sorted(unknown))}")
    options, meta = template.get("options", {}), template.get("meta", {})
    if not isinstance(options, Mapping) or not isinstance(meta, Mapping):
        return _bad("job_template.options and job_template.meta must be objects")
    if "unique" in options:
        return _bad(
            "a cron's jobs take their unique policy from overlap_policy; drop options.unique"
        )
    return {
        "type": template.get("type"), "args": template.get("args", []),
        "options": dict(options), "meta": dict(meta),
    }  # fmt: skip


def parse_cron_command(data: bytes | str) -> CronCommand | GatewayError:
    """`{"op": "register", "cron": {...}}`, `{"op": "enable", "name", "enabled"}` or
    `{"op": "delete", "name"}`."""
    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        return _bad(f"the cron command is not valid JSON: {exc}")
    if not isinstance(raw, Mapping) or raw.get("op") not in _OPS:
        return _bad(f"a cron command is an object whose op is one of: {', '.join(_OPS)}")
    if raw["op"] == "register":
        cron = definition(raw.get("cron"))
        return (
            cron if isinstance(cron, GatewayError) else CronCommand("register", cron["name"], cron)
        )
    name = raw.get("name")
    if not isinstance(name, str) or not is_valid_name(name):
        return _bad(f"a cron's name is {NAME_RULE}")
    if raw["op"] == "delete":
        return CronCommand("delete", name)
    enabled = raw.get("enabled")
    if not isinstance(enabled, bool):
        return _bad("enabled must be true or false")
    return CronCommand("enable", name, enabled=enabled)


def command_record(command: CronCommand) -> bytes:
    if command.op == "register":
        return orjson.dumps({"op": "register", "cron": command.definition})
    if command.op == "enable":
        return orjson.dumps({"op": "enable", "name": command.name, "enabled": command.enabled})
    return orjson.dumps({"op": "delete", "name": command.name})


# -- the cron's state, as the processor keeps and publishes it ----------------------


def registered(cron: Mapping[str, Any], before: Mapping[str, Any] | None, now_ms: int) -> dict:
    """The state after a registration at `now_ms`: the definition, what the previous one
    (if any) counted, and the next slot after now."""
    stamp = format_rfc3339(now_ms)
    kept = {k: before[k] for k in ("created_at", "last_run_at", "run_count")} if before else {
        "created_at": stamp, "last_run_at": None, "run_count": 0,
    }  # fmt: skip
    return _scheduled({**cron, **kept, "updated_at": stamp}, now_ms)


def enabled(state: Mapping[str, Any], on: bool, now_ms: int) -> dict[str, Any]:
    kept = {k: v for k, v in state.items() if k != "error"}  # a stopped cron tries again
    return _scheduled({**kept, "enabled": on, "updated_at": format_rfc3339(now_ms)}, now_ms)


def _scheduled(state: dict[str, Any], after_ms: int) -> dict[str, Any]:
    """`next_run_at`: the first slot after `after_ms`; None while disabled, or never (or
    when a stored expression or zone no longer parses: `fire` then says why)."""
    upcoming = None
    expr, zone = parse_cron(state["expression"]), parse_zone(state["timezone"])
    if state["enabled"] and isinstance(expr, CronExpr) and not isinstance(zone, GatewayError):
        upcoming = next_after(expr, zone, after_ms, _anchor(state))
    state["next_run_at"] = None if upcoming is None else format_rfc3339(upcoming)
    return state


def next_run_ms(state: Mapping[str, Any]) -> int | None:
    value = state.get("next_run_at")
    return parse_rfc3339(value) if isinstance(value, str) else None


def fire(state: Mapping[str, Any], now_ms: int) -> tuple[Request | None, dict[str, Any]] | None:
    """If the cron is due at `now_ms`: the request its slot enqueues, and its state after.
    The next slot is the one after this one, unless that has passed too: then slots were
    missed, this one fired for them all, and the next is the first after now. None if the
    cron is not due (a stale schedule entry, a disabled cron).

    A cron whose definition no longer passes the rules (stored by an older version) does
    not fire: it is disabled, with the reason as its `error`, and the request is None."""
    slot = next_run_ms(state)
    if not state.get("enabled") or slot is None or slot > now_ms:
        return None
    problem = definition({k: v for k, v in state.items() if k in _DEFINITION_FIELDS})
    request = None if isinstance(problem, GatewayError) else parse_request(
        firing_job(state, slot, now_ms)
    )  # fmt: skip
    if isinstance(problem, GatewayError) or not isinstance(request, Request):
        why = problem if isinstance(problem, GatewayError) else request
        stopped = {
            **state,
            "enabled": False,
            "next_run_at": None,
            "updated_at": format_rfc3339(now_ms),
        }
        return None, {**stopped, "error": str(why)}
    after = {
        **state, "last_run_at": format_rfc3339(now_ms),
        "run_count": int(state.get("run_count") or 0) + 1,
    }  # fmt: skip
    scheduled = _scheduled(after, slot)
    if (next_run_ms(scheduled) or now_ms + 1) <= now_ms:
        scheduled = _scheduled(after, now_ms)
    return request, scheduled


def firing_job(cron: Mapping[str, Any], slot_ms: int, now_ms: int) -> dict[str, Any]:
    """The job a cron's slot enqueues (checked at registration): its template, with the
    cron's name, slot and firing time in meta and the overlap policy as its unique policy."""
    template = cron["job_template"]
    meta = {
        **template["meta"], "cron_name": cron["name"], "cron_slot": format_rfc3339(slot_ms),
        "cron_triggered_at": format_rfc3339(now_ms),
    }  # fmt: skip
    job = {
        "type": template["type"], "args": template["args"],
        "options": {**template["options"], "unique": _unique(cron["overlap_policy"])},
        "meta": meta,
    }  # fmt: skip
    return job


def _unique(overlap: str) -> dict[str, Any]:
    if overlap in ("skip", "cancel_previous"):
        return {
            "keys": ["type", "meta"], "meta_keys": ["cron_name"],
            "states": [str(s) for s in ALL_STATES if s not in TERMINAL_STATES],
            "on_conflict": "reject" if overlap == "skip" else "replace",
        }  # fmt: skip
    return {
        "keys": ["type", "meta"], "meta_keys": ["cron_name", "cron_slot"],
        "states": [str(s) for s in ALL_STATES], "on_conflict": "ignore",
    }  # fmt: skip


def shown(state: Mapping[str, Any]) -> dict[str, Any]:
    """A cron as the HTTP binding shows it: OJS cron's fields, with the aliases the OJS
    documents use (`cron` and `expression`; `job_template` and type, args, options)."""
    template = state["job_template"]
    return {
        **state, "cron": state["expression"], **template,
        "status": "active" if state["enabled"] else "disabled",
    }  # fmt: skip


def _anchor(state: Mapping[str, Any]) -> int:
    """Where @every counts from: the registration that made the cron."""
    return parse_rfc3339(str(state.get("created_at"))) or 0


def _bad(message: str) -> GatewayError:
    return GatewayError(INVALID_REQUEST, message)
