"""The one place that reaches into quixstreams beyond its public API.

The processor needs a few things the runtime does not publish: its rebalance
callbacks (readiness follows them), its signal set-up (ours replaces it), its
failure flag (the shutdown watchdog reads it), whether it is restoring state,
its transactional producer and the state of any key of a partition (the dedup
stage writes records and reads state for keys other than the record's).
`check()` runs at start and names what is missing, so a quixstreams upgrade
fails loudly here rather than somewhere in a running partition.
pyproject.toml pins quixstreams exactly.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import quixstreams
from quixstreams import Application
from quixstreams.checkpointing import Checkpoint
from quixstreams.dataframe import StreamingDataFrame
from quixstreams.state.base import PartitionTransaction

PINNED = "3.28.1"
_APP_ATTRIBUTES = (
    "_on_assign", "_on_revoke", "_on_lost", "_setup_signal_handlers", "_failed", "_state_manager",
)  # fmt: skip
_CONTEXT_ATTRIBUTES = ("producer", "checkpoint")
RebalanceHook = Callable[[Any, list[Any]], None]


class RuntimeMismatch(Exception):
    """The installed quixstreams lacks something the processor relies on."""


def check(app: Application, sdf: StreamingDataFrame) -> None:
    """Raise RuntimeMismatch naming every private attribute that is not where it was."""
    missing = [f"Application.{name}" for name in _APP_ATTRIBUTES if not hasattr(app, name)]
    # Checked on the classes: the checkpoint exists only once the runtime runs.
    context = type(sdf.processing_context)
    fields = getattr(context, "__dataclass_fields__", {})
    missing += [
        f"ProcessingContext.{name}"
        for name in _CONTEXT_ATTRIBUTES
        if not hasattr(context, name) and name not in fields
    ]
    if not hasattr(Checkpoint, "get_store_transaction"):
        missing.append("Checkpoint.get_store_transaction")
    if not hasattr(PartitionTransaction, "as_state"):
        missing.append("PartitionTransaction.as_state")
    if missing:
        raise RuntimeMismatch(
            f"quixstreams {quixstreams.__version__} lacks {', '.join(missing)}; the gateway is "
            f"built against quixstreams {PINNED}: install that version"
        )


def rebalance_hooks(app: Application) -> tuple[RebalanceHook, RebalanceHook, RebalanceHook]:
    """The runtime's own on_assign, on_revoke and on_lost, which it hands the consumer."""
    return app._on_assign, app._on_revoke, app._on_lost


def set_rebalance_hooks(
    app: Application, assign: RebalanceHook, revoke: RebalanceHook, lost: RebalanceHook
) -> None:
    for name, hook in (("_on_assign", assign), ("_on_revoke", revoke), ("_on_lost", lost)):
        setattr(app, name, hook)


def replace_signal_setup(app: Application, install: Callable[[], None]) -> None:
    """Application.run sets up its signal handlers first thing; ours instead."""
    app._setup_signal_handlers = install  # type: ignore[method-assign]


def has_failed(app: Application) -> bool:
    """The runtime's own flag: it aborts its transaction and closes its consumer."""
    return bool(getattr(app, "_failed", False))


def recovery_required(app: Application) -> bool:
    """Whether the runtime is still restoring state from its changelogs."""
    return bool(app._state_manager.recovery_required)


def transactional_producer(sdf: StreamingDataFrame) -> Any:
    """The producer whose records commit with the checkpoint, never outside it."""
    return sdf.processing_context.producer


def checkpoint_of(sdf: StreamingDataFrame) -> object:
    """The runtime's current checkpoint: a new one after each commit (and rebalance)."""
    return sdf.processing_context.checkpoint


def state_of(sdf: StreamingDataFrame, partition: int, key: bytes, timestamp_ms: int) -> Any:
    """The state of any key of a partition, as the runtime builds it for a stateful step."""
    transaction = sdf.processing_context.checkpoint.get_store_transaction(
        stream_id=sdf.stream_id, partition=partition
    )
    return transaction.as_state(prefix=key, timestamp=timestamp_ms)
