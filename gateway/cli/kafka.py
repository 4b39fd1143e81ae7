"""`gateway kafka up | down | status | stop-node N | start-node N`."""

from __future__ import annotations

import argparse

from gateway.broker import launcher
from gateway.broker.launcher import BrokerError, Cluster
from gateway.cli.common import CommandError


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("kafka", help="run a local Apache Kafka cluster (KRaft, loopback)")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")

    p = actions.add_parser("up", help="start the local cluster, or reuse the running one")
    p.add_argument("--brokers", type=int, choices=(1, 3), default=1, help="nodes (default 1)")
    p.add_argument(
        "--port", type=int, default=launcher.DEFAULT_PORT,
        help="first broker port; node N listens on PORT+N-1, its controller on PORT+99+N "
        "(default %(default)s)",
    )  # fmt: skip
    p.add_argument(
        "--kafka-version", default=None,
        help=f"Apache Kafka release (default $GATEWAY_KAFKA_VERSION or {launcher.DEFAULT_VERSION})",
    )  # fmt: skip
    p.set_defaults(func=_up)

    p = actions.add_parser("down", help="stop the nodes this launcher started")
    p.add_argument("--purge", action="store_true", help="also delete the cluster's data")
    p.set_defaults(func=_down)

    p = actions.add_parser("status", help="show nodes, bootstrap and log files")
    p.set_defaults(func=_status)

    for name, func in (("stop-node", _stop_node), ("start-node", _start_node)):
        p = actions.add_parser(name, help=f"{name.split('-')[0]} one node by its node id")
        p.add_argument("node_id", type=int)
        p.set_defaults(func=func)


def _cluster() -> Cluster:
    cluster = launcher.load_cluster()
    if cluster is None:
        raise CommandError("no local cluster: run `gateway kafka up` first")
    return cluster


def _up(args: argparse.Namespace) -> int:
    try:
        result = launcher.up(brokers=args.brokers, port=args.port, version=args.kafka_version)
    except BrokerError as exc:
        raise CommandError(str(exc)) from exc
    cluster = result.cluster
    if result.reused:
        print(f"Kafka {cluster.version} already running ({cluster.brokers} node(s))")
    else:
        print(f"Kafka {cluster.version} ready in {result.seconds:.1f}s ({cluster.brokers} node(s))")
    print(f"bootstrap: {cluster.bootstrap}")
    return 0


def _down(args: argparse.Namespace) -> int:
    cluster = launcher.load_cluster()
    stopped = launcher.down(cluster, purge=args.purge)
    print(f"stopped node(s): {', '.join(map(str, stopped))}" if stopped else "nothing running")
    if args.purge and cluster is not None:
        print(f"deleted {cluster.directory}")
    return 0


def _status(args: argparse.Namespace) -> int:
    cluster = _cluster()
    running = launcher.running_nodes(cluster)
    print(f"Kafka {cluster.version}, {cluster.brokers} node(s), cluster id {cluster.cluster_id}")
    print(f"bootstrap: {cluster.bootstrap}")
    for node_id in cluster.node_ids():
        pid = launcher.node_pid(cluster, node_id)
        state = f"running (pid {pid})" if pid else "stopped"
        print(f"node {node_id}: {state}, port {cluster.port + node_id - 1}")
        print(f"  log: {cluster.log_path(node_id)}")
    return 0 if running else 3


def _stop_node(args: argparse.Namespace) -> int:
    cluster = _cluster()
    if args.node_id not in cluster.node_ids():
        raise CommandError(f"no node {args.node_id}: nodes are 1..{cluster.brokers}")
    stopped = launcher.stop_node(cluster, args.node_id)
    print(f"node {args.node_id} {'stopped' if stopped else 'was not running'}")
    return 0


def _start_node(args: argparse.Namespace) -> int:
    cluster = _cluster()
    try:
        pid = launcher.start_node(cluster, args.node_id)
        launcher.wait_ready(cluster.bootstrap, nodes=len(launcher.running_nodes(cluster)))
    except BrokerError as exc:
        raise CommandError(str(exc)) from exc
    print(f"node {args.node_id} running (pid {pid})")
    return 0
