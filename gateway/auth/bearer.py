"""Who a request is: its `Authorization: Bearer` key, or the address of one sent without.

The one check every server that takes keys makes, whatever serves it: the HTTP
binding (gateway/http/access.py) and the processor's status port
(gateway/processor/status_access.py). A key is looked up by its SHA-256 first
(keys.py), so a wrong key costs no slow hash; a right one's scrypt hash is checked
once per process (`verify`), which a server may run off its event loop.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from gateway.auth import keys
from gateway.auth.credentials import Principal
from gateway.auth.keyring import Keyring


class Unauthenticated(Exception):
    """No valid key; the message says what to send."""


@dataclass(frozen=True)
class Unverified:
    """A key with the id of a live key on file, its hash not checked in this process yet."""

    key: str
    digest: bytes
    now_ms: int


def identify(
    ring: Keyring, authorization: Sequence[str], address: str | None
) -> Principal | Unverified:
    """The principal of the request's Authorization headers (or of its address, for a
    request without one), or the key still to `verify`; raise Unauthenticated. Fast."""
    if not authorization:
        principal = ring.keyless(address)
        if principal is not None:
            return principal
        raise Unauthenticated("send `Authorization: Bearer <key>`")
    if len(authorization) > 1:
        raise Unauthenticated("send one Authorization header, not several")
    scheme, _, key = authorization[0].partition(" ")
    key = key.strip()
    if scheme.lower() != "bearer" or not key:
        raise Unauthenticated("send `Authorization: Bearer <key>`")
    if len(key) > keys.MAX_KEY_CHARS:
        raise Unauthenticated("the key is not valid")
    key_digest, now_ms = keys.digest(key), time.time_ns() // 1_000_000
    principal = ring.cached(key_digest, now_ms)
    if principal is not None:
        return principal
    if ring.candidate(key_digest, now_ms):
        return Unverified(key, key_digest, now_ms)
    raise _invalid()


def verify(ring: Keyring, unverified: Unverified) -> Principal:
    """The key's principal if its hash matches, else Unauthenticated (slow: scrypt)."""
    principal = ring.verify(unverified.key, unverified.digest, unverified.now_ms)
    if principal is None:
        raise _invalid()
    return principal


def authenticate(ring: Keyring, authorization: Sequence[str], address: str | None) -> Principal:
    """`identify`, and `verify` in this thread: for a server with a thread per request."""
    found = identify(ring, authorization, address)
    return verify(ring, found) if isinstance(found, Unverified) else found


def _invalid() -> Unauthenticated:
    return Unauthenticated("the key is not valid (unknown, revoked or expired)")
