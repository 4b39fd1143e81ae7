"""The one place that reaches into quixstreams beyond its public API.

The processor needs a few things the runtime does not publish: its rebalance
callbacks (readiness follows them), its signal set-up (ours replaces it), its
failure flag (the shutdown watchdog reads it), whether it is restoring state,
its transactional producer, the state of any key of a partition (the dedup
stage writes records and reads state for keys other than the record's) and its
changelog recovery loop (restore writes a chunk of records at once).
`check()` runs at start and names what is missing, so a quixstreams upgrade
fails loudly here rather than somewhere in a running partition.
pyproject.toml pins quixstreams exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import MethodType
from typing import Any

import quixstreams
from quixstreams import Application
from quixstreams.checkpointing import Checkpoint
from quixstreams.dataframe import StreamingDataFrame
from quixstreams.kafka.consumer import raise_for_msg_error
from quixstreams.state.base import PartitionTransaction
from quixstreams.state.metadata import (
    CHANGELOG_CF_MESSAGE_HEADER,
    CHANGELOG_PROCESSED_OFFSETS_MESSAGE_HEADER,
    CHANGELOG_TTL_STAMPED_HEADER,
    TTL_BACKFILL_PENDING_CF_NAME,
    TTL_SYSTEM_CF_NAME,
)
from quixstreams.state.recovery import RecoveryManager, RecoveryPartition
from quixstreams.state.rocksdb.partition import RocksDBStorePartition
from quixstreams.utils.json import loads as json_loads
from rocksdict import WriteBatch

PINNED = "3.28.1"
_APP_ATTRIBUTES = (
    "_on_assign", "_on_revoke", "_on_lost", "_setup_signal_handlers", "_failed", "_state_manager",
)  # fmt: skip
_CONTEXT_ATTRIBUTES = ("producer", "checkpoint")
_RECOVERY_ATTRIBUTES = {
    RecoveryManager: ("_recovery_loop", "recovering", "_log_recovery_progress",
                      "_update_recovery_status", "_rewind_data_partition"),
    RecoveryPartition: ("_should_apply_changelog", "recover_from_changelog_message"),
    RocksDBStorePartition: ("uses_ttl_stamps", "get_column_family_handle",
                            "_update_changelog_offset", "_write"),
}  # fmt: skip
_MANAGER_ATTRIBUTES = (
    "_consumer", "_recovery_partitions", "_topic_manager", "_broker_availability_timeout",
)  # fmt: skip
_CONSUMER_ATTRIBUTES = ("consume", "_broker_available", "raise_if_broker_unavailable")
# A restore reads its changelog this many records at a time, and waits this long
# for a chunk to fill: a partial chunk is the end of a changelog.
RESTORE_CHUNK = 1000
RESTORE_WAIT_S = 0.1
# A batch is written once it holds this many bytes of keys and values: large
# records (up to a megabyte each) do not make a chunk's batch a gigabyte.
RESTORE_BATCH_BYTES = 8 << 20
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
    missing += [
        f"{cls.__name__}.{name}"
        for cls, names in _RECOVERY_ATTRIBUTES.items()
        for name in names
        if not hasattr(cls, name)
    ]
    manager = getattr(getattr(app, "_state_manager", None), "_recovery_manager", None)
    missing += [f"RecoveryManager.{n}" for n in _MANAGER_ATTRIBUTES if not hasattr(manager, n)]
    consumer = getattr(manager, "_consumer", None)
    missing += [f"Consumer.{n}" for n in _CONSUMER_ATTRIBUTES if not hasattr(consumer, n)]
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


def restore_in_chunks(app: Application) -> None:
    """The runtime restores a store from its changelog one record at a time, each record
    its own RocksDB write and write-ahead-log append: most of a restore's CPU. Its loop
    is replaced by one that reads a chunk and writes each partition's part of it at once.
    """
    manager = app._state_manager._recovery_manager
    if manager is not None:  # None without changelogs: nothing is ever restored
        manager._recovery_loop = MethodType(_recovery_loop, manager)  # type: ignore[method-assign]


def _recovery_loop(manager: Any) -> None:
    """RecoveryManager._recovery_loop, a chunk at a time: until no partition is left to
    restore, apply what comes; an empty read is when the runtime checks which are done."""
    consumer = manager._consumer
    while manager.recovering:
        manager._log_recovery_progress()
        messages = consumer.consume(RESTORE_CHUNK, RESTORE_WAIT_S)
        if not messages:
            manager._update_recovery_status()
        chunks: dict[int, tuple[Any, list[Any]]] = {}
        for message in messages:
            message = raise_for_msg_error(message)
            partitions = manager._recovery_partitions.get(message.partition(), {})
            if (recovering := partitions.get(message.topic())) is not None:
                chunks.setdefault(id(recovering), (recovering, []))[1].append(message)
            elif message.topic() in manager._topic_manager.non_changelog_topics:
                manager._rewind_data_partition(message)
            # else: a changelog partition revoked meanwhile; its state is gone.
        for recovering, chunk in chunks.values():
            apply_changelog(recovering, chunk)
        if messages:
            consumer._broker_available()
        if manager._broker_availability_timeout:
            consumer.raise_if_broker_unavailable(manager._broker_availability_timeout)


def apply_changelog(recovering: Any, messages: Sequence[Any]) -> None:
    """Apply one partition's changelog records in order, to the state the runtime's own
    recover_from_changelog_message reaches one by one.

    A plain record (a store without expiry stamps, an unstamped record) is written as
    the runtime writes it, but into one batch with its neighbours (up to
    RESTORE_BATCH_BYTES) and the changelog offset of the last: the batch is atomic, so a
    crash leaves the store at a batch's edge, and the next restore goes on from its
    offset. Any other record (a stamped one, the stamps' own system records, one the
    runtime would refuse) goes to the runtime, after the batch before it is written.
    """
    store = recovering._store_partition
    batch: WriteBatch | None = None
    last = held = 0
    # A transaction's records share their processed-offsets header: judge each once.
    applies: dict[bytes | None, bool] = {}
    for message in messages:
        plain = _plain(store, message)
        if plain is None:
            if batch is not None:
                _write(store, batch, last)
                batch, held = None, 0
            recovering.recover_from_changelog_message(changelog_message=message)
            continue
        cf_name, processed = plain
        batch = batch if batch is not None else WriteBatch(raw_mode=True)
        if (apply := applies.get(processed)) is None:
            offsets = None if processed is None else json_loads(processed)
            apply = offsets is None or recovering._should_apply_changelog(processed_offsets=offsets)
            applies[processed] = apply
        if apply:
            key, value = message.key(), message.value()
            _put(store, batch, cf_name, key, value)
            held += len(key) + len(value or b"")
        last = message.offset()
        if held >= RESTORE_BATCH_BYTES:
            _write(store, batch, last)
            batch, held = None, 0
    if batch is not None:
        _write(store, batch, last)


def _plain(store: Any, message: Any) -> tuple[str, bytes | None] | None:
    """A plain record's column family and processed-offsets header; None for any other."""
    if type(store) is not RocksDBStorePartition or store.uses_ttl_stamps:
        return None
    cf = processed = None
    for name, value in message.headers() or ():
        if name == CHANGELOG_CF_MESSAGE_HEADER:
            cf = value
        elif name == CHANGELOG_PROCESSED_OFFSETS_MESSAGE_HEADER:
            processed = value
        elif name == CHANGELOG_TTL_STAMPED_HEADER and value:
            return None
    if not cf or not isinstance(message.key(), bytes):
        return None
    cf_name = cf.decode()
    if cf_name == TTL_SYSTEM_CF_NAME:
        return None
    return cf_name, processed


def _put(store: Any, batch: WriteBatch, cf_name: str, key: bytes, value: bytes | None) -> None:
    handle = store.get_column_family_handle(cf_name)
    # The runtime's census of unstamped records, kept until its stamping has run once.
    if cf_name == "default" and not (
        store._migration_done_at_open or store._recovery_saw_migration_done
    ):
        pending = store.get_column_family_handle(TTL_BACKFILL_PENDING_CF_NAME)
        if value is None:
            batch.delete(key, pending)
        else:
            batch.put(key, b"", pending)
    if value is None:
        batch.delete(key, handle)
    else:
        batch.put(key, value, handle)


def _write(store: Any, batch: WriteBatch, offset: int) -> None:
    store._update_changelog_offset(batch=batch, offset=offset)
    store._write(batch)
