"""HTTPS options: refused whole when incomplete, each file checked with a coded exit 2
before serve or up starts anything; the server context, over a real handshake with
uvicorn: versions, and client certificates verified."""

from __future__ import annotations

import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import uvicorn

from gateway.cli import main
from gateway.http.tls import TlsError, TlsFiles, server_context
from tests.support import free_port_block
from tests.tls_material import Material, make, refusal

NO_BROKER = ("--bootstrap", "127.0.0.1:1")  # were a command to go on, it would exit 3


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Material:
    return make(tmp_path_factory.mktemp("tls"))


def run(capsys: pytest.CaptureFixture[str], command: str, *argv: str) -> tuple[int, str]:
    code = main([command, *NO_BROKER, *argv])
    return code, capsys.readouterr().err


@pytest.mark.parametrize("command", ["serve", "up"])
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--tls-cert-file", "c.pem"], "--tls-cert-file and --tls-key-file go together"),
        (["--tls-key-file", "k.pem"], "--tls-cert-file and --tls-key-file go together"),
        (["--tls-client-ca-file", "ca.pem"], "need --tls-cert-file and --tls-key-file"),
        (["--tls-client-cert", "optional"], "need --tls-cert-file and --tls-key-file"),
    ],
)
def test_incomplete_options_are_refused_with_exit_2(capsys, command, argv, message):
    code, err = run(capsys, command, *argv)
    assert code == 2 and message in err and err.endswith("[tls_incomplete]\n"), err


def test_a_client_cert_policy_needs_a_client_ca(capsys, tls):
    code, err = run(capsys, "serve", "--tls-cert-file", str(tls.server_cert), "--tls-key-file",
                    str(tls.server_key), "--tls-client-cert", "optional")  # fmt: skip
    assert code == 2 and "needs --tls-client-ca-file" in err, err


def test_options_come_from_the_environment_too(capsys, monkeypatch, tls):
    monkeypatch.setenv("GATEWAY_TLS_CERT_FILE", str(tls.server_cert))
    monkeypatch.setenv("GATEWAY_TLS_KEY_FILE", str(tls.client_key))
    code, err = run(capsys, "serve")
    assert code == 2 and err.endswith("[tls_key_mismatch]\n"), err
    monkeypatch.setenv("GATEWAY_TLS_KEY_FILE", str(tls.server_key))
    monkeypatch.setenv("GATEWAY_TLS_CLIENT_CA_FILE", str(tls.ca))
    monkeypatch.setenv("GATEWAY_TLS_CLIENT_CERT", "sometimes")
    code, err = run(capsys, "up")
    assert code == 2 and err.endswith("[tls_client_cert_invalid]\n"), err


def _bad_files(tls: Material, tmp: Path) -> list[tuple[str, list[str], int]]:
    """(code, [cert, key, client CA], the index of the file the message names)."""
    encrypted = tmp / "encrypted.key"
    subprocess.run(["openssl", "pkey", "-in", str(tls.server_key), "-aes256", "-passout",
                    "pass:x", "-out", str(encrypted)], check=True)  # fmt: skip
    text = tmp / "notes.txt"
    text.write_text("not PEM\n")
    cert, key = str(tls.server_cert), str(tls.server_key)
    return [
        ("tls_file_unreadable", [str(tmp / "missing.pem"), key], 0),
        ("tls_file_unreadable", [cert, str(tmp)], 1),  # a directory
        ("tls_cert_invalid", [key, key], 0),
        ("tls_cert_invalid", [str(text), key], 0),
        ("tls_key_invalid", [cert, cert], 1),
        ("tls_key_invalid", [cert, str(text)], 1),
        ("tls_key_mismatch", [cert, str(tls.client_key)], 1),
        ("tls_key_encrypted", [cert, str(encrypted)], 1),
        ("tls_client_ca_invalid", [cert, key, str(text)], 2),
        ("tls_file_unreadable", [cert, key, str(tmp / "missing-ca.pem")], 2),
    ]


def test_each_bad_file_has_its_code_and_exit_2_naming_it(capsys, tls, tmp_path):
    for code_name, files, named in _bad_files(tls, tmp_path):
        argv = ["--tls-cert-file", files[0], "--tls-key-file", files[1]]
        if len(files) == 3:
            argv += ["--tls-client-ca-file", files[2]]
        for command in ("serve", "up"):
            code, err = run(capsys, command, *argv)
            assert code == 2 and err.endswith(f"[{code_name}]\n"), (files, err)
            assert err.count("\n") == 1 and files[named] in err, err


def test_good_files_go_on_to_kafka(capsys, tls):
    argv = ["--tls-cert-file", str(tls.server_cert), "--tls-key-file", str(tls.server_key),
            "--tls-client-ca-file", str(tls.ca)]  # fmt: skip
    code, err = run(capsys, "serve", *argv)
    assert code == 3 and "no Kafka broker answered" in err, err


def test_the_server_context_wants_tls_1_2_and_the_client_cert_as_asked(tls):
    plain = server_context(TlsFiles(tls.server_cert, tls.server_key))
    assert plain.minimum_version == ssl.TLSVersion.TLSv1_2
    assert plain.verify_mode == ssl.CERT_NONE
    required = server_context(TlsFiles(tls.server_cert, tls.server_key, tls.ca))
    assert required.verify_mode == ssl.CERT_REQUIRED
    optional = server_context(TlsFiles(tls.server_cert, tls.server_key, tls.ca, "optional"))
    assert optional.verify_mode == ssl.CERT_OPTIONAL
    with pytest.raises(TlsError) as caught:
        server_context(TlsFiles(tls.server_cert, tls.client_key))
    assert caught.value.code == "tls_key_mismatch" and str(tls.client_key) in str(caught.value)


# Over a real handshake: uvicorn with serve's context.


async def _echo(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """An answer to whoever the handshake let in."""
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": orjson.dumps({"served": True})})


def _serving(files: TlsFiles) -> Iterator[str]:
    context, port = server_context(files), free_port_block()
    config = uvicorn.Config(
        _echo, host="127.0.0.1", port=port, loop="uvloop", http="httptools",
        ssl_context_factory=lambda _config, _default: context, lifespan="off",
        log_level="critical", log_config=None,
    )  # fmt: skip
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive()
        time.sleep(0.02)
    try:
        yield f"https://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def mutual(tls: Material) -> Iterator[str]:
    yield from _serving(TlsFiles(tls.server_cert, tls.server_key, tls.ca))


@pytest.fixture(scope="module")
def mutual_optional(tls: Material) -> Iterator[str]:
    yield from _serving(TlsFiles(tls.server_cert, tls.server_key, tls.ca, "optional"))


def test_a_verified_client_certificate_is_served_over_tls_1_3_and_1_2(mutual, tls):
    assert httpx.get(mutual, verify=tls.client_context(), timeout=10).json() == {"served": True}
    tls12 = tls.client_context(maximum=ssl.TLSVersion.TLSv1_2)
    assert httpx.get(mutual, verify=tls12, timeout=10).json() == {"served": True}


def test_no_client_certificate_or_a_stranger_s_is_refused(mutual, tls):
    refusal(mutual, tls.client_context(cert=False))
    stranger = ssl.create_default_context(cafile=tls.ca)
    stranger.load_cert_chain(tls.stranger_cert, tls.stranger_key)
    refusal(mutual, stranger)


def test_optional_client_certificates_serve_a_client_without_one(mutual_optional, tls):
    without = httpx.get(mutual_optional, verify=tls.client_context(cert=False), timeout=10)
    assert without.json() == {"served": True}
    with_one = httpx.get(mutual_optional, verify=tls.client_context(), timeout=10)
    assert with_one.json() == {"served": True}
    stranger = ssl.create_default_context(cafile=tls.ca)
    stranger.load_cert_chain(tls.stranger_cert, tls.stranger_key)
    refusal(mutual_optional, stranger)


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1:DeprecationWarning")
@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1, ssl.TLSVersion.TLSv1_1])
def test_tls_before_1_2_is_refused_by_the_server(mutual, tls, version):
    old = tls.client_context(maximum=version)
    # The client does speak it: a server that allows it agrees on it.
    lenient = server_context(TlsFiles(tls.server_cert, tls.server_key))
    lenient.minimum_version = ssl.TLSVersion.TLSv1
    lenient.set_ciphers("DEFAULT:@SECLEVEL=0")
    assert _agreed(lenient, old) == {ssl.TLSVersion.TLSv1: "TLSv1"}.get(version, "TLSv1.1")
    refusal(mutual, old)


def _agreed(server: ssl.SSLContext, client: ssl.SSLContext) -> str | None:
    """The TLS version a handshake between the two agrees on."""
    ours, theirs = socket.socketpair()
    with ours, theirs:
        accepting = threading.Thread(
            target=lambda: server.wrap_socket(theirs, server_side=True), daemon=True
        )
        accepting.start()
        with client.wrap_socket(ours, server_hostname="127.0.0.1") as conn:
            version = conn.version()
        accepting.join(timeout=10)
    return version
