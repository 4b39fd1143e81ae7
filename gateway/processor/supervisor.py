"""Keep the processor runtimes alive: restart each after a failure, stop them on request.

The runtime fails on purpose when Kafka errors leave it unsure of its state (a
broker restart mid-rebalance, say); exactly-once makes a restart safe, since
the new runtime fences the old transactional id and resumes from the last
commit. Each runtime runs in a child process so that even a hung shutdown
cannot take the supervisor with it, and so that several use several cores:
the runtime decides in one Python thread.

With N runtimes they join one consumer group as N members, each under an
instance id of its own derived from the given one (`children`): its
transactional id, static membership and state directory, the same across
restarts. Each is restarted on its own, with its own backoff; one that
refuses the deployment (EXIT_CONFIG) stops them all, since the others share
its topics and would refuse it too.

Stopping takes one signal, SIGINT or SIGTERM, to the supervisor. The child
ignores SIGINT from its first instruction on: the terminal's Ctrl-C reaches
the whole process group, and the runtime should stop on the supervisor's
SIGTERM alone, not on two signals racing each other (see shutdown.py), nor
print a KeyboardInterrupt while it is still starting.

With a credentials file, a SIGHUP to the supervisor is passed on to each runtime:
each reads the file again (as the supervisor does for its own status port), so a
revoked key is refused at once on every port. Without one, SIGHUP is not handled.
"""

from __future__ import annotations

import dataclasses
import logging
import pickle
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from gateway import logs
from gateway.auth.credentials import CredentialsError
from gateway.children import Stop, ignore_sigint, python_module
from gateway.processor.app import ProcessorSettings
from gateway.processor.shutdown import EXIT_CONFIG, GRACE_S
from gateway.processor.status_access import Guard, guard_of

log = logging.getLogger("gateway.processor")

# A runtime's first restart is at once: its partitions wait only for the new start.
# One that fails again waits BACKOFF_START_S, then twice as long each time, up to
# BACKOFF_MAX_S, so a runtime that cannot start does not spin.
BACKOFF_START_S = 1.0
BACKOFF_MAX_S = 30.0
HEALTHY_AFTER_S = 60.0  # a runtime up this long restarts at once again
# The runtime ends itself GRACE_S after a stop; past this, it is killed.
KILL_AFTER_S = GRACE_S + 2.0


def default_processes(partitions: int, cores: int | None) -> int:
    """One runtime per core, but no more than partitions: a runtime beyond that owns none."""
    return max(1, min(cores or 1, partitions))


def children(settings: ProcessorSettings, count: int) -> list[ProcessorSettings]:
    """The settings of each of `count` runtimes.

    One runtime is the instance itself. Of several, runtime n (1..count) is
    instance `<id>-<n>`, with state under `<state-dir>/<id>-<n>` (the default
    state directory follows the instance id by itself) and, with a metrics
    port P, its status on P+n: P is the supervisor's (status.py).
    """
    if count == 1:
        return [settings]
    return [
        dataclasses.replace(
            settings,
            instance_id=f"{settings.instance_id}-{n}",
            state_dir=(
                settings.state_dir / f"{settings.instance_id}-{n}" if settings.state_dir else None
            ),
            metrics_port=settings.metrics_port + n if settings.metrics_port is not None else None,
        )
        for n in range(1, count + 1)
    ]


@dataclasses.dataclass
class _Child:
    settings: ProcessorSettings
    proc: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    resume_at: float = 0.0  # when a runtime waiting out its backoff starts again
    backoff: float = 0.0  # the wait before its next restart


def supervise(
    settings: ProcessorSettings,
    log_level: str = "INFO",
    on_stop: Callable[[], None] | None = None,
    processes: int = 1,
    on_reread: Callable[[], None] | None = None,
    stop: Stop | None = None,
) -> int:
    """Run `processes` runtimes until SIGINT or SIGTERM; return within KILL_AFTER_S of the
    signal. Return 0 then, or EXIT_CONFIG at once when a runtime refuses this deployment.

    `on_stop` runs once, as the stop begins (outside the signal handler); `on_reread` after
    each SIGHUP, when there is a credentials file. `stop` is the caller's, installed before
    it started anything of its own; without one, supervise installs its own.
    """
    stop = stop or Stop().install()
    flags = {"reread": False}

    def on_sighup(_signum: int, _frame: Any) -> None:
        flags["reread"] = True  # nothing that takes a lock: see shutdown.py

    if settings.credentials is not None:
        signal.signal(signal.SIGHUP, on_sighup)

    slots = [_Child(s) for s in children(settings, processes)]
    server, guard = None, None
    if processes > 1 and settings.metrics_port is not None:
        from gateway.processor import status

        try:
            guard = guard_of(settings.credentials)
        except CredentialsError as exc:
            log.error(f"the processor cannot start: {exc}")
            return EXIT_CONFIG
        ports = [(c.settings.instance_id, c.settings.metrics_port or 0) for c in slots]
        server = status.serve(settings.metrics_port, ports, guard)
    code = 0
    try:
        while not stop.requested and not code:
            if flags["reread"]:
                flags["reread"] = False
                _reread([c.proc for c in slots if c.proc is not None], guard, on_reread)
            for child in slots:
                if child.proc is None:
                    # Not one more once a stop came (it may come between two starts).
                    if time.monotonic() >= child.resume_at and not stop.requested:
                        child.started = time.monotonic()
                        child.proc = _start(child.settings, log_level)
                elif child.proc.poll() is not None:
                    code = _exited(child)
                    if code:
                        break
            time.sleep(0.1)
    finally:  # a failure here too stops the runtimes already started: none is left behind
        if on_stop is not None:
            on_stop()
        _stop([c.proc for c in slots if c.proc is not None])
        if server is not None:
            server.shutdown()
    return code


def _exited(child: _Child) -> int:
    """Schedule the restart of a runtime that exited; EXIT_CONFIG if it must not be."""
    assert child.proc is not None
    instance = child.settings.instance_id
    if child.proc.returncode == EXIT_CONFIG:
        log.error(
            "the processor cannot start with this deployment; not restarting it",
            extra={"instance_id": instance},
        )
        return EXIT_CONFIG
    if time.monotonic() - child.started > HEALTHY_AFTER_S:
        child.backoff = 0.0
    log.warning(
        "processor runtime exited; restarting",
        extra={"instance_id": instance, "exit_code": child.proc.returncode,
               "restart_in_s": child.backoff},
    )  # fmt: skip
    child.proc = None
    child.resume_at = time.monotonic() + child.backoff
    child.backoff = min(max(child.backoff * 2, BACKOFF_START_S), BACKOFF_MAX_S)
    return 0


def _reread(
    procs: list[subprocess.Popen[bytes]], guard: Guard | None, on_reread: Callable[[], None] | None
) -> None:
    """SIGHUP: the credentials file read again here and by every runtime."""
    if guard is not None:
        guard.watcher.reread_soon()
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGHUP)
    if on_reread is not None:
        on_reread()


def _start(settings: ProcessorSettings, log_level: str) -> subprocess.Popen[bytes]:
    child = subprocess.Popen(
        python_module("gateway.processor.supervisor"),
        stdin=subprocess.PIPE,
        preexec_fn=ignore_sigint if settings.credentials is None else _ignore_sighup_too,
    )
    assert child.stdin is not None
    with child.stdin:
        child.stdin.write(pickle.dumps((settings, log_level)))
    return child


def _ignore_sighup_too() -> None:
    """Before exec, with a credentials file: SIGINT ignored (children.py), and SIGHUP until
    the runtime handles it (app.py), so one passed on while it starts does not end it."""
    ignore_sigint()
    signal.signal(signal.SIGHUP, signal.SIG_IGN)


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM every runtime (each commits and closes); SIGKILL those still there later.

    They stop side by side, so N of them take no longer than one.
    """
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    deadline = time.monotonic() + KILL_AFTER_S
    for proc in procs:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            log.error(f"a processor runtime did not stop within {KILL_AFTER_S:.0f}s; killing it")
            proc.kill()
            proc.wait()


def _child_main() -> None:
    from gateway.processor import app

    settings, log_level = pickle.loads(sys.stdin.buffer.read())
    logs.configure(log_level)
    try:
        app.run(settings)
    except app.StartupRefused as exc:
        log.error(f"the processor cannot start: {exc}")
        sys.exit(EXIT_CONFIG)
    except Exception:
        log.exception("the processor runtime failed")
        sys.exit(1)


if __name__ == "__main__":
    _child_main()
