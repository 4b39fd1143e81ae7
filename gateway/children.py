"""What every supervisor of the gateway's child processes does to a child before exec."""

from __future__ import annotations

import signal
import sys


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
