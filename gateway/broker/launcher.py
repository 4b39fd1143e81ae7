"""A local Apache Kafka cluster in KRaft mode, run from Apache's own jars: its nodes
started, stopped and waited for (install.py fetches the jars and writes the files).

Everything the launcher starts is recorded in pid files under the cluster directory;
`down` and `stop-node` only ever signal those processes, after checking that the pid
still runs our node.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gateway.broker import ports
from gateway.broker.install import (
    DEFAULT_PORT,
    BrokerError,
    Cluster,
    cluster_dir,
    ensure_jars,
    format_storage,
    jars_ready,
    java_command,
    kafka_version,
    load_cluster,
    new_cluster_id,
    write_configs,
)

READY_TIMEOUT_S = 90.0
SAY_EVERY_S = 10.0  # a start says how it goes at least this often
Say = Callable[[str], None]


def _silent(_: str) -> None:
    pass


# -- processes ----------------------------------------------------------------


def _pid_file(cluster: Cluster, node_id: int) -> Path:
    return cluster.node_dir(node_id) / "broker.pid"


def node_pid(cluster: Cluster, node_id: int) -> int | None:
    """The pid of a running node we started, or None.

    A pid file can outlive its process and the pid can be reused, so the
    process must still be running this node's server.properties.
    """
    try:
        pid = int(_pid_file(cluster, node_id).read_text())
        cmdline = _cmdline(pid)
    except (OSError, ValueError):
        return None
    config = str(cluster.node_dir(node_id) / "server.properties").encode()
    return pid if config in cmdline else None


def _cmdline(pid: int, settle_s: float = 2.0) -> bytes:
    """The command line of `pid`, waiting out an exec still in progress.

    Popen returns once exec has passed its point of no return, but the kernel
    sets the new program's arguments a moment later: until then the command
    line of a process that runs reads empty, as does a zombie's.
    """
    deadline = time.monotonic() + settle_s
    while not (cmdline := Path(f"/proc/{pid}/cmdline").read_bytes()):
        if _is_zombie(pid) or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    return cmdline


def _port_in_use(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def start_node(cluster: Cluster, node_id: int) -> int:
    if node_id not in cluster.node_ids():
        raise BrokerError(f"no node {node_id}: this cluster has nodes 1..{cluster.brokers}")
    pid = node_pid(cluster, node_id)
    if pid is not None:
        return pid
    for port in (cluster.port + node_id - 1, cluster.port + 100 + node_id - 1):
        if _port_in_use(port):
            raise BrokerError(
                f"port {port} is already in use by another process; "
                "choose other ports with --port or stop that process"
            )
    libs = ensure_jars(cluster.version)
    node = cluster.node_dir(node_id)
    cmd = java_command(cluster, libs, "kafka.Kafka", str(node / "server.properties"))
    with open(cluster.log_path(node_id), "ab") as log:
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
    _pid_file(cluster, node_id).write_text(str(proc.pid))
    return proc.pid


def stop_node(cluster: Cluster, node_id: int, timeout: float = 30.0) -> bool:
    """Stop one node we started; False if it was not running."""
    return bool(stop_nodes(cluster, [node_id], timeout))


def stop_nodes(cluster: Cluster, node_ids: list[int], timeout: float = 30.0) -> list[int]:
    """SIGTERM the given nodes together, SIGKILL any still up after `timeout`.

    Together, because a KRaft node shutting down alone after its peers waits
    for a controller quorum that is already gone.
    """
    pids = {n: pid for n in node_ids if (pid := node_pid(cluster, n)) is not None}
    for pid in pids.values():
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    waiting = dict(pids)
    while waiting and time.monotonic() < deadline:
        waiting = {n: pid for n, pid in waiting.items() if not _reap(pid)}
        time.sleep(0.2)
    for pid in waiting.values():
        os.kill(pid, signal.SIGKILL)
        _reap(pid)
    for n in pids:
        _pid_file(cluster, n).unlink(missing_ok=True)
    return sorted(pids)


def _reap(pid: int) -> bool:
    """True once `pid` has exited (reaping it if it is our child)."""
    return _exit(pid) is not None


def _exit(pid: int) -> str | None:
    """None while `pid` runs, else how it ended (reaping it if it is our child)."""
    try:
        done, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        gone = not Path(f"/proc/{pid}").exists() or _is_zombie(pid)
        return "exited" if gone else None
    if done != pid:
        return None
    if os.WIFSIGNALED(status):
        return f"was killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exited with code {os.WEXITSTATUS(status)}"


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except OSError:
        return True


def wait_ready(
    bootstrap: str,
    timeout: float = READY_TIMEOUT_S,
    nodes: int = 1,
    cluster: Cluster | None = None,
    started: dict[int, int] | None = None,
    say: Say = _silent,
) -> None:
    """Return once the cluster answers metadata requests with all `nodes` brokers, saying
    every SAY_EVERY_S that it still waits.

    Given the `cluster` and the pids of the nodes it started, fail at once,
    with the node's last log lines, if one of them has ended (a port taken, a
    bad config).
    """
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    began = time.monotonic()
    deadline, said = began + timeout, began
    last: Exception | None = None
    while time.monotonic() < deadline:
        if cluster is not None and started:
            _fail_if_ended(cluster, started)
        try:
            if len(admin.list_topics(timeout=2).brokers) >= nodes:
                return
        except Exception as exc:  # the client raises KafkaException until a broker answers
            last = exc
        if time.monotonic() - said >= SAY_EVERY_S:
            said = time.monotonic()
            say(f"waiting for Kafka at {bootstrap} to answer ({said - began:.0f}s)")
        time.sleep(0.2)
    raise BrokerError(f"broker at {bootstrap} did not answer within {timeout:.0f}s ({last})")


def _fail_if_ended(cluster: Cluster, started: dict[int, int]) -> None:
    for node_id, pid in started.items():
        if (ended := _exit(pid)) is not None:
            tail = _log_tail(cluster.log_path(node_id)) or "(its log is empty)"
            raise BrokerError(f"Kafka node {node_id} {ended} while starting:\n{tail}")


def _log_tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"(no log at {path})"


def running_nodes(cluster: Cluster) -> list[int]:
    return [n for n in cluster.node_ids() if node_pid(cluster, n) is not None]


@dataclass(frozen=True)
class UpResult:
    cluster: Cluster
    reused: bool
    seconds: float


def up(
    brokers: int | None = None,
    port: int | None = None,
    version: str | None = None,
    directory: Path | None = None,
    say: Say = _silent,
) -> UpResult:
    """Start the cluster, or reuse the one already there; wait until it answers.

    Unset options take the existing cluster's values, else the defaults (one
    node, DEFAULT_PORT, $GATEWAY_KAFKA_VERSION or DEFAULT_VERSION). A cluster
    that exists with other values, running or stopped, is never replaced: its
    data goes only with `down(purge=True)`. `directory` holds the cluster's
    configs, data, logs and pid files (default: cluster/ under the gateway
    home); tests give each run a directory of its own. `say` is told each step of a
    start. A new cluster whose ports are taken, or that never answers, is not kept: the
    next start may choose another port.
    """
    directory = directory or cluster_dir()
    existing = load_cluster(directory)
    if existing is not None:
        wanted = {"brokers": brokers, "port": port, "version": version}
        differs = [
            f"--{name.replace('_', '-')} {value}"
            for name, value in wanted.items()
            if value is not None and value != getattr(existing, name)
        ]
        running = bool(running_nodes(existing))
        if differs:
            raise BrokerError(
                f"a {existing.brokers}-node Kafka {existing.version} cluster on port "
                f"{existing.port} {'is running' if running else 'is stopped, with its data'} "
                f"in {existing.directory}; to replace it with {' '.join(differs)}, delete it "
                "first with `gateway kafka down --purge`"
            )
        if running:
            for node_id in existing.node_ids():
                start_node(existing, node_id)
            wait_ready(existing.bootstrap, nodes=existing.brokers, say=say)
            return UpResult(existing, reused=True, seconds=0.0)
        cluster = existing
    else:
        cluster = Cluster(
            version=version or kafka_version(),
            brokers=brokers or 1,
            port=port or DEFAULT_PORT,
            cluster_id=new_cluster_id(),
            directory=str(directory),
        )
    _refuse_taken(cluster)
    if not jars_ready(cluster.version):
        say(f"fetching Kafka {cluster.version}'s jars from Maven Central (once; a minute or so)")
    libs = ensure_jars(cluster.version)
    began = time.monotonic()
    write_configs(cluster)
    format_storage(cluster, libs)
    say(f"starting Kafka {cluster.version} on 127.0.0.1:{cluster.port}, its controller on "
        f"{cluster.port + 100} (about 10-40 s)")  # fmt: skip
    started = {node_id: start_node(cluster, node_id) for node_id in cluster.node_ids()}
    try:
        wait_ready(cluster.bootstrap, nodes=cluster.brokers, cluster=cluster, started=started,
                   say=say)  # fmt: skip
    except BrokerError as exc:
        # A new cluster that never answered is not kept (nor pinned to its port); its
        # node's last lines say why.
        tail = _log_tail(cluster.log_path(1))
        down(cluster, purge=existing is None)
        where = f"its log's end:\n{tail}" if existing is None else f"see {cluster.log_path(1)}"
        raise BrokerError(f"{exc}; {where}") from exc
    return UpResult(cluster, reused=False, seconds=time.monotonic() - began)


def _refuse_taken(cluster: Cluster) -> None:
    """A port of the cluster that another process holds ends the start before anything is
    written, naming the port and what it is for."""
    held = ports.taken(cluster.port, cluster.brokers)
    if held:
        named = ", ".join(f"{port} ({what})" for port, what in held)
        raise BrokerError(
            f"port {named} is taken: choose another --port (each node listens on --port + "
            "n - 1, its controller on that + 100)"
        )


def down(cluster: Cluster | None = None, purge: bool = False, timeout: float = 30.0) -> list[int]:
    """Stop every node we started (killing any still up after `timeout`); purge deletes data."""
    cluster = cluster or load_cluster()
    if cluster is None:
        return []
    stopped = stop_nodes(cluster, list(cluster.node_ids()), timeout)
    if purge:
        shutil.rmtree(cluster.directory, ignore_errors=True)
    return stopped
