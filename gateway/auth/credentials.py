"""The credentials file: principals, their role or operations, queues and hashed keys.

TOML, one `[[principal]]` table each (docs/security.md):

    [[principal]]
    name = "orders-api"
    role = "producer"                 # or: operations = ["enqueue", "inspect"]
    queues = ["orders", "orders.*"]
    # tenants = ["acme"]               # optional: acts for and sees these tenants' jobs only
    # keyless_from = ["127.0.0.1/32", "::1/128"]   # see docs/security.md

    [[principal.key]]
    id = "3f9a0c1d2e4b5a69"           # public: the key's SHA-256, first 64 bits
    hash = "scrypt$16384$8$1$...$..."
    created = "2026-01-02T03:04:05.000Z"
    expires = "2026-01-03T03:04:05.000Z"   # optional: refused from then on

No plain key is ever written: `gateway keys` prints a new key once and stores its
hash. Everything is checked when read; a file with any problem is refused whole.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import os
import re
import tempfile
import tomllib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import orjson

from gateway.auth import keys, roles
from gateway.core.tenants import TENANT_RULE, is_valid_tenant
from gateway.core.times import format_rfc3339, parse_rfc3339

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

# OJS security §12.5: old and new key both accepted for a day by default.
DEFAULT_GRACE_S = 24 * 3600
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")
NAME_RULE = '1 to 64 characters of A-Z, a-z, 0-9, ".", "_", "@" and "-"'
_KEY_ID = re.compile(r"[0-9a-f]{16}")
_PRINCIPAL_FIELDS = ("name", "role", "operations", "queues", "tenants", "keyless_from", "key")
_KEY_FIELDS = ("id", "hash", "created", "expires")


class CredentialsError(Exception):
    """A credentials file that cannot be used, or an edit that cannot be made."""


@dataclass(frozen=True)
class Key:
    id: str
    hash: str
    created_ms: int
    expires_ms: int | None = None

    def live(self, now_ms: int) -> bool:
        return self.expires_ms is None or now_ms < self.expires_ms


@dataclass(frozen=True)
class Principal:
    name: str
    role: str | None  # None: `operations` lists them
    operations: frozenset[str]
    queues: roles.Patterns
    keys: tuple[Key, ...] = ()
    # Requests with no Authorization header from these networks are this principal's.
    keyless_from: tuple[Network, ...] = ()
    # The tenants it is bound to (core/tenants.py): it acts for and sees only their jobs.
    # Empty: bound to none, it acts for any tenant and sees every job its queues hold.
    tenants: frozenset[str] = frozenset()


def load(path: Path) -> tuple[Principal, ...]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CredentialsError(f"cannot read credentials file {path}: {exc}") from None
    return parse(text, str(path))


def parse(text: str, where: str = "the credentials file") -> tuple[Principal, ...]:
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise CredentialsError(f"{where} is not valid TOML: {exc}") from None
    _known(document, ("principal",), where)
    tables = document.get("principal", [])
    if not isinstance(tables, list):
        raise CredentialsError(f"{where}: `principal` must be an array of tables, [[principal]]")
    principals = tuple(_principal(table, f"{where}, principal {i + 1}") for i, table in
                       enumerate(tables))  # fmt: skip
    _unique((p.name for p in principals), "principal name", where)
    _unique((k.id for p in principals for k in p.keys), "key id", where)
    if sum(1 for p in principals if p.keyless_from) > 1:
        raise CredentialsError(f"{where}: at most one principal may have keyless_from")
    return principals


def dump(principals: Iterable[Principal]) -> str:
    """The file's text; `parse` reads it back as the same principals."""
    lines = ["# gateway credentials: see docs/security.md. Keys are stored as hashes only."]
    for p in principals:
        lines += ["", "[[principal]]", f"name = {_str(p.name)}"]
        if p.role is not None:
            lines.append(f"role = {_str(p.role)}")
        else:
            lines.append(f"operations = {_strs(sorted(p.operations))}")
        lines.append(f"queues = {_strs(p.queues.patterns)}")
        if p.tenants:
            lines.append(f"tenants = {_strs(sorted(p.tenants))}")
        if p.keyless_from:
            lines.append(f"keyless_from = {_strs(str(n) for n in p.keyless_from)}")
        for k in p.keys:
            lines += ["", "[[principal.key]]", f"id = {_str(k.id)}", f"hash = {_str(k.hash)}"]
            lines.append(f"created = {_str(format_rfc3339(k.created_ms))}")
            if k.expires_ms is not None:
                lines.append(f"expires = {_str(format_rfc3339(k.expires_ms))}")
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def editing(path: Path) -> Iterator[None]:
    """Hold the file's edit lock (a `.NAME.lock` file beside it) while reading, changing
    and saving it, so two edits at once each keep the other's change."""
    lock = path.parent / f".{path.name}.lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def save(path: Path, principals: Iterable[Principal]) -> None:
    """Write the file whole, readable by its owner only, replacing the old one at once: a
    serve process reading it sees the old file or the new one, never half of one."""
    text = dump(principals)
    parse(text, str(path))  # never write what could not be read back
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def principal(
    name: str, role: str | None, operations: Iterable[str] | None, queues: Iterable[str],
    keyless_from: Iterable[str] = (), tenants: Iterable[str] = (),
) -> Principal:  # fmt: skip
    """A new principal without keys, checked as a file's would be."""
    table: dict[str, Any] = {
        "name": name, "queues": list(queues), "keyless_from": list(keyless_from)
    }  # fmt: skip
    if tenants:
        table["tenants"] = list(tenants)
    if role is not None:
        table["role"] = role
    if operations is not None:
        table["operations"] = list(operations)
    return _principal(table, f"principal {name!r}")


def with_key(
    principals: tuple[Principal, ...], name: str, key: str, now_ms: int,
    new: Principal | None = None, grace_ms: int | None = None,
) -> tuple[Principal, ...]:  # fmt: skip
    """Add `key` (its hash) to principal `name`, or `new` when there is none by that name.
    With `grace_ms`, the principal's other keys expire that long from now (rotation)."""
    record = Key(keys.key_id(keys.digest(key)), keys.hash_key(key), now_ms)
    found = [p for p in principals if p.name == name]
    if not found:
        if new is None:
            raise CredentialsError(f"no principal is named {name!r}")
        return (*principals, replace(new, keys=(record,)))
    old = found[0]
    kept = old.keys
    if grace_ms is not None:
        until = now_ms + grace_ms
        kept = tuple(replace(k, expires_ms=min(k.expires_ms or until, until)) for k in kept)
    return tuple(replace(p, keys=(*kept, record)) if p is old else p for p in principals)


def without_keys(
    principals: tuple[Principal, ...], name: str, key_id: str | None = None
) -> tuple[Principal, ...]:
    """Principal `name` with none of its keys, or without the one `key_id` names."""
    found = [p for p in principals if p.name == name]
    if not found:
        raise CredentialsError(f"no principal is named {name!r}")
    old = found[0]
    if key_id is not None and key_id not in {k.id for k in old.keys}:
        raise CredentialsError(f"principal {name!r} has no key {key_id!r}")
    kept = () if key_id is None else tuple(k for k in old.keys if k.id != key_id)
    return tuple(replace(p, keys=kept) if p is old else p for p in principals)


def _principal(table: Any, where: str) -> Principal:
    if not isinstance(table, Mapping):
        raise CredentialsError(f"{where} must be a table")
    _known(table, _PRINCIPAL_FIELDS, where)
    name = table.get("name")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise CredentialsError(f"{where}: name must be {NAME_RULE}")
    where = f"{where} ({name})"
    role, listed = table.get("role"), table.get("operations")
    if (role is None) == (listed is None):
        raise CredentialsError(f"{where}: give a role or a list of operations, one of them")
    if role is not None and role not in roles.ROLES:
        raise CredentialsError(f"{where}: role must be one of {', '.join(roles.ROLES)}")
    if listed is not None and (
        not _strings(listed) or not listed or not set(listed) <= set(roles.OPERATIONS)
    ):
        raise CredentialsError(
            f"{where}: operations must be a list of some of {', '.join(roles.OPERATIONS)}"
        )
    patterns = table.get("queues")
    if not _strings(patterns) or not patterns or not all(map(roles.is_valid_pattern, patterns)):
        raise CredentialsError(
            f'{where}: queues must be a list of queue patterns ("*" for every queue), each '
            f"{roles.PATTERN_RULE}"
        )
    tenants = table.get("tenants", [])
    if not _strings(tenants) or not all(map(is_valid_tenant, tenants)):
        raise CredentialsError(f"{where}: tenants must be a list of tenant ids, each {TENANT_RULE}")
    return Principal(
        name, role, roles.operations_of(role, listed), roles.Patterns.of(patterns),
        tuple(_key(k, f"{where}, key {i + 1}") for i, k in enumerate(_tables(table, where))),
        _networks(table.get("keyless_from", []), where), frozenset(tenants),
    )  # fmt: skip


def _tables(table: Mapping[str, Any], where: str) -> list[Any]:
    found = table.get("key", [])
    if not isinstance(found, list):
        raise CredentialsError(f"{where}: `key` must be an array of tables, [[principal.key]]")
    return found


def _key(table: Any, where: str) -> Key:
    if not isinstance(table, Mapping):
        raise CredentialsError(f"{where} must be a table")
    _known(table, _KEY_FIELDS, where)
    key_id, stored = table.get("id"), table.get("hash")
    if not isinstance(key_id, str) or not _KEY_ID.fullmatch(key_id):
        raise CredentialsError(f"{where}: id must be 16 hexadecimal digits")
    if not isinstance(stored, str) or not keys.is_hash(stored):
        raise CredentialsError(
            f"{where}: hash must be a key's scrypt hash as `gateway keys` writes it "
            "(never the key itself)"
        )
    created, expires = _time(table.get("created")), None
    if created is None:
        raise CredentialsError(f"{where}: created must be an RFC 3339 time")
    if "expires" in table and (expires := _time(table["expires"])) is None:
        raise CredentialsError(f"{where}: expires must be an RFC 3339 time")
    return Key(key_id, stored, created, expires)


def _time(value: Any) -> int | None:
    return parse_rfc3339(value) if isinstance(value, str) else None


def _networks(value: Any, where: str) -> tuple[Network, ...]:
    if not _strings(value):
        raise CredentialsError(f"{where}: keyless_from must be a list of networks")
    try:
        return tuple(ipaddress.ip_network(v) for v in value)
    except ValueError as exc:
        raise CredentialsError(f"{where}: keyless_from: {exc}") from None


def _known(table: Mapping[str, Any], fields: tuple[str, ...], where: str) -> None:
    unknown = sorted(set(table) - set(fields))
    if unknown:
        raise CredentialsError(
            f"{where}: unknown field {', '.join(map(repr, unknown))}; known: {', '.join(fields)}"
        )


def _unique(values: Iterable[str], what: str, where: str) -> None:
    seen: set[str] = set()
    for value in values:
        if value in seen:
            raise CredentialsError(f"{where}: {what} {value!r} is given twice")
        seen.add(value)


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _str(value: str) -> str:
    # A JSON string of printable text is a TOML basic string.
    return orjson.dumps(value).decode()


def _strs(values: Iterable[str]) -> str:
    return "[" + ", ".join(map(_str, values)) + "]"
