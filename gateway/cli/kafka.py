"""`gateway kafka up | down | status | stop-node N | start-node N`."""

from __future__ import annotations

import argparse

from gateway.audit.index import index_root
from gateway.broker import install, launcher
from gateway.broker.install import BrokerError, Cluster
from gateway.cli.common import EXIT_UNAVAILABLE, CommandError
from gateway.processor import state_identity
from gateway.view.store import views_root


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "kafka",
        help="run a local Apache Kafka cluster (KRaft, loopback) from Apache's jars",
        description="A local Apache Kafka cluster in KRaft mode on 127.0.0.1, for trying "
        "and testing the gateway; its data, logs and pid files live under the gateway home "
        "($GATEWAY_HOME, default ~/.cache/unique-jobs-gateway).",
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")

    p = actions.add_parser(
        "up",
        help="start the local cluster, restart a stopped one, or reuse the running one",
        description="Start the local cluster and wait until it answers. A stopped cluster "
        "restarts with its data; one that exists with another --brokers, --port or "
        "--kafka-version is never replaced: delete it first with `gateway kafka down --purge`.",
    )
    p.add_argument(
        "--brokers", type=int, choices=(1, 3), default=None,
        help="nodes (default: the existing cluster's, else 1)",
    )  # fmt: skip
    p.add_argument(
        "--port", type=int, default=None,
        help="first broker port; node N listens on PORT+N-1, its controller on PORT+99+N "
        f"(default: the existing cluster's, else {launcher.DEFAULT_PORT})",
    )  # fmt: skip
    p.add_argument(
        "--kafka-version", default=None,
        help="Apache Kafka release (default: the existing cluster's, else "
        f"$GATEWAY_KAFKA_VERSION, else {install.DEFAULT_VERSION})",
    )  # fmt: skip
    p.set_defaults(func=_up)

    p = actions.add_parser("down", help="stop the nodes this launcher started")
    p.add_argument(
        "--purge", action="store_true",
        help="also delete the cluster's data and everything built from it: processor state "
        "and the HTTP views of `gateway serve` (default: keep all)",
    )  # fmt: skip
    p.set_defaults(func=_down)

    p = actions.add_parser(
        "status", help="show nodes, pids, bootstrap and log files (exit 3 when stopped)"
    )
    p.set_defaults(func=_status)

    for name, verb in (("stop-node", "stop"), ("start-node", "start")):
        p = actions.add_parser(name, help=f"{verb} one node of the local cluster, for fault tests")
        p.add_argument("node_id", type=int, metavar="N", help="node id, 1 to the node count")
        p.set_defaults(func=_stop_node if verb == "stop" else _start_node)


def _cluster() -> Cluster:
    cluster = launcher.load_cluster()
    if cluster is None:
        raise CommandError("no local cluster: run `gateway kafka up` first")
    return cluster


def _up(args: argparse.Namespace) -> int:
    try:
        result = launcher.up(brokers=args.brokers, port=args.port, version=args.kafka_version,
                             say=_say)  # fmt: skip
    except BrokerError as exc:
        raise CommandError(str(exc)) from exc
    cluster = result.cluster
    if result.reused:
        print(f"Kafka {cluster.version} already running ({cluster.brokers} node(s))")
    else:
        print(f"Kafka {cluster.version} ready in {result.seconds:.1f}s ({cluster.brokers} node(s))")
    print(f"bootstrap: {cluster.bootstrap}")
    return 0


def _say(line: str) -> None:
    print(line, flush=True)


def _down(args: argparse.Namespace) -> int:
    cluster = launcher.load_cluster()
    stopped = launcher.down(cluster, purge=args.purge)
    print(f"stopped node(s): {', '.join(map(str, stopped))}" if stopped else "nothing running")
    if args.purge and cluster is not None:
        print(f"deleted {cluster.directory}")
        for state_dir in state_identity.purge(cluster.cluster_id):
            print(f"deleted processor state {state_dir}")
        # The HTTP views are built from the same cluster: a purged job must not answer GET.
        for view_dir in state_identity.purge(cluster.cluster_id, views_root()):
            print(f"deleted HTTP view {view_dir}")
        for index_dir in state_identity.purge(cluster.cluster_id, index_root()):
            print(f"deleted audit index {index_dir}")
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
    return 0 if running else EXIT_UNAVAILABLE


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
        launcher.wait_ready(
            cluster.bootstrap, nodes=len(launcher.running_nodes(cluster)),
            cluster=cluster, started={args.node_id: pid},
        )  # fmt: skip
    except BrokerError as exc:
        raise CommandError(str(exc)) from exc
    print(f"node {args.node_id} running (pid {pid})")
    return 0
