"""A local Apache Kafka cluster in KRaft mode, run from Apache's own jars.

The jars come from Maven Central through the pom.xml beside this file and are
cached under the gateway home, so later starts need no network. Each node is a
combined broker and controller on loopback. Everything the launcher starts is
recorded in pid files under the cluster directory; `down` and `stop-node` only
ever signal those processes, after checking that the pid still runs our node.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from gateway.config import gateway_home

DEFAULT_VERSION = "4.3.1"
DEFAULT_PORT = 9092
POM = Path(__file__).with_name("pom.xml")
READY_TIMEOUT_S = 90.0


class BrokerError(Exception):
    """A launcher failure with a message a user can act on."""


def kafka_version() -> str:
    return os.environ.get("GATEWAY_KAFKA_VERSION", DEFAULT_VERSION)


@dataclass(frozen=True)
class Cluster:
    """What `up` started: enough to find, stop and restart every node."""

    version: str
    brokers: int
    port: int
    cluster_id: str
    directory: str

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{self.port + i}" for i in range(self.brokers))

    def node_dir(self, node_id: int) -> Path:
        return Path(self.directory) / f"node-{node_id}"

    def log_path(self, node_id: int) -> Path:
        return self.node_dir(node_id) / "broker.log"

    def node_ids(self) -> range:
        return range(1, self.brokers + 1)


def cluster_dir() -> Path:
    return gateway_home() / "cluster"


def load_cluster(directory: Path | None = None) -> Cluster | None:
    meta = (directory or cluster_dir()) / "cluster.json"
    if not meta.exists():
        return None
    return Cluster(**json.loads(meta.read_text()))


# -- jars ---------------------------------------------------------------------


def ensure_jars(version: str) -> Path:
    """Download Kafka `version` and its logging backend once; return the libs dir."""
    libs = gateway_home() / "kafka" / version / "libs"
    done = libs / ".complete"
    if done.exists():
        return libs
    if shutil.which("mvn") is None:
        raise BrokerError("mvn not found: install Maven (and Java 17) to fetch the Kafka jars")
    libs.mkdir(parents=True, exist_ok=True)
    profile = "kafka3" if version.startswith("3.") else "kafka4"
    cmd = [
        "mvn", "-q", "-B", "-f", str(POM), f"-P{profile}",
        f"-Dkafka.version={version}", f"-DoutputDirectory={libs}",
        "dependency:copy-dependencies",
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-5:]
        raise BrokerError(
            f"could not fetch Kafka {version} from Maven Central:\n  " + "\n  ".join(tail)
        )
    done.write_text(version)
    return libs


# -- configuration ------------------------------------------------------------


def _server_properties(cluster: Cluster, node_id: int) -> str:
    n = cluster.brokers
    rf = min(3, n)
    voters = ",".join(f"{i}@127.0.0.1:{cluster.port + 100 + i - 1}" for i in cluster.node_ids())
    port = cluster.port + node_id - 1
    settings = {
        "process.roles": "broker,controller",
        "node.id": node_id,
        "controller.quorum.voters": voters,
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{port + 100}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": cluster.node_dir(node_id) / "data",
        # Transactions need the transaction log and offsets topic to be creatable
        # on this cluster's size: RF and min ISR never above the node count.
        "offsets.topic.replication.factor": rf,
        "offsets.topic.num.partitions": 10,
        "transaction.state.log.replication.factor": rf,
        "transaction.state.log.min.isr": min(2, rf),
        "transaction.state.log.num.partitions": 10,
        "default.replication.factor": rf,
        "min.insync.replicas": min(2, rf),
        "num.partitions": 1,
        "auto.create.topics.enable": "false",
        "group.initial.rebalance.delay.ms": 0,
        "log.segment.bytes": 64 * 1024 * 1024,
        "transaction.max.timeout.ms": 15 * 60 * 1000,
    }
    return "".join(f"{k}={v}\n" for k, v in settings.items())


_LOG4J2 = """\
status = warn
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.stdout.ref = STDOUT
logger.kafka.name = kafka
logger.kafka.level = WARN
logger.state.name = state.change.logger
logger.state.level = WARN
"""

_LOG4J1 = """\
log4j.rootLogger=INFO, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka=WARN
log4j.logger.state.change.logger=WARN
"""


def _java_command(cluster: Cluster, libs: Path, main: str, *args: str) -> list[str]:
    cdir = Path(cluster.directory)
    if cluster.version.startswith("3."):
        logging = f"-Dlog4j.configuration=file:{cdir / 'log4j.properties'}"
    else:
        logging = f"-Dlog4j2.configurationFile={cdir / 'log4j2.properties'}"
    return [
        "java", "-Xms256m", "-Xmx1g", "-XX:+UseG1GC", "-Djava.awt.headless=true",
        logging, "-cp", f"{libs}/*", main, *args,
    ]  # fmt: skip


def _write_configs(cluster: Cluster) -> None:
    cdir = Path(cluster.directory)
    cdir.mkdir(parents=True, exist_ok=True)
    (cdir / "log4j2.properties").write_text(_LOG4J2)
    (cdir / "log4j.properties").write_text(_LOG4J1)
    for node_id in cluster.node_ids():
        node = cluster.node_dir(node_id)
        node.mkdir(parents=True, exist_ok=True)
        (node / "server.properties").write_text(_server_properties(cluster, node_id))
    (cdir / "cluster.json").write_text(json.dumps(asdict(cluster), indent=2))


def _format_storage(cluster: Cluster, libs: Path) -> None:
    for node_id in cluster.node_ids():
        node = cluster.node_dir(node_id)
        if (node / "data" / "meta.properties").exists():
            continue
        cmd = _java_command(
            cluster, libs, "kafka.tools.StorageTool", "format",
            "-t", cluster.cluster_id, "-c", str(node / "server.properties"),
        )  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise BrokerError(
                f"formatting node {node_id} failed: {(proc.stdout + proc.stderr).strip()}"
            )


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
    cmd = _java_command(cluster, libs, "kafka.Kafka", str(node / "server.properties"))
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
) -> None:
    """Return once the cluster answers metadata requests with all `nodes` brokers.

    Given the `cluster` and the pids of the nodes it started, fail at once,
    with the node's last log lines, if one of them has ended (a port taken, a
    bad config).
    """
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        if cluster is not None and started:
            _fail_if_ended(cluster, started)
        try:
            if len(admin.list_topics(timeout=2).brokers) >= nodes:
                return
        except Exception as exc:  # the client raises KafkaException until a broker answers
            last = exc
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
) -> UpResult:
    """Start the cluster, or reuse the one already there; wait until it answers.

    Unset options take the existing cluster's values, else the defaults (one
    node, DEFAULT_PORT, $GATEWAY_KAFKA_VERSION or DEFAULT_VERSION). A cluster
    that exists with other values, running or stopped, is never replaced: its
    data goes only with `down(purge=True)`. `directory` holds the cluster's
    configs, data, logs and pid files (default: cluster/ under the gateway
    home); tests give each run a directory of its own.
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
            wait_ready(existing.bootstrap, nodes=existing.brokers)
            return UpResult(existing, reused=True, seconds=0.0)
        cluster = existing
    else:
        cluster = Cluster(
            version=version or kafka_version(),
            brokers=brokers or 1,
            port=port or DEFAULT_PORT,
            cluster_id=_cluster_id(),
            directory=str(directory),
        )
    libs = ensure_jars(cluster.version)
    began = time.monotonic()
    _write_configs(cluster)
    _format_storage(cluster, libs)
    started = {node_id: start_node(cluster, node_id) for node_id in cluster.node_ids()}
    try:
        wait_ready(cluster.bootstrap, nodes=cluster.brokers, cluster=cluster, started=started)
    except BrokerError as exc:
        down(cluster)
        raise BrokerError(f"{exc}; see {cluster.log_path(1)}") from exc
    return UpResult(cluster, reused=False, seconds=time.monotonic() - began)


def down(cluster: Cluster | None = None, purge: bool = False, timeout: float = 30.0) -> list[int]:
    """Stop every node we started (killing any still up after `timeout`); purge deletes data."""
    cluster = cluster or load_cluster()
    if cluster is None:
        return []
    stopped = stop_nodes(cluster, list(cluster.node_ids()), timeout)
    if purge:
        shutil.rmtree(cluster.directory, ignore_errors=True)
    return stopped


def _cluster_id() -> str:
    # KRaft wants a base64url-encoded 16-byte UUID, as StorageTool random-uuid
    # prints; like Kafka's own, never one starting with "-", which a command
    # line would read as an option.
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id
