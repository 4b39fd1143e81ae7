"""`gateway up`: the product on one machine, in the foreground.

Starts the local Kafka broker (unless --bootstrap names one), applies the topic
catalogue, and runs the dedup processor and the HTTP binding until Ctrl-C, then
stops what it started.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

from confluent_kafka import KafkaException

from gateway import admin, logs
from gateway.broker import launcher
from gateway.broker.launcher import BrokerError
from gateway.catalogue import CatalogueError
from gateway.cli import process
from gateway.cli.common import CommandError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "up",
        help="start the broker (unless --bootstrap), apply topics, run the processor and HTTP",
    )
    p.add_argument("--port", type=int, default=launcher.DEFAULT_PORT, help="local broker port")
    p.add_argument("--http-host", default="127.0.0.1", help="HTTP address (default %(default)s)")
    p.add_argument("--http-port", type=int, default=8080, help="HTTP port (default %(default)s)")
    process.add_arguments(p)
    p.set_defaults(func=_up)


def _start_http(args: argparse.Namespace) -> subprocess.Popen[bytes]:
    """The HTTP binding in a process of its own (it runs its own event loop and signals)."""
    command = [
        sys.executable, "-m", "gateway", "serve", "--bootstrap", args.bootstrap,
        "--host", args.http_host, "--port", str(args.http_port), "--log-level", args.log_level,
    ]  # fmt: skip
    if args.namespace:
        command += ["--namespace", args.namespace]
    return subprocess.Popen(command)


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
        http = _start_http(args)
        print(f"http: http://{args.http_host}:{args.http_port}/ojs/v1/jobs", flush=True)
        print("processor: starting; press Ctrl-C to stop", flush=True)
        logs.configure(args.log_level)
        try:
            return supervise(settings, args.log_level)
        finally:
            http.terminate()
            http.wait(timeout=30)
    except (BrokerError, CatalogueError) as exc:
        raise CommandError(str(exc)) from exc
    except KafkaException as exc:
        raise CommandError(f"Kafka: {exc.args[0].str()}") from exc
    finally:
        if started is not None:
            launcher.down(started)
            print("stopped the local Kafka broker")
