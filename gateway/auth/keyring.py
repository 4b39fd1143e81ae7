"""The principals a serve process answers from, read again when their file changes.

A Keyring is one reading of the credentials file, with the keys it has verified
so far (by SHA-256: a key's scrypt hash is checked once per process, not per
request). A Watcher holds the current Keyring and replaces it when the file
changes (looked at, at most once a POLL_S, when asked) or when told to (SIGHUP:
`reload` at once, or `reread_soon` from a handler that must take no lock):
a key removed from the file is refused from then on. A file that cannot be read
keeps the last good Keyring, with an error logged.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import time
from pathlib import Path

from gateway.auth import keys
from gateway.auth.credentials import CredentialsError, Key, Principal, load

log = logging.getLogger("gateway.auth")

POLL_S = 1.0


class Keyring:
    def __init__(self, principals: tuple[Principal, ...], before: Keyring | None = None) -> None:
        self.principals = principals
        self._by_id: dict[str, tuple[Principal, Key]] = {
            k.id: (p, k) for p in principals for k in p.keys
        }
        # SHA-256 of a key -> its principal and key, once its hash has been checked.
        self._verified: dict[bytes, tuple[Principal, Key]] = {}
        # A copy at once: a thread verifying a key may be adding to the old one.
        for key_digest, (_, old) in list(before._verified.items() if before else ()):
            found = self._by_id.get(old.id)
            if found is not None and found[1].hash == old.hash:
                self._verified[key_digest] = found
        self._keyless = [(n, p) for p in principals for n in p.keyless_from]

    def cached(self, key_digest: bytes, now_ms: int) -> Principal | None:
        """The principal of a key verified before (and not expired since); fast."""
        found = self._verified.get(key_digest)
        return found[0] if found is not None and found[1].live(now_ms) else None

    def candidate(self, key_digest: bytes, now_ms: int) -> bool:
        """Whether a live key on file has this key's id: only then is it worth verifying."""
        found = self._by_id.get(keys.key_id(key_digest))
        return found is not None and found[1].live(now_ms)

    def verify(self, key: str, key_digest: bytes, now_ms: int) -> Principal | None:
        """The key's principal if its hash matches (slow: scrypt; remembered)."""
        found = self._by_id.get(keys.key_id(key_digest))
        if found is None or not found[1].live(now_ms) or not keys.verify(key, found[1].hash):
            return None
        self._verified[key_digest] = found
        return found[0]

    def keyless(self, address: str | None) -> Principal | None:
        """The principal a request without a key is, from this address; None if none."""
        if address is None or not self._keyless:
            return None
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return None
        return next((p for network, p in self._keyless if ip in network), None)


class Watcher:
    """The current Keyring of one credentials file; refuses a bad file at start
    (CredentialsError), keeps the last good one after."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._signature = _signature(path)
        self.keyring = Keyring(load(path))
        self._next_look = time.monotonic() + POLL_S
        self._reread = False  # read the file at the next look, changed or not

    def current(self) -> Keyring:
        now = time.monotonic()
        if self._reread or now >= self._next_look:
            force, self._reread = self._reread, False
            self._next_look = now + POLL_S
            self.reload(force=force)
        return self.keyring

    def reread_soon(self) -> None:
        """Read the file again when next asked, changed or not. Sets a flag only: a signal
        handler may call it in a process whose threads log (`reload` takes their lock)."""
        self._reread = True

    def reload(self, force: bool = True) -> None:
        """Read the file again if it changed (or `force`)."""
        signature = _signature(self.path)
        if signature == self._signature and not force:
            return
        self._signature = signature
        try:
            principals = load(self.path)
        except CredentialsError as exc:
            log.error("the credentials file was not read again, the last one is kept: %s", exc)
            return
        self.keyring = Keyring(principals, self.keyring)
        log.info(
            "credentials read again",
            extra={"path": str(self.path), "principals": len(principals)},
        )


def _signature(path: Path) -> tuple[int, ...] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size)
