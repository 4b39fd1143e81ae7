"""Serve workers: N `gateway serve` processes answering on one listening socket.

One event loop uses one core, so `gateway serve --workers N` binds the port
once (a taken port fails here, before any worker starts) and starts N worker
processes that inherit the socket; the kernel hands each new connection to one
of them. Each worker is a whole binding with its own producer, reply consumer
and job view: nothing is shared between them but the socket and a board of
one byte per worker saying whether its view is live, written by that worker
alone, so health answers for every worker wherever it is asked. A worker that
dies is started again (health is not ready meanwhile), and accepts no connection
until its view is live, so the live ones take them all; SIGTERM or Ctrl-C stops
them all, each finishing the requests it holds (GRACEFUL_SHUTDOWN_S). With TLS,
the socket stays a plain one: each worker reads the TLS files itself and handshakes
on the connections it accepts (gateway/http/tls.py).
"""

from __future__ import annotations

import ctypes
import functools
import logging
import mmap
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence

from gateway.children import ignore_sigint, python_module

log = logging.getLogger("gateway.http")

# Requests still waiting for a decision get this long after SIGTERM or Ctrl-C.
GRACEFUL_SHUTDOWN_S = 3
RESTART_AFTER_S = 1.0  # a worker that died is started again after this
MAX_WORKERS = 64
POLL_S = 0.2
_PR_SET_PDEATHSIG = 1


def bind(host: str, port: int) -> socket.socket:
    """The listening socket every worker accepts on."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


class Board:
    """One byte per worker, 1 once its job view is live, in memory the workers share (a
    memfd passed down by number). Each worker writes only its own byte, and the supervisor
    clears the byte of one that died (else health would count it live until it restarts)."""

    def __init__(self, fd: int, workers: int, index: int | None = None) -> None:
        self.fd, self.workers, self.index = fd, workers, index
        self._map = mmap.mmap(fd, workers)

    @staticmethod
    def create(workers: int) -> Board:
        fd = os.memfd_create("gateway-serve-board", 0)
        os.ftruncate(fd, workers)
        os.set_inheritable(fd, True)
        return Board(fd, workers)

    def mark(self, live: bool) -> None:
        assert self.index is not None, "only a worker marks its own byte"
        self._map[self.index] = 1 if live else 0

    def clear(self, index: int) -> None:
        """The supervisor's: worker `index` has exited."""
        assert self.index is None, "a worker clears no other's byte"
        self._map[index] = 0

    def others_live(self) -> bool:
        """Whether another worker's view is live: this one was started again beside it."""
        return any(self._map[i] == 1 for i in range(self.workers) if i != self.index)

    def not_live(self) -> str | None:
        """None when every worker's view is live, else which are not."""
        waiting = [str(i + 1) for i in range(self.workers) if self._map[i] != 1]
        if not waiting:
            return None
        return f"serve worker {', '.join(waiting)} of {self.workers}: its job view is not live yet"


def supervise(command: Sequence[str], workers: int, sock: socket.socket, board: Board) -> int:
    """Run `command` (`gateway serve`, each worker's socket and board byte appended)
    `workers` times until SIGTERM or SIGINT; start again any that exits meanwhile. A
    SIGHUP is passed on to each. Returns 0 once all stopped."""
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)

    def start(index: int) -> subprocess.Popen[bytes]:
        argv = [*command, "--worker-socket", str(sock.fileno()), "--worker-board",
                f"{board.fd}:{index}"]  # fmt: skip
        return subprocess.Popen(argv, pass_fds=(sock.fileno(), board.fd),
                                preexec_fn=functools.partial(_prepare, os.getpid()))  # fmt: skip

    procs = [start(i) for i in range(workers)]

    def reread(*_: object) -> None:
        """SIGHUP: each worker reads its credentials file again (http/app.py)."""
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGHUP)

    signal.signal(signal.SIGHUP, reread)
    restart_at: dict[int, float] = {}
    while not stopping:
        time.sleep(POLL_S)
        for index, proc in enumerate(procs):
            if stopping or proc.poll() is None:
                continue
            if index not in restart_at:
                board.clear(index)
                log.warning("serve worker %d of %d exited with code %d; starting it again",
                            index + 1, workers, proc.returncode)  # fmt: skip
                restart_at[index] = time.monotonic() + RESTART_AFTER_S
            elif time.monotonic() >= restart_at[index]:
                del restart_at[index]
                procs[index] = start(index)
    _stop(procs)
    return 0


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + GRACEFUL_SHUTDOWN_S + 1.0
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _prepare(supervisor: int) -> None:
    """In the forked worker, before exec. Ctrl-C is ignored until uvicorn takes it (then
    it stops as this supervisor's SIGTERM would: one signal of each is no forced exit),
    so a worker still importing ends on the SIGTERM, without a traceback. And SIGTERM
    comes when this supervisor dies, however it dies, so no worker is left holding the
    port (Linux's PR_SET_PDEATHSIG); a supervisor already gone by then sends none, so the
    worker ends here."""
    ignore_sigint()
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != supervisor:
        os._exit(1)


def worker_command() -> list[str]:
    """This `gateway serve` command, as a worker's: the same arguments."""
    return python_module("gateway", *sys.argv[1:])
