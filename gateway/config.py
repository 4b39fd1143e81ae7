"""Kafka client settings shared by every client the gateway makes.

The bootstrap address comes from `--bootstrap`, else $KAFKA_BOOTSTRAP, else the
local cluster started by `gateway kafka up`, else 127.0.0.1:9092. Any other
librdkafka setting is passed through from GATEWAY_KAFKA_<NAME> variables, with
the name's underscores read as dots (GATEWAY_KAFKA_SECURITY_PROTOCOL=SASL_SSL
sets security.protocol).
"""

from __future__ import annotations

import os

from gateway.broker import launcher

_PREFIX = "GATEWAY_KAFKA_"
_LAUNCHER_VARS = {"GATEWAY_KAFKA_VERSION"}


def bootstrap(explicit: str | None = None) -> str:
    if explicit:
        return explicit
    if os.environ.get("KAFKA_BOOTSTRAP"):
        return os.environ["KAFKA_BOOTSTRAP"]
    cluster = launcher.load_cluster()
    if cluster is not None and launcher.running_nodes(cluster):
        return cluster.bootstrap
    return f"127.0.0.1:{launcher.DEFAULT_PORT}"


def client_config(explicit_bootstrap: str | None = None) -> dict[str, str]:
    """librdkafka settings common to producers, consumers and admin clients."""
    config = {
        name[len(_PREFIX) :].lower().replace("_", "."): value
        for name, value in os.environ.items()
        if name.startswith(_PREFIX) and name not in _LAUNCHER_VARS
    }
    config["bootstrap.servers"] = bootstrap(explicit_bootstrap)
    return config
