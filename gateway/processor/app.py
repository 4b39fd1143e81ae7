"""The dedup processor as a quixstreams Application, exactly-once.

One consumer group reads `intake` and `job_events` (the router stage, which
forwards both onto `requests`) and `requests` (the dedup stage, one RocksDB
state per partition keyed by fingerprint). The dedup stage reads a single
topic, so the order of each partition's log is the order of decisions: no
merge of topics by timestamp, no buffering. It also reads `job_ids` (the id
stage, a RocksDB state per partition keyed by job id), where client ids are
claimed before their requests reach `requests`. Every record the stages write
goes through the runtime's transactional producer, so outputs, state
changelog and input offsets commit in one Kafka transaction; local state is
written only after that commit. Replies to waiting callers are the exception
when answers are early (the default): see replies.py.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient
from quixstreams import Application, message_context
from quixstreams.state.rocksdb import RocksDBOptions

from gateway.admin import check as check_topics
from gateway.catalogue import Catalogue, CatalogueError
from gateway.config import DEFAULT_LINGER_MS
from gateway.partitioner import PRODUCER_SETTING
from gateway.processor import quix
from gateway.processor.dedup import Dedup, Limits
from gateway.processor.ids import IdStage
from gateway.processor.metrics import Metrics
from gateway.processor.readiness import Readiness
from gateway.processor.readiness import serve as serve_status
from gateway.processor.records import Output, Source, headers_of
from gateway.processor.replies import NOT_DELIVERED, EarlyReplies, ReplyTopics
from gateway.processor.router import Router
from gateway.processor.shutdown import Shutdown
from gateway.processor.state_identity import current, reconcile, state_root
from gateway.processor.ticks import Ticker
from gateway.processor.total import Emit

log = logging.getLogger("gateway.processor")

# A partition's store starts without expiry stamps and switches to them at its
# first write with a ttl; the records already there get this one. They were all
# written without a ttl, meaning "until deleted", and the runtime's own default
# (the triggering ttl) would make it forget live jobs and keys.
NEVER = timedelta(days=100 * 365)
# How long an idle fetch waits on the broker for data (see the consumer settings).
FETCH_WAIT_MS = 10
# How long start waits for the catalogue's topics to show in metadata: right after
# `topics apply` a broker may not list them yet.
STARTUP_WAIT_S = 10.0


@dataclass(frozen=True)
class ProcessorSettings:
    client_config: dict[str, str]
    catalogue: Catalogue
    instance_id: str = "1"
    # Consumer group and transactional-id prefix; the namespace keeps test
    # runs and side-by-side deployments apart.
    group: str = "gateway-dedup"
    state_dir: Path | None = None
    limits: Limits = field(default_factory=Limits)
    # Seconds between transaction commits: the floor of decision latency, and
    # the amount of work a crash makes the successor redo.
    commit_interval: float = 0.1
    # Milliseconds the transactional producer holds records to send them together
    # (librdkafka's linger.ms, its default): the commit sends what it still holds.
    linger_ms: int = DEFAULT_LINGER_MS
    metrics_port: int | None = None
    # Replies go to the catalogue's replies topic and to topics under this prefix
    # (None: "<replies topic>."; "": the replies topic only). See replies.py.
    reply_prefix: str | None = None
    # Replies sent as soon as a record is handled, before its commit (see replies.py);
    # False: with the commit, as every other output.
    early_answers: bool = True


def runtime_settings(
    client_config: dict[str, Any],
    group: str,
    instance_id: str,
    commit_interval: float,
    state_dir: Path,
    stats_cb: Callable[[str], None] | None = None,
    linger_ms: int = DEFAULT_LINGER_MS,
) -> dict[str, Any]:
    """The stream runtime's Application settings, the processor's and the bench floor's
    (`gateway.bench.floor`), so the floor measures the runtime exactly as it runs here."""
    client = dict(client_config)
    bootstrap = client.pop("bootstrap.servers")
    statistics = (
        # Also how often the restore's progress is known (metrics.py).
        {"statistics.interval.ms": 1_000, "stats_cb": stats_cb} if stats_cb is not None else {}
    )
    return dict(
        broker_address=bootstrap,
        consumer_group=group,
        processing_guarantee="exactly-once",
        auto_offset_reset="earliest",
        commit_interval=commit_interval,
        consumer_poll_timeout=0.01,
        # A stable transactional id per instance: a restarted instance fences
        # its predecessor's open transaction at once instead of waiting for it
        # to time out.
        producer_extra_config={
            **client,
            **PRODUCER_SETTING,
            "transactional.id": f"{group}-{instance_id}",
            "transaction.timeout.ms": 30_000,
            "linger.ms": linger_ms,
        },
        # Static membership: a restarted instance takes its partitions back at
        # once instead of after a rebalance round.
        consumer_extra_config={
            **client,
            "isolation.level": "read_committed",
            "group.instance.id": f"{group}-{instance_id}",
            "session.timeout.ms": 10_000,
            # A member learns of a rebalance from its next heartbeat. When processes
            # start together, the first to join takes every partition and starts
            # restoring them all; librdkafka's 3 s made the others wait that long.
            "heartbeat.interval.ms": 500,
            # On assignment the runtime asks the watermarks of every assigned
            # partition, one at a time, on the connection that fetches: each
            # query waits behind a fetch held open this long for lack of data.
            # librdkafka's 500 ms made that 16 s of every start (32 partitions);
            # a fetch with data returns at once whatever this is.
            "fetch.wait.max.ms": FETCH_WAIT_MS,
            **statistics,
        },
        state_dir=str(state_dir),
        rocksdb_options=RocksDBOptions(legacy_records_ttl=NEVER),
        loglevel=None,
    )


def build(
    settings: ProcessorSettings,
) -> tuple[Application, Metrics, ReplyTopics, EarlyReplies | None]:
    cat = settings.catalogue
    metrics = Metrics()
    app = Application(
        **runtime_settings(
            settings.client_config,
            settings.group,
            settings.instance_id,
            settings.commit_interval,
            state_dir_of(settings),
            metrics.observe_consumer_stats,
            settings.linger_ms,
        ),
        # Our topics exist (gateway topics apply); the runtime creates only its
        # changelog topics.
        auto_create_topics=True,
        on_processing_error=_log_failure("processing"),
        on_producer_error=_log_failure("producing"),
        on_consumer_error=_log_failure("consuming"),
    )
    topics = {
        role: app.topic(cat.name(role), key_deserializer="bytes", value_deserializer="bytes")
        for role in ("intake", "requests", "job_events", "job_ids")
    }
    requests = app.dataframe(topics["requests"])
    quix.check(app, requests)
    quix.restore_in_chunks(app)
    producer = quix.transactional_producer(requests)

    names = {t.role: t.name for t in cat.topics}
    replies = reply_topics(settings)
    early = (
        EarlyReplies(settings.client_config, metrics.replies_dropped.labels(NOT_DELIVERED).inc)
        if settings.early_answers
        else None
    )

    emit = emitter(names, replies, metrics, producer.produce, early.send if early else None)

    def state_of(source: Source, key: bytes) -> Any:
        return quix.state_of(requests, source.partition, key, source.timestamp_ms)

    dedup = Dedup(
        cat.by_role("requests").partitions, emit, metrics, settings.limits, state_of,
        epoch=lambda: quix.checkpoint_of(requests),
    )  # fmt: skip
    router = Router(emit, metrics, settings.limits)
    ids = IdStage(cat.by_role("job_ids").partitions, emit, metrics, settings.limits)

    def on_dedup(value: Any, key: Any, timestamp: int, headers: Any, state: Any) -> None:
        dedup.on_record(value, key, _source(timestamp, headers, metrics), state)

    def on_intake(value: Any, key: Any, timestamp: int, headers: Any) -> None:
        router.on_record(value, key, _source(timestamp, headers, metrics))

    def on_job_event(value: Any, key: Any, timestamp: int, headers: Any) -> None:
        router.on_event(value, key, _source(timestamp, headers, metrics))

    def on_job_id(value: Any, key: Any, timestamp: int, headers: Any, state: Any) -> None:
        ids.on_record(value, key, _source(timestamp, headers, metrics), state)

    requests.update(on_dedup, stateful=True, metadata=True)
    app.dataframe(topics["intake"]).update(on_intake, metadata=True)
    app.dataframe(topics["job_events"]).update(on_job_event, metadata=True)
    app.dataframe(topics["job_ids"]).update(on_job_id, stateful=True, metadata=True)
    return app, metrics, replies, early


Produce = Callable[..., None]  # (topic=, key=, value=, headers=)


def emitter(
    names: dict[str, str],
    replies: ReplyTopics,
    metrics: Metrics,
    transactional: Produce,
    early: Produce | None,
) -> Emit:
    """Where each output goes: a reply to an allowed topic through `early` when answers are
    early, everything else through the transaction."""

    def emit(output: Output, source: Source) -> None:
        if output.topic is not None:
            refusal = replies.refusal(output.topic)
            if refusal is not None:
                metrics.replies_dropped.labels(refusal).inc()
                log.warning(
                    "reply not sent",
                    extra={"reply_to": output.topic[:255], "reason": refusal,
                           "source": source.as_dict()},
                )  # fmt: skip
                return
            if early is not None:
                # The guard hands over a record's outputs only once its handling has
                # succeeded (or its `internal` answer): no reply leaves for a handling undone.
                early(topic=output.topic, key=output.key, value=output.value,
                      headers=output.headers)  # fmt: skip
                return
        transactional(
            topic=output.topic or names[output.role or ""],
            key=output.key,
            value=output.value,
            headers=output.headers,
        )

    return emit


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
    """Run until stopped; raise if the runtime fails (the supervisor restarts us), or
    StartupRefused if the deployment is wrong (it does not)."""
    shutdown = Shutdown()
    shutdown.install_handlers()
    admin = AdminClient(settings.client_config)
    try:
        check_topics(settings.catalogue, admin, wait_s=STARTUP_WAIT_S)
        app, metrics, replies, early = build(settings)
    except (CatalogueError, quix.RuntimeMismatch) as exc:
        raise StartupRefused(str(exc)) from exc
    # Before any partition's state is opened: drop state from another cluster.
    reconcile(state_dir_of(settings), current(admin, settings.group))
    replies.start()
    shutdown.attach(app)
    readiness = Readiness(app, shutdown)
    if settings.metrics_port is not None:
        serve_status(settings.metrics_port, metrics.registry, readiness)
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
        app.run()
    finally:
        ticker.stop()
        replies.stop()
        if early is not None:
            early.close()


def _log_failure(stage: str) -> Any:
    """Log what went wrong with its traceback, then let the runtime fail as it would.

    A failure here means the transaction is aborted and the record replayed;
    the log is the only place its cause is kept.
    """

    def callback(exc: BaseException, *_: Any) -> bool:
        log.error(f"{stage} failed", exc_info=exc)
        return False

    return callback


def _source(timestamp: int, headers: Any, metrics: Metrics) -> Source:
    ctx = message_context()
    metrics.processed(ctx.topic, ctx.partition, ctx.offset)
    return Source(ctx.topic, ctx.partition, ctx.offset, timestamp, headers_of(headers))


def state_dir_of(settings: ProcessorSettings) -> Path:
    return settings.state_dir or state_root() / settings.group / settings.instance_id
