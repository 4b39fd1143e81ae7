"""What the end-to-end benchmarks share: a broker, the topics, a running processor."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from gateway import admin, catalogue
from gateway.broker import launcher
from gateway.catalogue import Catalogue

DUPLICATE_SHARE = 0.3


@dataclass(frozen=True)
class Environment:
    bootstrap: str
    namespace: str
    catalogue: Catalogue
    workdir: Path


@contextmanager
def environment(bootstrap: str | None) -> Iterator[Environment]:
    """A broker (the given one, else a local one of its own), topics in a fresh namespace."""
    workdir = Path(tempfile.mkdtemp(prefix="gateway-bench-"))
    cluster = None
    try:
        if not bootstrap:
            cluster = launcher.up(port=free_port(), directory=workdir / "cluster").cluster
            bootstrap = cluster.bootstrap
        namespace = f"bench{uuid.uuid4().hex[:6]}"
        cat = catalogue.load(namespace=namespace)
        admin.apply(cat, {"bootstrap.servers": bootstrap})
        yield Environment(bootstrap, namespace, cat, workdir)
    finally:
        if cluster is not None:
            launcher.down(cluster, purge=True)
        shutil.rmtree(workdir, ignore_errors=True)


def start_processor(env: Environment) -> subprocess.Popen[bytes]:
    """`gateway process` in a subprocess, returned once it processes messages."""
    log_path = env.workdir / "processor.log"
    log = open(log_path, "wb")  # noqa: SIM115 - lives as long as the process
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", "process", "--bootstrap", env.bootstrap,
         "--namespace", env.namespace, "--state-dir", str(env.workdir / "state")],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    deadline = time.monotonic() + 90
    while b"processing incoming messages" not in log_path.read_bytes():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(log_path.read_text()[-3000:])
        time.sleep(0.2)
    return proc


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    proc.wait(timeout=60)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
