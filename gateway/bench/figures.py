"""The figures beside the rates: restore, state size, cold start, fingerprints.

- restore: a processor decides K new keys and stops; then, round by round, it
  starts again with its local state kept, and again with it deleted (so it
  restores it from the changelog); time from start to ready, and to the first
  decision on sampled known keys sent then (all must come back duplicates). A
  start with the state kept must not delete it; the restored stores are counted
  at the end: they must hold exactly the K fingerprints.
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
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.bench import procfs, report, web
from gateway.bench.services import Processes, free_port
from gateway.bench.streams import (
    BenchError,
    Broker,
    Gateway,
    Options,
    _Io,
    drop_namespace,
    fresh_namespace,
)
from gateway.bench.workload import Item, generate
from gateway.broker import launcher
from gateway.broker.ports import free_port_block
from gateway.catalogue import Catalogue
from gateway.children import python_module
from gateway.home import gateway_home

PROBES = 1000
# The processor's warning when it deletes its state (state_identity.py): a restart with the
# state kept must not.
_DELETED = b"local state was built from another cluster"
_FINGERPRINT = re.compile(rb"[0-9a-f]{64}")


@dataclass
class Restore:
    keys: int
    fill_seconds: float
    kept_s: list[float]  # start to first decision, local state kept, one per round
    restored_s: list[float]  # the same with the local state deleted: read from the changelog
    kept_ready_s: list[float]  # start to ready (every partition owned, none restoring)
    restored_ready_s: list[float]
    keys_restored: int
    state_bytes: int

    @property
    def bytes_per_key(self) -> float:
        return self.state_bytes / self.keys

    def figures(self) -> tuple[dict[str, dict[str, Any]], str]:
        """The figures for the results (median [min–max] over rounds), and the console's line."""
        spread = {
            name: report.spread(getattr(self, name))
            for name in ("kept_ready_s", "restored_ready_s", "kept_s", "restored_s")
        }
        text = {name: report._fmt(value, 1) for name, value in spread.items()}
        keys = f"{self.keys:,} keys"
        figures: dict[str, dict[str, Any]] = {
            f"restart to ready, {keys}, local state kept (s)": {
                "value": spread["kept_ready_s"], "text": text["kept_ready_s"],
            },
            f"restart to ready, {keys} restored from the changelog (s)": {
                "value": spread["restored_ready_s"], "text": text["restored_ready_s"],
            },
            f"restart to first decision, {keys}, local state kept (s)": {
                "value": spread["kept_s"], "text": text["kept_s"],
            },
            f"restart to first decision, {keys} restored from the changelog (s)": {
                "value": spread["restored_s"], "text": text["restored_s"],
                "keys_restored": self.keys_restored, "fill_seconds": self.fill_seconds,
            },
            "state on disk per key (bytes)": {
                "value": self.bytes_per_key, "text": f"{self.bytes_per_key:,.0f}",
                "state_bytes": self.state_bytes,
            },
        }  # fmt: skip
        line = (
            f"restore: {self.keys_restored:,} keys; ready {text['kept_ready_s']} s and first "
            f"decision {text['kept_s']} s after start with the local state, ready "
            f"{text['restored_ready_s']} s and first decision {text['restored_s']} s restoring "
            f"it from the changelog; {self.bytes_per_key:,.0f} B/key"
        )
        return figures, line


def restore(
    keys: int,
    rounds: int,
    broker: Broker,
    processes: Processes,
    opts: Options,
    show: Callable[[str], None] = lambda _: None,
) -> Restore:
    """Decide `keys` new keys, then restart the processor `rounds` times each way, alternating:
    with its local state kept, and with it deleted; `show` is told the progress."""
    namespace, workdir, cat = fresh_namespace("r", "restore", broker, opts.workdir)
    workload = generate(keys, 0.0, seed=11, tag="restore-")
    io = _Io(broker.bootstrap, cat)
    try:
        proc = Gateway().start(processes, broker, cat, workdir, opts)
        started = time.monotonic()
        try:
            io.send(workload.items)
            io.await_decisions(
                keys, proc, workdir, timeout=max(600.0, keys / 100),
                progress=_every(0.5, lambda n: show(f"restore: {n:,} of {keys:,} keys decided")),
            )  # fmt: skip
        finally:
            processes.stop(proc)
        fill_seconds = time.monotonic() - started
        probes = random.Random(3).sample(list(workload.items), min(PROBES, keys))
        kept: list[float] = []
        restored: list[float] = []
        kept_ready: list[float] = []
        restored_ready: list[float] = []
        for number in range(1, rounds + 1):
            for wipe, times, ready in ((False, kept, kept_ready), (True, restored, restored_ready)):
                if wipe:
                    shutil.rmtree(workdir / "state")
                what = "state deleted" if wipe else "state kept"
                label = f"restart {number}/{rounds}, {what}"
                log_from = _size(workdir / "gateway.log")
                took = _restart(io, probes, label, broker, processes, cat, workdir, opts,
                                namespace, show)  # fmt: skip
                ready.append(took[0])
                times.append(took[1])
                if not wipe and _DELETED in (workdir / "gateway.log").read_bytes()[log_from:]:
                    raise BenchError(f"{label}: the processor deleted its state")
    finally:
        io.close()
        drop_namespace(broker, namespace)
    restored_keys = count_fingerprints(workdir / "state")
    if restored_keys != keys:
        raise BenchError(f"the restored state holds {restored_keys} fingerprints, not {keys}")
    state_bytes = procfs.directory_bytes(workdir / "state")
    return Restore(
        keys, fill_seconds, kept, restored, kept_ready, restored_ready, restored_keys, state_bytes
    )


def _restart(
    io: _Io,
    probes: list[Item],
    label: str,
    broker: Broker,
    processes: Processes,
    cat: Catalogue,
    workdir: Path,
    opts: Options,
    namespace: str,
    show: Callable[[str], None],
) -> tuple[float, float]:
    """Seconds from starting the processor to ready, and to its first decision on the
    probes (sent once it is ready), known keys all, which must all come back duplicates."""
    changelogs = _changelog_records(broker.bootstrap, namespace)
    gateway = Gateway()
    proc = gateway.start(processes, broker, cat, workdir, opts)
    started = time.monotonic()
    first: list[float] = []

    def restoring(_: int) -> None:
        remaining = _restore_remaining(gateway.port)
        read = "" if remaining is None else f"{changelogs - remaining:,} of "
        show(f"{label}: {read}{changelogs:,} changelog records restored, "
             f"{time.monotonic() - started:.0f} s")  # fmt: skip

    shown = _every(0.5, restoring)

    def progress(decided: int) -> None:
        if decided and not first:
            first.append(time.monotonic() - started)
        shown(decided)

    try:
        gateway.wait_ready(proc, workdir)
        ready = time.monotonic() - started
        io.send(probes)
        values = io.await_decisions(len(probes), proc, workdir, progress=progress)
    finally:
        processes.stop(proc)
    outcomes = {gateway.outcome(v) for v in values}
    if not outcomes <= {"rejected", "ignored"}:
        raise BenchError(f"after the restart, known keys were decided {sorted(outcomes)}")
    return ready, first[0] if first else time.monotonic() - started


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def _every(seconds: float, call: Callable[[int], None]) -> Callable[[int], None]:
    """`call`, at most once per `seconds`."""
    last = [float("-inf")]

    def throttled(count: int) -> None:
        if time.monotonic() - last[0] >= seconds:
            last[0] = time.monotonic()
            call(count)

    return throttled


def _changelog_records(bootstrap: str, namespace: str) -> int:
    """Offsets in the namespace's changelog partitions: what a full restore reads."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-watermarks",
                         "log_level": 3})  # fmt: skip
    try:
        total = 0
        for name, topic in consumer.list_topics(timeout=30).topics.items():
            if name.startswith(f"changelog__{namespace}."):
                for p in topic.partitions:
                    low, high = consumer.get_watermark_offsets(TopicPartition(name, p), 30)
                    total += high - low
        return total
    finally:
        consumer.close()


def _restore_remaining(port: int) -> int | None:
    """The processor's gateway_restore_remaining, added up; None before it has a figure."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1) as response:
            text = response.read().decode()
    except (urllib.error.URLError, OSError):
        return None
    values = [
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("gateway_restore_remaining{")
    ]
    return int(sum(values)) if values else None


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
    jars = gateway_home() / "kafka"
    if jars.exists():
        (home / "kafka").symlink_to(jars)
    http_port = free_port()
    log = workdir / f"{home.name}.log"
    env = {**os.environ, "GATEWAY_HOME": str(home)}
    env.pop("KAFKA_BOOTSTRAP", None)
    proc = processes.start(
        [*python_module("gateway", "up"), "--port", str(free_port_block()),
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
