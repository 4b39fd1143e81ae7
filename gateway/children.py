"""What every supervisor of the gateway's child processes does to a child before exec."""

from __future__ import annotations

import signal


def ignore_sigint() -> None:
    """In the forked child, before exec: an ignored signal stays ignored across exec, so
    the terminal's Ctrl-C reaches only the supervisor, which stops the child its own way.

    The signal mask is inherited too, so clear what a parent may hold blocked.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
