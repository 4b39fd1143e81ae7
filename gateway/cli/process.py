"""`gateway process`: run the exactly-once dedup processor (router stage included)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from gateway import catalogue, logs, wire
from gateway.catalogue import CatalogueError
from gateway.cli.common import (
    CommandError,
    add_audit_key_argument,
    add_credentials_argument,
    add_kafka_arguments,
    add_log_level_argument,
    add_store_memory_argument,
    audit_keys_of,
    credentials_of,
    reachable_config,
    store_memory_of,
)
from gateway.config import (
    COMMITTED_LINGER_MS,
    DEFAULT_FETCH_WAIT_MS,
    DEFAULT_LINGER_MS,
    MAX_FETCH_WAIT_MS,
    MAX_LINGER_MS,
)
from gateway.core import DEFAULT_RETENTION_MS
from gateway.core.idempotency import DEFAULT_IDEMPOTENCY_MS
from gateway.stage.parsing import Limits


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "process",
        help="run the dedup processor (exactly-once) until Ctrl-C or SIGTERM",
        description="Run the dedup processor: read intake, requests and job_events, decide "
        "each request with the core, and write jobs, cancellations, rejections and decisions "
        "in one Kafka transaction per checkpoint. Runs one runtime per core (at most one per "
        "partition) in one consumer group, restarts each after a failure, and stops them all "
        "within 10 s of Ctrl-C or SIGTERM.",
    )
    add_arguments(p)
    add_credentials_argument(
        p, "the status port's /metrics then needs `Authorization: Bearer KEY` of a principal "
        "holding `inspect` (roles read-only, operator, admin); /ready and /live stay open",
        "anyone may read /metrics",
    )  # fmt: skip
    p.set_defaults(func=_process)


def add_arguments(p: argparse.ArgumentParser, metrics_default: str = "none") -> None:
    """The processor's options, shared with `gateway up` (which picks free ports for the
    status port when none is given: `metrics_default` says so)."""
    add_kafka_arguments(p)
    p.add_argument(
        "--instance-id",
        default=os.environ.get("GATEWAY_INSTANCE_ID", "1"),
        help="stable id of this instance: its transactional id and state directory; with "
        "several processes, process n is ID-n (default $GATEWAY_INSTANCE_ID or 1)",
    )
    p.add_argument(
        "--processes", type=int,
        help="processor runtimes, each a process of its own in the one consumer group "
        "(default: one per core, at most the partitions of the requests topic)",
    )  # fmt: skip
    p.add_argument(
        "--state-dir", type=Path,
        help="RocksDB state, a cache of the changelog topics, deleted and rebuilt when it came "
        "from another cluster, changelog or version (anything there but stores/ and "
        "identity.json is deleted at start); with several processes, one subdirectory ID-n "
        "each (default $GATEWAY_HOME/state/GROUP/INSTANCE_ID)",
    )  # fmt: skip
    p.add_argument(
        "--metrics-port", type=int,
        help="serve /metrics (Prometheus), /ready and /live on 127.0.0.1:PORT, for all the "
        "processes together; with several, process n serves its own on PORT+n; /metrics to a "
        f"key holding `inspect` only, given --credentials (default: {metrics_default})",
    )  # fmt: skip
    p.add_argument(
        "--max-request-bytes", type=int, default=Limits().max_request_bytes,
        help="larger requests are refused with payload_too_large (default %(default)s)",
    )  # fmt: skip
    p.add_argument(
        "--reply-prefix",
        help="besides the catalogue's replies topic, replies (reply_to) may go to existing "
        "topics whose names start with this (default: the replies topic's name and a dot; "
        "'' allows the replies topic only)",
    )
    p.add_argument(
        "--retention-seconds", type=int, default=DEFAULT_RETENTION_MS // 1000,
        help="how long finished jobs keep counting for policies that list terminal "
        "states (default %(default)s = 7 days)",
    )  # fmt: skip
    p.add_argument(
        "--idempotency-seconds", type=int, default=DEFAULT_IDEMPOTENCY_MS // 1000,
        help="how long a request's idempotency key gives its first answer again, and "
        "refuses another request (default %(default)s = 24 hours)",
    )  # fmt: skip
    p.add_argument(
        "--commit-interval", type=float, default=0.1,
        help="seconds between transaction commits (default %(default)s)",
    )  # fmt: skip
    p.add_argument(
        "--linger-ms", type=int,
        help="milliseconds the processor holds output records to send them together "
        f"(0..{MAX_LINGER_MS}; default {DEFAULT_LINGER_MS} with early answers, "
        f"{COMMITTED_LINGER_MS} with committed ones): more costs the broker less CPU "
        "per decision and delays committed answers",
    )  # fmt: skip
    p.add_argument(
        "--fetch-wait-ms", type=int, default=DEFAULT_FETCH_WAIT_MS,
        help="milliseconds the broker may hold a fetch of input records to fill it "
        f"(0..{MAX_FETCH_WAIT_MS}; default %(default)s: a fetch returns as soon as a "
        "record is there): below full load, more costs less CPU per decision and delays "
        "answers by up to that much",
    )  # fmt: skip
    p.add_argument(
        "--answers", choices=("early", "committed"), default="early",
        help="when a waiting caller gets its reply: early, as soon as the record is decided "
        "(a successor after a crash decides it again, the same); committed, with the "
        "transaction (default %(default)s)",
    )  # fmt: skip
    add_audit_key_argument(p, sealing=True)
    add_store_memory_argument(p)
    add_log_level_argument(p)


def linger_ms_of(args: argparse.Namespace) -> int:
    """The transactional producer's linger: as given, else the default for the answer mode."""
    if args.linger_ms is None:
        return DEFAULT_LINGER_MS if args.answers == "early" else COMMITTED_LINGER_MS
    if not 0 <= args.linger_ms <= MAX_LINGER_MS:
        raise CommandError(f"--linger-ms must be from 0 to {MAX_LINGER_MS}")
    return int(args.linger_ms)


def settings_from(args: argparse.Namespace):  # -> ProcessorSettings, imported lazily
    from gateway.processor.app import ProcessorSettings

    if args.retention_seconds < 1 or args.commit_interval <= 0:
        raise CommandError("--retention-seconds and --commit-interval must be positive")
    early = args.answers == "early"
    linger_ms = linger_ms_of(args)
    memory_mb = store_memory_of(args)
    if not 0 <= args.fetch_wait_ms <= MAX_FETCH_WAIT_MS:
        raise CommandError(f"--fetch-wait-ms must be from 0 to {MAX_FETCH_WAIT_MS}")
    try:
        limits = Limits(
            args.max_request_bytes, args.retention_seconds * 1000, args.idempotency_seconds * 1000
        )
    except ValueError as exc:
        raise CommandError(str(exc)) from exc
    keys = audit_keys_of(args)
    credentials = credentials_of(args)  # a bad file: exit 2, before anything starts
    try:
        cat = catalogue.load(namespace=args.namespace)
    except CatalogueError as exc:
        raise CommandError(str(exc)) from exc
    return ProcessorSettings(
        client_config=reachable_config(args.bootstrap),
        catalogue=cat,
        instance_id=args.instance_id,
        group=wire.group_name(args.namespace),
        state_dir=args.state_dir,
        limits=limits,
        reply_prefix=args.reply_prefix,
        commit_interval=args.commit_interval,
        linger_ms=linger_ms,
        fetch_wait_ms=args.fetch_wait_ms,
        early_answers=early,
        metrics_port=args.metrics_port,
        credentials=credentials,
        audit_keys=keys,
        store_memory_mb=memory_mb,
    )


def processes_from(args: argparse.Namespace, settings: Any) -> int:
    """--processes, checked against the partitions of `requests`, else the default."""
    from gateway.processor.supervisor import default_processes

    partitions = settings.catalogue.by_role("requests").partitions
    if args.processes is None:
        return default_processes(partitions, os.cpu_count())
    if not 1 <= args.processes <= partitions:
        raise CommandError(
            f"--processes must be from 1 to {partitions}, the partitions of "
            f"{settings.catalogue.name('requests')}: a process beyond that would own none"
        )
    return int(args.processes)


def _process(args: argparse.Namespace) -> int:
    from gateway.processor.supervisor import supervise

    logs.configure(args.log_level)
    settings = settings_from(args)
    return supervise(settings, args.log_level, processes=processes_from(args, settings))
