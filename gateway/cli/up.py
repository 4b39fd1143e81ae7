"""`gateway up`: the product on one machine, in the foreground.

Starts the local Kafka broker (unless --bootstrap names one), applies the topic
catalogue, and keeps running until Ctrl-C, then stops what it started.
"""

from __future__ import annotations

import argparse
import signal
import threading

from confluent_kafka import KafkaException

from gateway import admin, catalogue, config
from gateway.broker import launcher
from gateway.broker.launcher import BrokerError
from gateway.catalogue import CatalogueError
from gateway.cli.errors import CommandError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("up", help="start the broker (unless --bootstrap), apply topics, run")
    p.add_argument("--bootstrap", help="use this Kafka cluster instead of starting one")
    p.add_argument("--port", type=int, default=launcher.DEFAULT_PORT, help="local broker port")
    p.add_argument("--namespace", help="prefix every topic name with NAMESPACE.")
    p.set_defaults(func=_up)


def _up(args: argparse.Namespace) -> int:
    started: launcher.Cluster | None = None
    try:
        if args.bootstrap:
            bootstrap = args.bootstrap
        else:
            result = launcher.up(port=args.port)
            bootstrap = result.cluster.bootstrap
            if not result.reused:
                started = result.cluster
                print(f"Kafka {started.version} started in {result.seconds:.1f}s")
        print(f"bootstrap: {bootstrap}", flush=True)
        report = admin.apply(
            catalogue.load(namespace=args.namespace), config.client_config(bootstrap)
        )
        print(f"topics: {len(report.created)} created, {len(report.unchanged)} present")
        print("gateway is up; press Ctrl-C to stop", flush=True)
        _wait_for_interrupt()
    except (BrokerError, CatalogueError) as exc:
        raise CommandError(str(exc)) from exc
    except KafkaException as exc:
        raise CommandError(f"Kafka: {exc.args[0].str()}") from exc
    finally:
        if started is not None:
            launcher.down(started)
            print("stopped the local Kafka broker")
    return 0


def _wait_for_interrupt() -> None:
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
