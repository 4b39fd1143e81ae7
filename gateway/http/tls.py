"""HTTPS for `gateway serve`: the server's TLS context, and the client certificate in scope.

TLS 1.2 is the least a client may speak. With a client CA, each client's certificate is
verified in the handshake (mutual TLS): required by default, so a connection without one
is refused before any HTTP; optional if asked, so a client without one (a health probe, a
producer with a token) is served and has no peer subject (gateway/http/peer.py). A
certificate presented and not signed by that CA is refused either way.

Every file is read when serve starts: one that cannot be used is a TlsError, its `code`
naming the problem, and serve exits 2 saying which file and why, before it listens.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gateway.http.peer import distinguished_name

ClientCert = Literal["required", "optional"]
_TLS_VERSIONS = {"TLSv1.2": 0x0303, "TLSv1.3": 0x0304}  # as ASGI's TLS extension numbers them


class TlsError(Exception):
    """A TLS file cannot be used: `code` names the problem, the message which file and why.
    No message holds a key's bytes."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class TlsFiles:
    """The server's certificate (chain, leaf first) and key, in PEM; and the CA that signs
    the clients' certificates, with whether a client must present one."""

    cert: Path
    key: Path
    client_ca: Path | None = None
    client_cert: ClientCert = "required"


def server_context(files: TlsFiles) -> ssl.SSLContext:
    """The context serve's listening socket speaks TLS with; TlsError if a file is bad."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    cert = _read(files.cert, "--tls-cert-file")
    _read(files.key, "--tls-key-file")
    try:
        ssl.create_default_context(cadata=cert.decode("ascii", "replace"))
    except (ssl.SSLError, ValueError) as exc:
        raise TlsError(
            "tls_cert_invalid", f"--tls-cert-file {files.cert}: not a PEM certificate"
        ) from exc
    try:
        context.load_cert_chain(files.cert, files.key, password=_encrypted(files.key))
    except ssl.SSLError as exc:
        if exc.library == "X509" or exc.reason == "NO_CERTIFICATE_ASSIGNED":
            raise TlsError(
                "tls_key_mismatch",
                f"--tls-key-file {files.key} is not the key of the certificate in {files.cert}",
            ) from exc
        raise TlsError(
            "tls_key_invalid", f"--tls-key-file {files.key}: not a PEM private key"
        ) from exc
    if files.client_ca is not None:
        _read(files.client_ca, "--tls-client-ca-file")
        try:
            context.load_verify_locations(cafile=files.client_ca)
        except ssl.SSLError as exc:
            raise TlsError(
                "tls_client_ca_invalid",
                f"--tls-client-ca-file {files.client_ca}: no PEM certificate in it",
            ) from exc
        required = files.client_cert == "required"
        context.verify_mode = ssl.CERT_REQUIRED if required else ssl.CERT_OPTIONAL
    return context


def _read(path: Path, flag: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise TlsError("tls_file_unreadable", f"{flag} {path}: {exc.strerror}") from exc


def _encrypted(key: Path) -> Callable[[], bytes]:
    """OpenSSL's password callback: called only for an encrypted key, which serve cannot
    open (it would otherwise ask on the terminal)."""

    def refuse() -> bytes:
        raise TlsError(
            "tls_key_encrypted",
            f"--tls-key-file {key} is encrypted: give serve the key decrypted "
            "(openssl pkey -in KEY -out PLAIN), readable by its user only",
        )

    return refuse


class PeerCertProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, each request's scope also carrying the connection's
    TLS facts as ASGI's TLS extension: the client certificate the handshake verified, its
    subject (RFC 4514), the TLS version. uvicorn fills no such extension itself."""

    tls: dict[object, object] | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        ssl_object = transport.get_extra_info("ssl_object")
        if ssl_object is None:
            return
        # The app protocol is told of the connection once the handshake is done.
        peer, der = ssl_object.getpeercert(), ssl_object.getpeercert(binary_form=True)
        self.tls = {
            "server_cert": None,
            "client_cert_chain": [ssl.DER_cert_to_PEM_cert(der)] if der else [],
            "client_cert_name": distinguished_name(peer["subject"]) if peer else None,
            "client_cert_error": None,
            "tls_version": _TLS_VERSIONS.get(ssl_object.version() or ""),
            "cipher_suite": None,
        }

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self.tls is not None:
            self.scope["extensions"] = {"tls": self.tls}
