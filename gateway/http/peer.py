"""Who the TLS handshake says is on the other end of a request's connection.

With `--tls-client-ca-file`, serve verifies each client's certificate in the handshake,
and each request's scope carries it as ASGI's TLS extension (`scope["extensions"]["tls"]`,
filled by gateway/http/tls.py): `client_cert_name` is the certificate's subject as an
RFC 4514 string, `CN=worker-7,O=example`. `peer_subject` reads the common name back: a
name a principal can be found by. Nothing here trusts a header; a scope without the
extension (plain HTTP, TLS without a client certificate) has no peer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# The short names RFC 4514 gives these attribute types; any other keeps the name the
# ssl module gives it (its OpenSSL long name, or its dotted OID).
_SHORT = {
    "commonName": "CN", "localityName": "L", "stateOrProvinceName": "ST",
    "organizationName": "O", "organizationalUnitName": "OU", "countryName": "C",
    "streetAddress": "STREET", "domainComponent": "DC", "userId": "UID",
}  # fmt: skip
_SPECIAL = ',+"\\<>;='


def peer_subject(connection: Mapping[str, Any]) -> str | None:
    """The common name (CN) of the client certificate the TLS handshake verified for this
    request's connection, or None: no TLS, no client certificate, or one without a CN.
    `connection` is the ASGI scope, or a Starlette Request (a mapping over its scope)."""
    extensions = connection.get("extensions") or {}
    tls = extensions.get("tls") or {}
    name = tls.get("client_cert_name")
    if not name:
        return None
    for rdn in _split(name, ","):
        for attribute in _split(rdn, "+"):
            kind, _, value = attribute.partition("=")
            if kind.strip().upper() in ("CN", "2.5.4.3"):
                return _unescape(value)
    return None


def distinguished_name(subject: tuple[tuple[tuple[str, str], ...], ...]) -> str:
    """RFC 4514's string for a subject as `SSLSocket.getpeercert()` gives it (its RDNs in
    certificate order; the string names them last first)."""
    return ",".join(
        "+".join(f"{_SHORT.get(kind, kind)}={_escape(value)}" for kind, value in rdn)
        for rdn in reversed(subject)
    )


def _escape(value: str) -> str:
    out = "".join(f"\\{c}" if c in _SPECIAL else "\\00" if c == "\0" else c for c in value)
    if out.startswith((" ", "#")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out


def _split(text: str, separator: str) -> list[str]:
    """`text` split at each `separator` no backslash escapes."""
    parts, current, escaped = [], [], False
    for c in text:
        if escaped:
            current.append(c)
            escaped = False
        elif c == "\\":
            current.append(c)
            escaped = True
        elif c == separator:
            parts.append("".join(current))
            current = []
        else:
            current.append(c)
    parts.append("".join(current))
    return parts


def _unescape(value: str) -> str:
    """A value with RFC 4514's escapes (`\\,` and `\\HH`, a byte in hex) undone."""
    out, raw, i = [], bytearray(), 0
    while i < len(value):
        c = value[i]
        if c == "\\" and _is_hex(value[i + 1 : i + 3]):
            raw.append(int(value[i + 1 : i + 3], 16))
            i += 3
            continue
        if raw:
            out.append(raw.decode("utf-8", "replace"))
            raw.clear()
        if c == "\\" and i + 1 < len(value):
            out.append(value[i + 1])
            i += 2
        else:
            out.append(c)
            i += 1
    if raw:
        out.append(raw.decode("utf-8", "replace"))
    return "".join(out)


def _is_hex(pair: str) -> bool:
    return len(pair) == 2 and all(c in "0123456789abcdefABCDEF" for c in pair)
