"""API keys: made at random, stored as scrypt hashes, found by a public id.

A key is `gk_` and 256 random bits (OJS security §6.1), base64url. Its id is the
first 64 bits of its SHA-256, in hex: public (the credentials file and the
`keys` commands name a key by it), and what a request's key is looked up by, so a
wrong key costs one SHA-256 and a dictionary miss, never a slow hash. Only a key
whose id matches one on file is verified against its scrypt hash (OJS security
§12.3); the keyring remembers the keys it has verified.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

PREFIX = "gk_"
KEY_BYTES = 32  # 256 bits
_ID_BYTES = 8
# scrypt's cost: about 16 MiB and some tens of milliseconds, paid once per key and process.
_N, _R, _P = 2**14, 8, 1
# The most a stored hash may ask for (a few hundred MiB at most).
_MAX_N, _MAX_R, _MAX_P = 2**17, 16, 4
_SALT_BYTES = 16
_HASH_BYTES = 32
# The longest key looked at: longer ones are no key of ours, and never hashed whole.
MAX_KEY_CHARS = 128


def new_key() -> str:
    return PREFIX + base64.urlsafe_b64encode(secrets.token_bytes(KEY_BYTES)).decode().rstrip("=")


def digest(key: str) -> bytes:
    """The key's SHA-256: its id, and what verified keys are remembered by."""
    return hashlib.sha256(key.encode()).digest()


def key_id(key_digest: bytes) -> str:
    return key_digest[:_ID_BYTES].hex()


def hash_key(key: str) -> str:
    """The key's scrypt hash as stored: `scrypt$N$r$p$salt$hash`, salt and hash base64."""
    salt = secrets.token_bytes(_SALT_BYTES)
    derived = _scrypt(key, salt, _N, _R, _P)
    return "$".join(("scrypt", str(_N), str(_R), str(_P), _b64(salt), _b64(derived)))


def is_hash(stored: str) -> bool:
    """Whether `stored` reads as a hash `hash_key` makes."""
    try:
        _parts(stored)
    except ValueError:
        return False
    return True


def verify(key: str, stored: str) -> bool:
    """Whether `key` is the one `stored` is the hash of (slow: scrypt)."""
    n, r, p, salt, expected = _parts(stored)
    return hmac.compare_digest(_scrypt(key, salt, n, r, p), expected)


def _parts(stored: str) -> tuple[int, int, int, bytes, bytes]:
    name, n, r, p, salt, derived = stored.split("$")
    if name != "scrypt" or not (n.isdigit() and r.isdigit() and p.isdigit()):
        raise ValueError("not a scrypt hash")
    cost = int(n), int(r), int(p)
    if not (1 < cost[0] <= _MAX_N and 0 < cost[1] <= _MAX_R and 0 < cost[2] <= _MAX_P):
        raise ValueError("a scrypt cost out of range")
    return *cost, base64.b64decode(salt, validate=True), base64.b64decode(derived, validate=True)


def _scrypt(key: str, salt: bytes, n: int, r: int, p: int) -> bytes:
    return hashlib.scrypt(
        key.encode(), salt=salt, n=n, r=r, p=p, maxmem=2 * 128 * n * r * p, dklen=_HASH_BYTES
    )


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()
