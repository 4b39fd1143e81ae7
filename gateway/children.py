"""What every supervisor of the gateway's child processes does to a child before exec, and
how it learns, from a signal, that it must stop them."""

from __future__ import annotations

import signal
import sys
import time
from typing import Any


def python_module(module: str, *args: str) -> list[str]:
    """The command that runs one of our modules in a child: `-P` keeps the working directory off
    its path, so a `gateway/` folder there (an older checkout, another project's) is never the
    code that runs; the child imports the gateway this interpreter has installed."""
    return [sys.executable, "-P", "-m", module, *args]


def ignore_sigint() -> None:
    """In the forked child, before exec: an ignored signal stays ignored across exec, so
    the terminal's Ctrl-C reaches only the supervisor, which stops the child its own way.

    The signal mask is inherited too, so clear what a parent may hold blocked.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


class Stop:
    """SIGINT or SIGTERM, noted: `requested`, and `at` (monotonic) the first one's time.

    Installed before a supervisor starts its first child, so a signal at any moment after,
    even while a child is being forked, is a stop it sees; never a KeyboardInterrupt that
    would leave a child started but not yet recorded, nor a signal lost because it came
    before a handler. The handler only sets attributes: it runs between any two bytecodes
    of the main thread and must take no lock. An ignored SIGINT (a shell's background job)
    is taken too: from here on, Ctrl-C stops what this process started.
    """

    def __init__(self) -> None:
        self.requested = False
        self.at = float("inf")
        self.interrupting = False

    def install(self, interrupting: bool = False) -> Stop:
        """`interrupting`: a signal also raises KeyboardInterrupt, to cut short what runs
        before any child (a wait for a broker). Python drops one raised inside a callback
        (an import lock's, a finaliser), so the stop is noted all the same: turn it off
        and check `requested` before starting a child."""
        self.interrupting = interrupting
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._on_signal)
        return self

    def request(self) -> None:
        """A stop from within (a child that must not run alone has died): as a signal's."""
        if not self.requested:
            self.at = time.monotonic()
            self.requested = True

    def _on_signal(self, _signum: int, _frame: Any) -> None:
        self.request()
        if self.interrupting:
            raise KeyboardInterrupt
