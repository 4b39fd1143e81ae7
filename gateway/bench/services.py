"""Everything the bench starts: each process is recorded and stopped by its pid.

Redis, PostgreSQL and wrk come from Debian's packages. A missing one is
installed with apt-get only when the user opted in (`--install-missing`, as
root); otherwise the system that needs it is skipped or the run refused (see
gateway.cli.bench). Redis and PostgreSQL run as private instances on free
loopback ports with throwaway data directories.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

START_TIMEOUT_S = 90.0


class ServiceError(Exception):
    """A service could not be installed or started; the message says why."""


class Processes:
    """The processes the bench started, stopped by pid (TERM, then KILL) in reverse order."""

    def __init__(self) -> None:
        self._running: list[subprocess.Popen[bytes]] = []
        self._cleanups: list[Callable[[], None]] = []

    def start(
        self,
        command: Sequence[str],
        log: Path,
        env: dict[str, str] | None = None,
        user: str | None = None,
    ) -> subprocess.Popen[bytes]:
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                list(command), stdout=out, stderr=subprocess.STDOUT, env=env,
                stdin=subprocess.DEVNULL, user=user, group=user,
            )  # fmt: skip
        self._running.append(proc)
        return proc

    def on_exit(self, cleanup: Callable[[], None]) -> None:
        """Run `cleanup` after every process is stopped."""
        self._cleanups.append(cleanup)

    def stop(self, proc: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        if proc in self._running:
            self._running.remove(proc)

    def stop_all(self) -> None:
        for proc in reversed(list(self._running)):
            self.stop(proc)
        for cleanup in reversed(self._cleanups):
            cleanup()
        self._cleanups.clear()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Service:
    port: int
    pid: int
    version: str


def wait_for_port(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        if proc.poll() is not None or time.monotonic() > deadline:
            raise ServiceError(f"{log.stem} did not start; log {log}:\n{_tail(log)}")
        time.sleep(0.1)


@dataclass(frozen=True)
class Tool:
    """A program a system needs and the Debian package that has it."""

    binary: str
    package: str
    search: str | None = None  # a glob tried before $PATH (PostgreSQL's versioned bin dir)

    def find(self) -> str | None:
        if self.search:
            matches = sorted(glob.glob(self.search))
            if matches:
                return matches[-1]
        return shutil.which(self.binary)

    def path(self) -> str:
        if found := self.find():
            return found
        raise ServiceError(
            f"{self.binary} is missing: install the Debian package {self.package} "
            "(or run the bench with --install-missing)"
        )


# What each system needs beside Python and Kafka.
TOOLS = {
    "redis": Tool("redis-server", "redis-server"),
    "postgres": Tool("postgres", "postgresql", search="/usr/lib/postgresql/*/bin/postgres"),
    "http": Tool("wrk", "wrk"),
}


def missing_tools(systems: Sequence[str]) -> dict[str, Tool]:
    """The systems among `systems` whose tool is not installed, with that tool."""
    return {s: TOOLS[s] for s in systems if s in TOOLS and TOOLS[s].find() is None}


def install(packages: Sequence[str]) -> None:
    """apt-get update, then install the packages; only ever on the user's explicit opt-in."""
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise ServiceError(
            f"installing {', '.join(packages)} needs apt-get and root; install them yourself"
        )
    for command in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *packages]):
        done = subprocess.run(
            command, capture_output=True, text=True,
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
        )  # fmt: skip
        if done.returncode != 0:
            raise ServiceError(f"{' '.join(command)} failed:\n{done.stderr[-2000:]}")


def start_redis(processes: Processes, workdir: Path) -> Service:
    server = TOOLS["redis"].path()
    port, data = free_port(), workdir / "redis"
    data.mkdir()
    log = workdir / "redis.log"
    proc = processes.start(
        [server, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data),
         "--save", "", "--appendonly", "no", "--daemonize", "no"],
        log,
    )  # fmt: skip
    wait_for_port(port, proc, log)
    return Service(port, proc.pid, _version(server))


def start_postgres(processes: Processes, workdir: Path) -> Service:
    """A throwaway cluster, run as the `postgres` user when we are root (it refuses root)."""
    postgres = TOOLS["postgres"].path()
    bin_dir = Path(postgres).parent
    # Its own directory in /tmp: the bench's work directory is private to root.
    data = Path(tempfile.mkdtemp(prefix="gateway-bench-pg-"))
    processes.on_exit(lambda: shutil.rmtree(data, ignore_errors=True))
    user = "postgres" if os.geteuid() == 0 else None
    if user:
        shutil.chown(data, user, user)
    log = workdir / "postgres.log"
    init = subprocess.run(
        [str(bin_dir / "initdb"), "-D", str(data / "db"), "-A", "trust", "-U", "bench",
         "--no-sync"],
        capture_output=True, text=True, user=user, group=user, cwd=data,
    )  # fmt: skip
    if init.returncode != 0:
        raise ServiceError(f"initdb failed:\n{init.stdout[-1000:]}{init.stderr[-2000:]}")
    port = free_port()
    proc = processes.start(
        [postgres, "-D", str(data / "db"), "-p", str(port), "-h", "127.0.0.1", "-k", str(data)],
        log, user=user,
    )  # fmt: skip
    wait_for_port(port, proc, log)
    return Service(port, proc.pid, _version(postgres))


def _version(binary: str) -> str:
    done = subprocess.run([binary, "--version"], capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
