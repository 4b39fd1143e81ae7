"""Stop the loop on SIGTERM, always, within a deadline.

Ctrl-C sends SIGINT to the whole process group and the supervisor then sends
SIGTERM; the supervisor starts each runtime with SIGINT ignored and stops it
with SIGTERM alone. Our handler only sets a flag (a handler runs between any
two bytecodes of the main thread, so it must take no lock); a watchdog thread
asks the loop to stop outside any handler, and ends the process hard if it is
still running GRACE_S later. A loop that failed gets FAILED_GRACE_S to close
its clients. Exactly-once makes a hard end safe: a successor fences our
transactional id and resumes from the last commit.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from typing import Any, Protocol

log = logging.getLogger("gateway.processor")

GRACE_S = 5.0  # an orderly stop: commit the transaction, close the clients
FAILED_GRACE_S = 10.0  # a failed loop's close can hang on a cluster moving leaders
EXIT_STUCK = 75  # EX_TEMPFAIL: after a failure, the supervisor restarts the runtime
EXIT_CONFIG = 78  # EX_CONFIG: the deployment is wrong; restarting cannot help


class Stoppable(Protocol):
    failed: bool

    def stop(self) -> None: ...


class Shutdown:
    """Signal handlers that only flag, and the watchdog that acts on the flag."""

    def __init__(self) -> None:
        self.requested = False  # a plain attribute: setting it takes no lock

    def install_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self._on_signal)

    def _on_signal(self, _signum: int, _frame: Any) -> None:
        self.requested = True

    def attach(self, loop: Stoppable) -> None:
        """Watch the loop from a thread."""
        threading.Thread(target=self._watch, args=(loop,), name="shutdown", daemon=True).start()

    def _watch(self, loop: Stoppable) -> None:
        while not self.requested and not loop.failed:
            time.sleep(0.05)
        if self.requested:
            loop.stop()
            grace, code, why = GRACE_S, 1, "stopping"
        else:
            grace, code, why = FAILED_GRACE_S, EXIT_STUCK, "the failed"
        time.sleep(grace)
        log.error(f"{why} loop did not end within {grace:.0f}s; exiting")
        logging.shutdown()
        os._exit(code)
