"""Free loopback ports for local brokers (node N on base+N-1, its controller on base+99+N)."""

from __future__ import annotations

import random
import socket

# Below Linux's ephemeral range (32768-60999): a port found free there can be
# taken by any client's outgoing connection before the broker binds it.
_LOW, _HIGH = 20000, 32000


def free_port_block(brokers: int = 1) -> int:
    """A base port whose broker and controller ports for `brokers` nodes are all free."""
    offsets = [n for n in range(brokers)] + [100 + n for n in range(brokers)]
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(_LOW, _HIGH - 103)
        if all(_free(base + i) for i in offsets):
            return base
    raise RuntimeError("no free port block on loopback")


def taken(base: int, brokers: int = 1) -> list[tuple[int, str]]:
    """The ports of a cluster at `base` that something else holds, each with what it is
    for: node n's on base+n-1, its controller's on base+99+n (--port + 100)."""
    wanted = [(base + n, f"node {n + 1}'s") for n in range(brokers)]
    wanted += [(base + 100 + n, f"node {n + 1}'s controller") for n in range(brokers)]
    return [(port, what) for port, what in wanted if not _free(port, reuse=True)]


def _free(port: int, reuse: bool = False) -> bool:
    """Whether nothing holds `port`; with `reuse`, as a broker binds it (SO_REUSEADDR: the
    connections a node just stopped left in TIME_WAIT do not hold it)."""
    with socket.socket() as s:
        if reuse:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
