"""Throwaway TLS material for tests, made with the `openssl` command in a test's own
directory: a CA, a server certificate for 127.0.0.1 it signed, a client certificate it
signed, and a client certificate another CA signed. Nothing of it outlives the test."""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class Material:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    stranger_cert: Path  # signed by another CA
    stranger_key: Path

    def client_context(
        self, cert: bool = True, maximum: ssl.TLSVersion | None = None
    ) -> ssl.SSLContext:
        """A client trusting the CA, with its certificate unless `cert` is False; with
        `maximum`, one that offers no later TLS version (and the old ciphers it needs)."""
        context = ssl.create_default_context(cafile=self.ca)
        if cert:
            context.load_cert_chain(self.client_cert, self.client_key)
        if maximum is not None:
            context.set_ciphers("DEFAULT:@SECLEVEL=0")
            with warnings.catch_warnings():  # the deprecated versions, on purpose
                warnings.simplefilter("ignore", DeprecationWarning)
                context.minimum_version = ssl.TLSVersion.TLSv1
                context.maximum_version = maximum
        return context


def _openssl(directory: Path, *argv: str) -> None:
    done = subprocess.run(["openssl", *argv], cwd=directory, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def _signed(directory: Path, name: str, subject: str, ca: str, extensions: str) -> None:
    _openssl(directory, "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject)  # fmt: skip
    (directory / f"{name}.ext").write_text(extensions)
    _openssl(directory, "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem",
             "-CAkey", f"{ca}.key", "-CAcreateserial", "-days", "1",
             "-extfile", f"{name}.ext", "-out", f"{name}.pem")  # fmt: skip


def make(directory: Path) -> Material:
    """Fresh material in `directory`; the test is skipped where there is no `openssl`."""
    if shutil.which("openssl") is None:
        pytest.skip("no openssl command to make test certificates with")
    directory.mkdir(parents=True, exist_ok=True)
    for ca in ("ca", "other-ca"):
        _openssl(directory, "req", "-x509", "-newkey", "ec", "-pkeyopt",
                 "ec_paramgen_curve:P-256", "-nodes", "-keyout", f"{ca}.key", "-out", f"{ca}.pem",
                 "-days", "1", "-subj", f"/CN=gateway test {ca}")  # fmt: skip
    ids = "basicConstraints=CA:FALSE\nauthorityKeyIdentifier=keyid,issuer\n"
    server = "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"
    _signed(directory, "server", "/CN=127.0.0.1", "ca", ids + server)
    client = ids + "extendedKeyUsage=clientAuth\n"
    _signed(directory, "client", "/O=gateway tests/CN=worker-7\\, eu", "ca", client)
    _signed(directory, "stranger", "/CN=worker-7", "other-ca", client)
    d = directory
    return Material(d / "ca.pem", d / "server.pem", d / "server.key", d / "client.pem",
                    d / "client.key", d / "stranger.pem", d / "stranger.key")  # fmt: skip


def refusal(base: str, context: ssl.SSLContext) -> str:
    """Why a client with `context` got no answer: its handshake's error, or of its first
    read, or "closed" (TLS 1.3 refuses a client certificate after the client thinks the
    handshake done). Asserts it was not served."""
    port = int(base.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        try:
            with context.wrap_socket(raw, server_hostname="127.0.0.1") as conn:
                conn.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                got = conn.recv(1)
        except OSError as exc:  # ssl.SSLError among them
            return str(exc)
    assert got == b"", f"served: {got!r}"
    return "closed"
