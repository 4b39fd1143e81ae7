"""The figures beside the rates: restore, state size, cold start, fingerprints.

- restore: a processor decides K new keys, stops; its local state is deleted
  and it starts again; time from start until sampled duplicates of those keys
  are decided (all must be duplicates), and the restored stores are counted:
  they must hold exactly the K fingerprints.
- state bytes per key: the restored state directory's size on disk over K.
- cold start: `gateway up` in a fresh gateway home (the jar cache shared),
  time from health answering 200 to the answer of a first POST.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway import admin, catalogue
from gateway.bench import procfs, web
from gateway.bench.services import Processes, free_port
from gateway.bench.streams import BenchError, Broker, Gateway, Options, _Io
from gateway.bench.workload import generate
from gateway.broker import launcher
from gateway.broker.ports import free_port_block

PROBES = 1000
_FINGERPRINT = re.compile(rb"[0-9a-f]{64}")


@dataclass
class Restore:
    keys: int
    fill_seconds: float
    restart_to_decision_s: float
    keys_restored: int
    state_bytes: int

    @property
    def bytes_per_key(self) -> float:
        return self.state_bytes / self.keys


def restore(keys: int, broker: Broker, processes: Processes, opts: Options) -> Restore:
    namespace = f"r{uuid.uuid4().hex[:8]}"
    workdir = opts.workdir / f"restore-{namespace}"
    workdir.mkdir(parents=True)
    cat = catalogue.load(namespace=namespace)
    admin.apply(cat, {"bootstrap.servers": broker.bootstrap})
    workload = generate(keys, 0.0, seed=11, tag="restore-")
    io = _Io(broker.bootstrap, cat)
    proc = Gateway().start(processes, broker, cat, workdir, opts)
    started = time.monotonic()
    try:
        io.send(workload.items)
        io.await_decisions(keys, proc, workdir, timeout=max(600.0, keys / 100))
    finally:
        processes.stop(proc)
    fill_seconds = time.monotonic() - started
    shutil.rmtree(workdir / "state")

    probes = random.Random(3).sample(list(workload.items), min(PROBES, keys))
    proc = Gateway().start(processes, broker, cat, workdir, opts)
    started = time.monotonic()
    try:
        io.send(probes)
        values = io.await_decisions(len(probes), proc, workdir)
        restart = time.monotonic() - started
    finally:
        processes.stop(proc)
        io.close()
    gateway = Gateway()
    outcomes = {gateway.outcome(v) for v in values}
    if not outcomes <= {"rejected", "ignored"}:
        raise BenchError(f"after the restore, known keys were decided {sorted(outcomes)}")
    restored = count_fingerprints(workdir / "state")
    if restored != keys:
        raise BenchError(f"the restored state holds {restored} fingerprints, not {keys}")
    return Restore(keys, fill_seconds, restart, restored, procfs.directory_bytes(workdir / "state"))


def count_fingerprints(state_dir: Path) -> int:
    """Distinct fingerprints among the keys of every RocksDB store under `state_dir`."""
    from rocksdict import AccessType, Options, Rdict

    found: set[bytes] = set()
    for current in state_dir.rglob("CURRENT"):
        db = Rdict(str(current.parent), Options(raw_mode=True), access_type=AccessType.read_only())
        try:
            for name in Rdict.list_cf(str(current.parent)):
                for key in db.get_column_family(name).keys():  # noqa: SIM118 - keys only
                    if isinstance(key, bytes):
                        found.update(_FINGERPRINT.findall(key))
        finally:
            db.close()
    return len(found)


@dataclass
class ColdStart:
    health_s: float  # from `gateway up` to health 200
    first_decision_s: float  # from health 200 to the first answer


def cold_start(processes: Processes, workdir: Path) -> ColdStart:
    """`gateway up` from nothing (its own home: broker, topics, state), then one POST."""
    home = workdir / f"home-{uuid.uuid4().hex[:6]}"
    home.mkdir()
    jars = launcher.gateway_home() / "kafka"
    if jars.exists():
        (home / "kafka").symlink_to(jars)
    http_port = free_port()
    log = workdir / f"{home.name}.log"
    env = {**os.environ, "GATEWAY_HOME": str(home)}
    env.pop("KAFKA_BOOTSTRAP", None)
    proc = processes.start(
        [sys.executable, "-m", "gateway", "up", "--port", str(free_port_block()),
         "--http-port", str(http_port), "--log-level", "WARNING"],
        log, env=env,
    )  # fmt: skip
    url = f"http://127.0.0.1:{http_port}"
    try:
        health = web.wait_healthy(url, [proc], workdir, timeout=180)
        healthy = time.monotonic()
        status = web.post(url, b'{"type":"bench.cold","args":[1]}', timeout=120)
        first = time.monotonic() - healthy
        if status != 201:
            raise BenchError(f"the first POST after a cold start answered {status}")
        return ColdStart(health, first)
    finally:
        _stop_up(proc, processes, home)


def _stop_up(proc: Any, processes: Processes, home: Path) -> None:
    # `gateway up` stops its processor, HTTP and broker on SIGINT, as on Ctrl-C.
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=90)
    processes.stop(proc)
    cluster = launcher.load_cluster(home / "cluster")
    if cluster is not None:
        launcher.down(cluster, purge=True)
