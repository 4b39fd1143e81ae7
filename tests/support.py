"""Helpers shared by tests."""

from __future__ import annotations

from gateway.broker.ports import free_port_block as _block


def free_port_block() -> int:
    """A base port free for a three-node test cluster (base+0..2, base+100..102)."""
    return _block(brokers=3)
