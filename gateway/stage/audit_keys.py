"""The audit key file: the secrets that seal the audit trail (docs/audit.md, "Sealed with a
key").

Without a key, a record's digest proves its bytes and its place in the chain against
accidental damage only: whoever can write to `decisions` can recompute it. With one, the
processor keys each digest (BLAKE2b's own keyed mode) with a secret the writer of a forged
record does not hold.

The file holds one key a line, `ID SECRET`, the newest last; blank lines and lines
starting with `#` are skipped:

    # made with: echo "2026-02 $(openssl rand -hex 32)" >> audit.keys
    2026-01 5f0c...
    2026-02 9a41...

The processor seals with the newest and names its id in each record (`sealed_by`); replay,
explain and the history route verify a record with the key of the file its id names, so
keys rotate as credentials do: add the new key last on every reader, then restart the
processor; drop an old one once no record it sealed is kept (30 days).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from gateway.stage.trail import Sealer

ENV = "GATEWAY_AUDIT_KEY_FILE"
_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
_HEX = re.compile(r"[0-9a-fA-F]+")
# BLAKE2b takes keys of up to 64 bytes; fewer than 16 are too easily guessed.
MIN_BYTES, MAX_BYTES = 16, 64


class AuditKeyError(Exception):
    """The key file cannot be used: `code` names the problem, the message says where. No
    message ever holds a secret."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class AuditKeys:
    """The keys of a key file, by id; `newest` seals."""

    keys: dict[str, bytes]
    newest: str

    def sealer(self) -> Sealer:
        return Sealer(self.keys[self.newest], self.newest)

    def get(self, key_id: str) -> bytes | None:
        return self.keys.get(key_id)

    def __repr__(self) -> str:  # ids only: settings are printed and pickled, never a secret
        return f"AuditKeys(ids={sorted(self.keys)!r}, newest={self.newest!r})"


def load(path: Path) -> AuditKeys:
    """The keys in `path`; AuditKeyError if it cannot be read or holds no valid key."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise AuditKeyError("audit_key_file_unreadable", f"{path}: {reason}") from exc
    return parse(text, str(path))


def parse(text: str, where: str) -> AuditKeys:
    keys: dict[str, bytes] = {}
    newest = None
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        at = f"{where}, line {number}"
        parts = line.split()
        if len(parts) != 2:
            raise AuditKeyError("audit_key_line_invalid", f"{at}: expected `ID SECRET` (two words)")
        key_id, secret = parts
        if _ID.fullmatch(key_id) is None:
            raise AuditKeyError(
                "audit_key_id_invalid",
                f"{at}: a key id is 1 to 64 letters, digits, '.', '_' or '-'",
            )
        if key_id in keys:
            raise AuditKeyError("audit_key_id_repeated", f"{at}: key id {key_id!r} is repeated")
        if (
            _HEX.fullmatch(secret) is None
            or len(secret) % 2
            or not MIN_BYTES <= len(secret) // 2 <= MAX_BYTES
        ):
            raise AuditKeyError(
                "audit_key_secret_invalid",
                f"{at}: the secret of {key_id!r} must be {MIN_BYTES} to {MAX_BYTES} bytes in "
                f"hex ({MIN_BYTES * 2} to {MAX_BYTES * 2} hex digits; openssl rand -hex 32)",
            )
        keys[key_id] = bytes.fromhex(secret)
        newest = key_id
    if newest is None:
        raise AuditKeyError("audit_key_file_empty", f"{where}: holds no key (`ID SECRET` lines)")
    return AuditKeys(keys, newest)
