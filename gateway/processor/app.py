"""The dedup processor: settings, wiring, and a run of its loop.

One consumer group reads `intake` and `job_events` (the router stage, which
forwards both onto `requests`) and `requests` (the dedup stage, one RocksDB
store per partition keyed by route). The dedup stage reads a single topic, so
the order of each partition's log is the order of decisions: no merge of
topics by timestamp, no buffering; a job id's claims are made in the same
log, at the id's home (core/ids.py). Every record the stages write goes through
the loop's transactional producer, so outputs, state changelog and input
offsets commit in one Kafka transaction; local state is written only after
that commit (loop.py). Replies to waiting callers are the exception when
answers are early (the default): see replies.py.
"""

from __future__ import annotations

import gc
import logging
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient

from gateway import store_memory
from gateway.admin import check as check_topics
from gateway.auth.credentials import CredentialsError
from gateway.catalogue import Catalogue, CatalogueError
from gateway.config import DEFAULT_FETCH_WAIT_MS, DEFAULT_LINGER_MS, FETCH_MIN_BYTES
from gateway.partitioner import PRODUCER_SETTING
from gateway.processor import changelogs
from gateway.processor.emitter import emitter
from gateway.processor.loop import Loop, Topics
from gateway.processor.metrics import Metrics
from gateway.processor.readiness import Readiness
from gateway.processor.readiness import serve as serve_status
from gateway.processor.replies import NOT_DELIVERED, EarlyReplies, ReplyTopics
from gateway.processor.shutdown import Shutdown
from gateway.processor.stages import Stages, Stores, input_roles
from gateway.processor.state_identity import current, reconcile, state_root
from gateway.processor.status_access import guard_of
from gateway.processor.store import LAYOUT
from gateway.processor.ticks import Ticker
from gateway.stage.audit_keys import AuditKeys
from gateway.stage.parsing import Limits
from gateway.stage.trail import UNKEYED
from gateway.wire import group_name

log = logging.getLogger("gateway.processor")

# How long start waits for the catalogue's topics to show in metadata: right after
# `topics apply` a broker may not list them yet.
STARTUP_WAIT_S = 10.0
# The stores live under the state directory here; anything else there is a previous
# version's (see state_identity.py).
STORES = "stores"


@dataclass(frozen=True)
class ProcessorSettings:
    client_config: dict[str, Any]
    catalogue: Catalogue
    instance_id: str = "1"
    # Consumer group and transactional-id prefix; the namespace keeps test
    # runs and side-by-side deployments apart.
    group: str = group_name(None)
    state_dir: Path | None = None
    limits: Limits = field(default_factory=Limits)
    # Seconds between transaction commits: the floor of decision latency, and
    # the amount of work a crash makes the successor redo.
    commit_interval: float = 0.1
    # Milliseconds the transactional producer holds records to send them together
    # (librdkafka's linger.ms, its default): the commit sends what it still holds.
    linger_ms: int = DEFAULT_LINGER_MS
    # Milliseconds the broker may hold a fetch to fill it (config.py); 0: none.
    fetch_wait_ms: int = DEFAULT_FETCH_WAIT_MS
    metrics_port: int | None = None
    # The credentials file: with one, the status port's /metrics needs a principal's key
    # holding `inspect` (status_access.py); None: anyone may read it.
    credentials: Path | None = None
    # Replies go to the catalogue's replies topic and to topics under this prefix
    # (None: "<replies topic>."; "": the replies topic only). See replies.py.
    reply_prefix: str | None = None
    # Replies sent as soon as a record is handled, before its commit (see replies.py);
    # False: with the commit, as every other output.
    early_answers: bool = True
    # The keys that seal the audit trail (audit_keys.py): the newest seals. None: unkeyed.
    audit_keys: AuditKeys | None = None
    # What the runtime's stores may hold together (store_memory.py).
    store_memory_mb: int = store_memory.DEFAULT_MB


def runtime_settings(
    client_config: dict[str, Any],
    group: str,
    instance_id: str,
    stats_cb: Callable[[str], None] | None = None,
    linger_ms: int = DEFAULT_LINGER_MS,
    fetch_wait_ms: int = DEFAULT_FETCH_WAIT_MS,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The loop's consumer and producer settings, the processor's and the bench floor's
    (`gateway.bench.floor`), so the floor measures the loop exactly as it runs here."""
    statistics = (
        # Also how often the restore's progress is known (metrics.py).
        {"statistics.interval.ms": 1_000, "stats_cb": stats_cb} if stats_cb is not None else {}
    )
    consumer = {
        **client_config,
        "group.id": group,
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        # Static membership: a restarted instance takes its partitions back at
        # once instead of after a rebalance round.
        "group.instance.id": f"{group}-{instance_id}",
        "session.timeout.ms": 10_000,
        # A member learns of a rebalance from its next heartbeat. When processes
        # start together, the first to join takes every partition; librdkafka's
        # 3 s made the others wait that long for their share.
        "heartbeat.interval.ms": 500,
        **statistics,
    }
    if fetch_wait_ms > 0:
        consumer.update({"fetch.wait.max.ms": fetch_wait_ms, "fetch.min.bytes": FETCH_MIN_BYTES})
    producer = {
        **client_config,
        **PRODUCER_SETTING,
        # A stable transactional id per instance: a restarted instance fences
        # its predecessor's open transaction at once instead of waiting for it
        # to time out.
        "transactional.id": f"{group}-{instance_id}",
        "transaction.timeout.ms": 30_000,
        "linger.ms": linger_ms,
    }
    return consumer, producer


def build(settings: ProcessorSettings) -> tuple[Loop, Metrics, ReplyTopics, EarlyReplies | None]:
    cat = settings.catalogue
    metrics = Metrics()
    consumer, producer = runtime_settings(
        settings.client_config, settings.group, settings.instance_id,
        metrics.observe_consumer_stats, settings.linger_ms, settings.fetch_wait_ms,
    )  # fmt: skip
    names = {t.role: t.name for t in cat.topics}
    replies = reply_topics(settings)
    early = (
        EarlyReplies(settings.client_config, metrics.replies_dropped.labels(NOT_DELIVERED).inc)
        if settings.early_answers
        else None
    )
    store_memory.configure(settings.store_memory_mb)
    stores = Stores(state_dir_of(settings) / STORES)
    roles = input_roles(cat)
    topics = Topics(
        inputs=list(roles),
        roles=roles,
        changelogs=changelogs.changelogs(cat, settings.group),
    )
    loop = Loop(
        consumer, producer, settings.client_config, topics, stores,
        settings.commit_interval, metrics,
    )  # fmt: skip
    counts = {t.role: t.partitions for t in cat.topics}
    emit = emitter(names, replies, metrics, loop.produce, early.send if early else None, counts)
    keys = settings.audit_keys
    sealer = UNKEYED if keys is None else keys.sealer()
    loop.stages = Stages(cat, emit, metrics, settings.limits, stores, sealer)
    return loop, metrics, replies, early


def reply_topics(settings: ProcessorSettings) -> ReplyTopics:
    cat = settings.catalogue
    replies = cat.name("replies")
    admin = AdminClient(settings.client_config)
    return ReplyTopics(
        replies,
        f"{replies}." if settings.reply_prefix is None else settings.reply_prefix,
        [t.name for t in cat.topics],
        lambda: set(admin.list_topics(timeout=10).topics),
    )


class StartupRefused(Exception):
    """The deployment is wrong in a way no restart can mend."""


def run(settings: ProcessorSettings) -> None:
    """Run until stopped; raise if the loop fails (the supervisor restarts us), or
    StartupRefused if the deployment is wrong (it does not)."""
    shutdown = Shutdown()
    shutdown.install_handlers()
    admin = AdminClient(settings.client_config)
    try:
        # The status port's, read before anything starts (serving it comes later).
        guard = None if settings.metrics_port is None else guard_of(settings.credentials)
        check_topics(settings.catalogue, admin, wait_s=STARTUP_WAIT_S)
        changelogs.ensure(settings.catalogue, settings.group, admin)
    except (CatalogueError, CredentialsError) as exc:
        raise StartupRefused(str(exc)) from exc
    if guard is not None:
        signal.signal(signal.SIGHUP, guard.on_sighup)
    # Before any partition's state is opened: drop state from another cluster or version.
    names = changelogs.changelogs(settings.catalogue, settings.group).values()
    identity = current(admin, names, LAYOUT)
    reconcile(state_dir_of(settings), identity, keep=STORES)
    loop, metrics, replies, early = build(settings)
    replies.start()
    shutdown.attach(loop)
    readiness = Readiness(loop, shutdown)
    if settings.metrics_port is not None:
        serve_status(settings.metrics_port, metrics.registry, readiness, guard)
    if shutdown.requested:
        return
    log.info(
        "processor starting",
        extra={"instance_id": settings.instance_id, "group": settings.group},
    )
    requests = settings.catalogue.name("requests")
    ticker = Ticker(settings.client_config, requests, lambda: readiness.owned(requests))
    ticker.start()
    # What start-up built lives as long as the process: out of the collector's sight,
    # its full collections stop walking it (a restore runs 6% faster).
    gc.collect()
    gc.freeze()
    try:
        loop.run()
    finally:
        ticker.stop()
        replies.stop()
        if early is not None:
            early.close()


def state_dir_of(settings: ProcessorSettings) -> Path:
    return settings.state_dir or state_root() / settings.group / settings.instance_id
