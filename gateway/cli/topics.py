"""`gateway topics apply | list`."""

from __future__ import annotations

import argparse

from confluent_kafka import KafkaException

from gateway import catalogue
from gateway.catalogue import CatalogueError
from gateway.cli.common import (
    EXIT_UNAVAILABLE,
    CommandError,
    add_kafka_arguments,
    reachable_config,
)


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("topics", help="the topic catalogue (topics/topics.toml)")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    p = actions.add_parser("apply", help="create the catalogue's topics or check them")
    add_kafka_arguments(p)
    p.set_defaults(func=_apply)
    p = actions.add_parser("list", help="print the catalogue")
    add_kafka_arguments(p, bootstrap=False)
    p.set_defaults(func=_list)


def _apply(args: argparse.Namespace) -> int:
    from gateway import admin  # the admin client is only needed here

    try:
        cat = catalogue.load(namespace=args.namespace)
        report = admin.apply(cat, reachable_config(args.bootstrap))
    except CatalogueError as exc:
        raise CommandError(str(exc)) from exc
    except KafkaException as exc:
        raise CommandError(f"Kafka: {exc.args[0].str()}", EXIT_UNAVAILABLE) from exc
    for name in report.created:
        print(f"created   {name}")
    for name in report.unchanged:
        print(f"ok        {name}")
    print(
        f"{len(report.created)} created, {len(report.unchanged)} already matching "
        f"({report.brokers} broker(s))"
    )
    return 0


def _list(args: argparse.Namespace) -> int:
    try:
        cat = catalogue.load(namespace=args.namespace)
    except CatalogueError as exc:
        raise CommandError(str(exc)) from exc
    for t in cat.topics:
        group = f"  copartition={t.copartition}" if t.copartition else ""
        print(f"{t.role:<14}{t.name:<34}{t.partitions:>3} partitions{group}")
    return 0
