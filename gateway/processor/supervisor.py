"""Keep one processor runtime alive: restart it after a failure, stop it on request.

The runtime fails on purpose when Kafka errors leave it unsure of its state (a
broker restart mid-rebalance, say); exactly-once makes a restart safe, since
the new runtime fences the old transactional id and resumes from the last
commit. The runtime runs in a child process so that even a hung shutdown
cannot take the supervisor with it.

Stopping takes one signal, SIGINT or SIGTERM, to the supervisor. The child
ignores SIGINT from its first instruction on: the terminal's Ctrl-C reaches
the whole process group, and the runtime should stop on the supervisor's
SIGTERM alone, not on two signals racing each other (see shutdown.py), nor
print a KeyboardInterrupt while it is still starting.
"""

from __future__ import annotations

import logging
import pickle
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from gateway import logs
from gateway.processor.app import ProcessorSettings
from gateway.processor.shutdown import EXIT_CONFIG, GRACE_S

log = logging.getLogger("gateway.processor")

BACKOFF_START_S = 1.0
BACKOFF_MAX_S = 30.0
HEALTHY_AFTER_S = 60.0  # a runtime up this long resets the backoff
# The runtime ends itself GRACE_S after a stop; past this, it is killed.
KILL_AFTER_S = GRACE_S + 2.0


def supervise(
    settings: ProcessorSettings,
    log_level: str = "INFO",
    on_stop: Callable[[], None] | None = None,
) -> int:
    """Run the runtime until SIGINT or SIGTERM; return within KILL_AFTER_S of the signal.
    Return 0 then, or EXIT_CONFIG at once when the runtime refuses this deployment.

    `on_stop` runs once, as the stop begins (outside the signal handler).
    """
    flags = {"stop": False}

    def on_signal(_signum: int, _frame: Any) -> None:
        flags["stop"] = True  # nothing that takes a lock: see shutdown.py

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)

    child: subprocess.Popen[bytes] | None = None
    code = 0
    backoff = BACKOFF_START_S
    while not flags["stop"]:
        started = time.monotonic()
        child = _start(settings, log_level)
        while child.poll() is None and not flags["stop"]:
            time.sleep(0.1)
        if flags["stop"]:
            break
        if child.returncode == EXIT_CONFIG:
            log.error("the processor cannot start with this deployment; not restarting it")
            code = EXIT_CONFIG
            break
        if time.monotonic() - started > HEALTHY_AFTER_S:
            backoff = BACKOFF_START_S
        log.warning(
            "processor runtime exited; restarting",
            extra={"exit_code": child.returncode, "restart_in_s": backoff},
        )
        resume = time.monotonic() + backoff
        while time.monotonic() < resume and not flags["stop"]:
            time.sleep(0.1)
        backoff = min(backoff * 2, BACKOFF_MAX_S)
    if on_stop is not None:
        on_stop()
    if child is not None:
        _stop(child)
    return code


def _start(settings: ProcessorSettings, log_level: str) -> subprocess.Popen[bytes]:
    child = subprocess.Popen(
        [sys.executable, "-m", "gateway.processor.supervisor"],
        stdin=subprocess.PIPE,
        preexec_fn=ignore_sigint,
    )
    assert child.stdin is not None
    with child.stdin:
        child.stdin.write(pickle.dumps((settings, log_level)))
    return child


def ignore_sigint() -> None:
    """In the forked child, before exec: an ignored signal stays ignored across exec.

    The signal mask is inherited too, so clear what a parent may hold blocked.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


def _stop(child: subprocess.Popen[bytes]) -> None:
    """SIGTERM the runtime (it commits and closes); SIGKILL it if it is still there later."""
    if child.poll() is None:
        child.terminate()
    try:
        child.wait(KILL_AFTER_S)
    except subprocess.TimeoutExpired:
        log.error(f"the processor runtime did not stop within {KILL_AFTER_S:.0f}s; killing it")
        child.kill()
        child.wait()


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
