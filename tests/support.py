"""Helpers shared by tests."""

from __future__ import annotations

import socket


def free_port_block() -> int:
    """A base port whose broker and controller ports (base+0..2, base+100..102) look free."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + 103 < 65535 and all(_free(base + i) for i in (0, 1, 2, 100, 101, 102)):
            return base
    raise RuntimeError("no free port block on loopback")


def _free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0
