"""Stop the stream runtime on SIGTERM, always, within a deadline.

The runtime's own handlers (installed by Application.run) call
Application.stop(), which sets a threading.Event and so takes that Event's
lock inside the handler. Ctrl-C sends SIGINT to the whole process group and
the supervisor then sends SIGTERM; Python runs a handler between any two
bytecodes of the main thread, including those of another handler, so when
SIGTERM lands while the SIGINT handler holds the lock, the second handler
waits for the first forever: the process hangs in the runtime's SIGTERM
handler. So the supervisor starts the runtime with SIGINT ignored and stops
it with SIGTERM alone, and our handler only sets a flag; a watchdog thread
calls stop() outside any handler, and ends the process hard if the runtime is still running
GRACE_S later. Exactly-once makes that safe: a successor fences our
transactional id and resumes from the last commit.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from typing import Any

from quixstreams import Application

from gateway.processor import quix

log = logging.getLogger("gateway.processor")

GRACE_S = 5.0  # an orderly stop: commit the checkpoint, close the clients
FAILED_GRACE_S = 10.0  # a failed runtime's close can hang on a cluster moving leaders
EXIT_STUCK = 75  # EX_TEMPFAIL: after a failure, the supervisor restarts the runtime
EXIT_CONFIG = 78  # EX_CONFIG: the deployment is wrong; restarting cannot help


class Shutdown:
    """Signal handlers that only flag, and the watchdog that acts on the flag."""

    def __init__(self) -> None:
        self.requested = False  # a plain attribute: setting it takes no lock

    def install_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self._on_signal)

    def _on_signal(self, _signum: int, _frame: Any) -> None:
        self.requested = True

    def attach(self, app: Application) -> None:
        """Keep the runtime from installing its handlers; watch it from a thread."""
        # Application.run calls this first thing; ours are in place already.
        quix.replace_signal_setup(app, self.install_handlers)
        threading.Thread(target=self._watch, args=(app,), name="shutdown", daemon=True).start()

    def _watch(self, app: Application) -> None:
        while not self.requested and not quix.has_failed(app):
            time.sleep(0.05)
        if self.requested:
            app.stop()  # from this thread, its lock is only ever waited for, never re-entered
            grace, code, why = GRACE_S, 1, "stopping"
        else:
            # A failed runtime aborts its transaction and closes its consumer,
            # and that close can hang.
            grace, code, why = FAILED_GRACE_S, EXIT_STUCK, "the failed"
        time.sleep(grace)
        log.error(f"{why} runtime did not end within {grace:.0f}s; exiting")
        logging.shutdown()
        os._exit(code)
