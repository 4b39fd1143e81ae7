"""`gateway up`: the product on one machine, in the foreground.

Starts the local Kafka broker (unless --bootstrap names one), applies the topic
catalogue and runs the dedup processor until Ctrl-C, then stops what it started.
"""

from __future__ import annotations

import argparse

from confluent_kafka import KafkaException

from gateway import admin, logs
from gateway.broker import launcher
from gateway.broker.launcher import BrokerError
from gateway.catalogue import CatalogueError
from gateway.cli import process
from gateway.cli.errors import CommandError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "up", help="start the broker (unless --bootstrap), apply topics, run the processor"
    )
    p.add_argument("--port", type=int, default=launcher.DEFAULT_PORT, help="local broker port")
    process.add_arguments(p)
    p.set_defaults(func=_up)


def _up(args: argparse.Namespace) -> int:
    from gateway.processor.supervisor import supervise

    started: launcher.Cluster | None = None
    try:
        if not args.bootstrap:
            result = launcher.up(port=args.port)
            args.bootstrap = result.cluster.bootstrap
            if not result.reused:
                started = result.cluster
                print(f"Kafka {started.version} started in {result.seconds:.1f}s")
        print(f"bootstrap: {args.bootstrap}", flush=True)
        settings = process.settings_from(args)
        report = admin.apply(settings.catalogue, settings.client_config)
        print(f"topics: {len(report.created)} created, {len(report.unchanged)} present")
        print("processor: starting; press Ctrl-C to stop", flush=True)
        logs.configure(args.log_level)
        return supervise(settings, args.log_level)
    except (BrokerError, CatalogueError) as exc:
        raise CommandError(str(exc)) from exc
    except KafkaException as exc:
        raise CommandError(f"Kafka: {exc.args[0].str()}") from exc
    finally:
        if started is not None:
            launcher.down(started)
            print("stopped the local Kafka broker")
