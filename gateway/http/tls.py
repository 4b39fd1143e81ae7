"""HTTPS for `gateway serve`: the server's TLS context from the deployment's files.

TLS 1.2 is the least a client may speak. With a client CA, each client's certificate is
verified in the handshake (mutual TLS): required by default, so a connection without one
is refused before any HTTP; optional if asked, so a client without one (a health probe, a
producer with a token) is served. A certificate presented and not signed by that CA is
refused either way.

Every file is read when serve starts: one that cannot be used is a TlsError, its `code`
naming the problem, and serve exits 2 saying which file and why, before it listens.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

ClientCert = Literal["required", "optional"]


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
