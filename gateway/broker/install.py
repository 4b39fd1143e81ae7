"""A local Kafka cluster on disk: what it is (cluster.json), Apache's jars, the nodes'
configs and their formatted storage (launcher.py runs it).

The jars come from Maven Central through the pom.xml beside this file and are
cached under the gateway home, so later starts need no network. Each node is a
combined broker and controller on loopback.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from gateway.home import gateway_home

DEFAULT_VERSION = "4.3.1"
DEFAULT_PORT = 9092
POM = Path(__file__).with_name("pom.xml")


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


def _libs(version: str) -> Path:
    return gateway_home() / "kafka" / version / "libs"


def jars_ready(version: str) -> bool:
    """Whether Kafka `version`'s jars were fetched already."""
    return (_libs(version) / ".complete").exists()


def ensure_jars(version: str) -> Path:
    """Download Kafka `version` and its logging backend once; return the libs dir."""
    libs = _libs(version)
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


def java_command(cluster: Cluster, libs: Path, main: str, *args: str) -> list[str]:
    cdir = Path(cluster.directory)
    if cluster.version.startswith("3."):
        logging = f"-Dlog4j.configuration=file:{cdir / 'log4j.properties'}"
    else:
        logging = f"-Dlog4j2.configurationFile={cdir / 'log4j2.properties'}"
    return [
        "java", "-Xms256m", "-Xmx1g", "-XX:+UseG1GC", "-Djava.awt.headless=true",
        logging, "-cp", f"{libs}/*", main, *args,
    ]  # fmt: skip


def write_configs(cluster: Cluster) -> None:
    cdir = Path(cluster.directory)
    cdir.mkdir(parents=True, exist_ok=True)
    (cdir / "log4j2.properties").write_text(_LOG4J2)
    (cdir / "log4j.properties").write_text(_LOG4J1)
    for node_id in cluster.node_ids():
        node = cluster.node_dir(node_id)
        node.mkdir(parents=True, exist_ok=True)
        (node / "server.properties").write_text(_server_properties(cluster, node_id))
    (cdir / "cluster.json").write_text(json.dumps(asdict(cluster), indent=2))


def format_storage(cluster: Cluster, libs: Path) -> None:
    for node_id in cluster.node_ids():
        node = cluster.node_dir(node_id)
        if (node / "data" / "meta.properties").exists():
            continue
        cmd = java_command(
            cluster, libs, "kafka.tools.StorageTool", "format",
            "-t", cluster.cluster_id, "-c", str(node / "server.properties"),
        )  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise BrokerError(
                f"formatting node {node_id} failed: {(proc.stdout + proc.stderr).strip()}"
            )


def new_cluster_id() -> str:
    # KRaft wants a base64url-encoded 16-byte UUID, as StorageTool random-uuid
    # prints; like Kafka's own, never one starting with "-", which a command
    # line would read as an option.
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id
