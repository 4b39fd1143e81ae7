"""Configuration: the gateway's home directory, and the Kafka client settings shared by
every client the gateway makes.

The home ($GATEWAY_HOME, else ~/.cache/unique-jobs-gateway) holds what the
gateway keeps on this machine: Kafka's jars and the local cluster (the
launcher), processor state and the HTTP views.

The client settings have one place: a TOML file named by $GATEWAY_CONFIG, whose
`[kafka]` table holds librdkafka settings by their own names
(`"security.protocol" = "SASL_SSL"`, `"sasl.mechanism"`, `"ssl.ca.location"`,
...), and GATEWAY_KAFKA_<NAME> environment variables, which win over the file
(underscores read as dots: GATEWAY_KAFKA_SASL_USERNAME sets sasl.username).

The bootstrap address comes from `--bootstrap`, else $KAFKA_BOOTSTRAP, else
the settings' bootstrap.servers, else the local cluster started by
`gateway kafka up`, else 127.0.0.1:9092.
"""

from __future__ import annotations

import logging
import os
import tomllib
from pathlib import Path
from typing import Any

_PREFIX = "GATEWAY_KAFKA_"
# The processor's transactional producer: how long it holds records to send them
# together (librdkafka's linger.ms). Its records are readable only once their
# transaction commits, so with early answers holding them up to a commit interval
# delays no caller, and fewer, larger produce requests cost librdkafka and the broker
# less per record. Answers sent with the commit (`--answers committed`) wait for
# what it then sends: librdkafka's 5 ms answers them sooner (README, Linger).
DEFAULT_LINGER_MS = 100
COMMITTED_LINGER_MS = 5
MAX_LINGER_MS = 1_000
_LAUNCHER_VARS = {"GATEWAY_KAFKA_VERSION"}
KAFKA_LOGGER = logging.getLogger("librdkafka")


class ConfigError(Exception):
    """The configuration file is missing or malformed."""


def gateway_home() -> Path:
    """Where the gateway keeps its files: $GATEWAY_HOME, else ~/.cache/unique-jobs-gateway."""
    env = os.environ.get("GATEWAY_HOME")
    return Path(env) if env else Path.home() / ".cache" / "unique-jobs-gateway"


def client_config(explicit_bootstrap: str | None = None) -> dict[str, Any]:
    """librdkafka settings common to producers, consumers and admin clients.

    librdkafka's own log lines go to the `librdkafka` logger, so they come out
    as JSON like every other line, instead of raw `%3|...|FAIL|...` on stderr.
    """
    config: dict[str, Any] = (
        {"logger": KAFKA_LOGGER}
        | _file_settings()
        | {
            name[len(_PREFIX) :].lower().replace("_", "."): value
            for name, value in os.environ.items()
            if name.startswith(_PREFIX) and name not in _LAUNCHER_VARS
        }
    )
    config["bootstrap.servers"] = (
        explicit_bootstrap
        or os.environ.get("KAFKA_BOOTSTRAP")
        or config.get("bootstrap.servers")
        or _local_bootstrap()
    )
    return config


def _local_bootstrap() -> str:
    # Imported here: the launcher takes its home from this module.
    from gateway.broker import launcher

    cluster = launcher.load_cluster()
    if cluster is not None and launcher.running_nodes(cluster):
        return cluster.bootstrap
    return f"127.0.0.1:{launcher.DEFAULT_PORT}"


def _file_settings() -> dict[str, str]:
    path = os.environ.get("GATEWAY_CONFIG")
    if not path:
        return {}
    try:
        raw = tomllib.loads(Path(path).read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read GATEWAY_CONFIG {path}: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"GATEWAY_CONFIG {path}: {exc}") from exc
    kafka = raw.get("kafka", {})
    unknown = set(raw) - {"kafka"}
    if unknown or not isinstance(kafka, dict):
        raise ConfigError(
            f"GATEWAY_CONFIG {path}: only a [kafka] table of librdkafka settings is read"
            + (f"; unknown: {sorted(unknown)}" if unknown else "")
        )
    return {str(k): _setting(v) for k, v in kafka.items()}


def _setting(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
