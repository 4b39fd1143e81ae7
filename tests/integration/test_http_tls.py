"""`gateway serve` and `gateway up` over HTTPS, against a real broker and processor: TLS
1.2 and later only, mutual TLS refusing a client without a certificate of the client CA,
and every route (enqueue, fetch and ack, a server-sent event stream, health) answering
over TLS with its serve workers."""

from __future__ import annotations

import os
import signal
import ssl
import subprocess
import time
import uuid
from pathlib import Path

import httpx
import orjson
import pytest

from tests.integration.harness import Processor, apply_topics
from tests.integration.running import Up
from tests.integration.test_serve_workers import start_serve
from tests.support import free_port_block
from tests.tls_material import make, refusal

pytestmark = pytest.mark.kafka


def _wait_ready(url: str, verify: ssl.SSLContext, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()[-3000:]
        try:
            if httpx.get(url, verify=verify, timeout=10).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.3)
    raise AssertionError(f"not ready over TLS:\n{log.read_text()[-3000:]}")


def _work(http: httpx.Client) -> None:
    """Enqueue, read, stream, fetch and ack, each answered over TLS."""
    queue = f"q{uuid.uuid4().hex[:12]}"
    job = {"type": "tls.job", "args": [uuid.uuid4().hex], "queue": queue}
    with http.stream("GET", "/ojs/v1/events", params={"queues": queue},
                     headers={"Accept": "text/event-stream"}) as stream:  # fmt: skip
        assert stream.status_code == 200
        created = http.post("/ojs/v1/jobs", json=job)
        assert created.status_code == 201, created.text
        job_id = created.json()["job"]["id"]
        for line in stream.iter_lines():
            if line.startswith("data:") and orjson.loads(line[5:])["subject"] == job_id:
                break
    assert http.get(f"/ojs/v1/jobs/{job_id}").json()["job"]["state"] in ("available", "scheduled")
    fetched: list[dict[str, object]] = []
    deadline = time.monotonic() + 60
    while not fetched:
        assert time.monotonic() < deadline, "nothing to fetch"
        answer = http.post("/ojs/v1/workers/fetch", json={"queues": [queue], "count": 1})
        assert answer.status_code == 200, answer.text
        fetched = answer.json()["jobs"]
    assert fetched[0]["id"] == job_id
    acked = http.post("/ojs/v1/workers/ack", json={"job_id": job_id})
    assert acked.status_code == 200 and acked.json()["job"]["state"] == "completed", acked.text


def test_serve_workers_answer_over_mutual_tls_and_refuse_what_they_should(
    kafka_bootstrap: str, tmp_path: Path
):
    tls = make(tmp_path / "tls")
    namespace = f"t{uuid.uuid4().hex[:10]}"
    apply_topics(kafka_bootstrap, namespace)
    proc = Processor(kafka_bootstrap, namespace, tmp_path, "1").start()
    port = free_port_block()
    base, log = f"https://127.0.0.1:{port}", tmp_path / "serve.log"
    env = {
        **os.environ, "GATEWAY_TLS_CERT_FILE": str(tls.server_cert),
        "GATEWAY_TLS_KEY_FILE": str(tls.server_key),
    }  # fmt: skip
    serve = start_serve(kafka_bootstrap, namespace, port, tmp_path, "--workers", "2",
                        "--tls-client-ca-file", str(tls.ca), env=env)  # fmt: skip
    try:
        client = tls.client_context()
        _wait_ready(f"{base}/ojs/v1/health", client, serve, log)
        assert httpx.get(f"{base}/ojs/v1/health/live", verify=client).status_code == 200
        with httpx.Client(base_url=base, verify=client, timeout=60) as http:
            _work(http)
        # Several connections: each worker handshakes with its own copy of the context.
        for _ in range(6):
            assert httpx.get(f"{base}/ojs/manifest", verify=client).status_code == 200

        refusal(base, tls.client_context(cert=False))
        stranger = ssl.create_default_context(cafile=tls.ca)
        stranger.load_cert_chain(tls.stranger_cert, tls.stranger_key)
        refusal(base, stranger)
        for old in (ssl.TLSVersion.TLSv1, ssl.TLSVersion.TLSv1_1):
            refusal(base, tls.client_context(maximum=old))
        with pytest.raises(httpx.TransportError):
            httpx.get(f"http://127.0.0.1:{port}/ojs/v1/health/live", timeout=10)
        assert serve.poll() is None
    finally:
        os.killpg(serve.pid, signal.SIGTERM)
        serve.wait(timeout=60)
        proc.stop()
    assert "Traceback" not in log.read_text(), log.read_text()[-3000:]


def test_up_passes_tls_on_to_its_http_binding(kafka_bootstrap: str, tmp_path: Path):
    tls = make(tmp_path / "tls")
    port = free_port_block()
    up = Up(
        tmp_path / "up", "--bootstrap", kafka_bootstrap, "--namespace",
        f"t{uuid.uuid4().hex[:10]}", "--http-port", str(port), "--http-workers", "1",
        "--tls-cert-file", str(tls.server_cert), "--tls-key-file", str(tls.server_key),
        "--tls-client-ca-file", str(tls.ca), "--tls-client-cert", "optional",
    )  # fmt: skip
    base = f"https://127.0.0.1:{port}"
    try:
        # Optional: a client without a certificate (a health probe) is served.
        _wait_ready(f"{base}/ojs/v1/health", tls.client_context(cert=False), up.proc, up.err)
        assert f"http: {base}/ojs/v1/jobs" in up.stdout()
        with httpx.Client(base_url=base, verify=tls.client_context(), timeout=60) as http:
            _work(http)
        stranger = ssl.create_default_context(cafile=tls.ca)
        stranger.load_cert_chain(tls.stranger_cert, tls.stranger_key)
        refusal(base, stranger)
    finally:
        up.interrupt()
