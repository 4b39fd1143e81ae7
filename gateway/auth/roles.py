"""Operations, the roles that grant them, and name patterns (OJS security §7, §8.1).

An operation is what a route does (OJS security §7.2); a principal holds a role,
which stands for a set of operations (§7.3 and the matrix of §7.5, plus
read-only), or lists its operations itself. Its queue patterns say which
queues those operations reach: `*` stands for any run of characters, so
`orders.*` is every queue whose name starts with `orders.`. The job types the
HTTP binding lets in (`serve --job-types`) are patterns of the same kind.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

ENQUEUE = "enqueue"
DEQUEUE = "dequeue"  # fetch, and ack, nack and heartbeat of the jobs fetched
CANCEL = "cancel"
INSPECT = "inspect"
ADMIN = "admin"
OPERATIONS = (ENQUEUE, DEQUEUE, CANCEL, INSPECT, ADMIN)

ROLES: dict[str, frozenset[str]] = {
    "producer": frozenset({ENQUEUE}),
    "worker": frozenset({DEQUEUE}),
    "operator": frozenset({ENQUEUE, CANCEL, INSPECT}),
    "admin": frozenset(OPERATIONS),
    "read-only": frozenset({INSPECT}),
}

ANY_QUEUE = "*"
# A queue name's characters (core/envelope.py), and `*`; a job type's are among them.
_PATTERN = re.compile(r"[a-z0-9*][a-z0-9._*-]{0,254}")
PATTERN_RULE = '1 to 255 characters of a-z, 0-9, ".", "_", "-" and "*"'


def is_valid_pattern(pattern: str) -> bool:
    return _PATTERN.fullmatch(pattern) is not None


@dataclass(frozen=True)
class Patterns:
    """The names some patterns match (`Patterns.of`): the queues a principal's
    operations reach, or the job types the binding lets in."""

    patterns: tuple[str, ...]
    regex: re.Pattern[str]

    @classmethod
    def of(cls, patterns: Iterable[str]) -> Patterns:
        patterns = tuple(patterns)
        parts = "|".join(".*".join(map(re.escape, p.split("*"))) for p in patterns)
        return cls(patterns, re.compile(f"(?:{parts})" if parts else "(?!)"))

    @property
    def every(self) -> bool:
        """Whether every name matches: routes over every queue need it."""
        return ANY_QUEUE in self.patterns

    def matches(self, name: str) -> bool:
        return self.regex.fullmatch(name) is not None


def operations_of(role: str | None, operations: Iterable[str] | None) -> frozenset[str]:
    """The operations a role, or an explicit list, grants."""
    return ROLES[role] if role is not None else frozenset(operations or ())
