"""Keep one processor runtime alive: restart it after a failure, stop it on request.

The runtime fails on purpose when Kafka errors leave it unsure of its state (a
broker restart mid-rebalance, say); exactly-once makes a restart safe, since
the new runtime fences the old transactional id and resumes from the last
commit. The runtime runs in a child process so that even a hung shutdown
cannot take the supervisor with it.
"""

from __future__ import annotations

import logging
import multiprocessing
import signal
import threading
import time
from typing import Any

from gateway import logs
from gateway.processor.app import ProcessorSettings

log = logging.getLogger("gateway.processor")

BACKOFF_START_S = 1.0
BACKOFF_MAX_S = 30.0
HEALTHY_AFTER_S = 60.0  # a runtime up this long resets the backoff


def _child(settings: ProcessorSettings, log_level: str) -> None:
    from gateway.processor import app

    logs.configure(log_level)
    app.run(settings)


def supervise(settings: ProcessorSettings, log_level: str = "INFO") -> int:
    stopping = threading.Event()
    ctx = multiprocessing.get_context("spawn")
    child: Any = None

    def on_signal(signum: int, _frame: Any) -> None:
        stopping.set()
        if child is not None and child.is_alive():
            child.terminate()  # SIGTERM: the runtime commits and leaves the group

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)

    backoff = BACKOFF_START_S
    while not stopping.is_set():
        started = time.monotonic()
        child = ctx.Process(target=_child, args=(settings, log_level), name="gateway-processor")
        child.start()
        child.join()
        if stopping.is_set():
            break
        if time.monotonic() - started > HEALTHY_AFTER_S:
            backoff = BACKOFF_START_S
        log.warning(
            "processor runtime exited; restarting",
            extra={"exit_code": child.exitcode, "restart_in_s": backoff},
        )
        stopping.wait(backoff)
        backoff = min(backoff * 2, BACKOFF_MAX_S)
    child.join(timeout=60)
    return 0
