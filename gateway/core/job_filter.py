"""Which jobs an operator's filter names: the admin lists and bulk actions ask this.

A filter is an object of known fields, as the OJS Admin UI sends them: `queue`,
`state`, `type`, and `since`/`until`, RFC 3339 instants bounding the job's
`created_at` (both inclusive). Every field is checked and anything else is
refused, because a filter that drops what it does not understand names more
jobs than the operator meant, and a bulk cancel of that filter cancels them.
A field that is absent or null does not narrow; `{}` names every job.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from gateway.core.envelope import QUEUE_NAME_RULE, is_valid_queue_name
from gateway.core.errors import INVALID_REQUEST, GatewayError
from gateway.core.lifecycle import shown_state
from gateway.core.states import ALL_STATES, TERMINAL_STATES, State
from gateway.core.times import parse_rfc3339

FIELDS = ("queue", "state", "type", "since", "until")
BULK_ACTIONS = ("retry", "cancel")
_STATE_NAMES = ", ".join(ALL_STATES)


@dataclass(frozen=True, slots=True)
class JobFilter:
    queue: str | None = None
    state: State | None = None
    type: str | None = None
    since: int | None = None  # epoch ms; the job's created_at is at or after it
    until: int | None = None  # epoch ms; the job's created_at is at or before it
    live: bool = False  # only jobs not finished (no terminal state)

    def states(self) -> tuple[State, ...]:
        """The states a matching job may be in, in the canonical order."""
        if self.state is not None:
            return (self.state,)
        return tuple(s for s in ALL_STATES if not (self.live and s in TERMINAL_STATES))

    def by_index(self) -> bool:
        """Whether state and queue alone decide a match (a view's index answers it)."""
        return self.type is None and self.since is None and self.until is None

    def matches(self, job: Mapping[str, Any], now_ms: int) -> bool:
        """Whether the job, in its state at `now_ms` (lifecycle.shown_state), is named."""
        if shown_state(job, now_ms) not in self.states():
            return False
        if self.queue is not None and job.get("queue") != self.queue:
            return False
        if self.type is not None and job.get("type") != self.type:
            return False
        if self.since is None and self.until is None:
            return True
        created = job.get("created_at")
        at = parse_rfc3339(created) if isinstance(created, str) else None
        if at is None:  # no creation time to compare: outside any time bound
            return False
        return (self.since is None or at >= self.since) and (self.until is None or at <= self.until)


def parse_filter(
    raw: object, where: str = "", fields: tuple[str, ...] = FIELDS
) -> JobFilter | GatewayError:
    """The filter `raw` states, or why it is refused. `where` prefixes each field's name in
    a message (`filter.`); `fields` are those this caller takes, a subset of FIELDS."""
    if not isinstance(raw, Mapping):
        return _refused(f"{where.rstrip('.') or 'the filter'} must be an object of "
                        f"{', '.join(fields)}")  # fmt: skip
    unknown = [str(name) for name in raw if name not in fields]
    if unknown:
        named = ", ".join(f'"{where}{name}"' for name in sorted(unknown))
        return _refused(f"unknown filter field {named}: a filter takes {', '.join(fields)}")
    given = {name: value for name, value in raw.items() if value is not None}
    for name, value in given.items():
        if not isinstance(value, str) or not value:
            return _refused(f"{where}{name} must be a non-empty string")
    queue, state, job_type = given.get("queue"), given.get("state"), given.get("type")
    if queue is not None and not is_valid_queue_name(queue):
        return _refused(f'{where}queue "{queue}" is no queue name: a queue name is '
                        f"{QUEUE_NAME_RULE}")  # fmt: skip
    if state is not None and state not in ALL_STATES:
        return _refused(f'{where}state "{state}" is no job state: use one of {_STATE_NAMES}')
    bounds = {}
    for name in ("since", "until"):
        text = given.get(name)
        at = None if text is None else parse_rfc3339(text)
        if text is not None and at is None:
            return _refused(f'{where}{name} "{text}" is not an RFC 3339 date-time such as '
                            "2026-01-01T00:00:00Z")  # fmt: skip
        bounds[name] = at
    since, until = bounds["since"], bounds["until"]
    if since is not None and until is not None and since > until:
        return _refused(f"{where}since is after {where}until: no job is created in between")
    return JobFilter(queue, None if state is None else State(state), job_type, since, until)


def bulk_filter(action: str, chosen: JobFilter) -> JobFilter:
    """What a bulk action applies to: retry, the discarded jobs unless a state is named;
    cancel, the live ones unless a state is named (a finished job cannot be cancelled)."""
    if chosen.state is not None:
        return chosen
    if action == "retry":
        return replace(chosen, state=State.DISCARDED)
    return replace(chosen, live=True)


def _refused(message: str) -> GatewayError:
    return GatewayError(INVALID_REQUEST, message)
