"""Configuration: the gateway's home directory, and the Kafka client settings shared by
every client the gateway makes.

The home ($GATEWAY_HOME, else ~/.cache/unique-jobs-gateway) holds what the
gateway keeps on this machine: Kafka's jars and the local cluster (the
launcher), processor state, the HTTP views, the audit indexes of `gateway
explain`, and while `gateway up` runs, its broker's address (up.json).

The client settings have one place: a TOML file named by $GATEWAY_CONFIG, whose
`[kafka]` table holds librdkafka settings by their own names
(`"security.protocol" = "SASL_SSL"`, `"sasl.mechanism"`, `"ssl.ca.location"`,
...), and GATEWAY_KAFKA_<NAME> environment variables, which win over the file
(underscores read as dots: GATEWAY_KAFKA_SASL_USERNAME sets sasl.username).

The bootstrap address comes from `--bootstrap`, else $KAFKA_BOOTSTRAP, else
the settings' bootstrap.servers, else the broker of the `gateway up` running
with this home (it records it in up.json), else the local cluster started by
`gateway kafka up`, else 127.0.0.1:9092. `bootstrap_of` says which.
"""

from __future__ import annotations

import json
import logging
import os
import tomllib
from pathlib import Path
from typing import Any

from gateway import logs
from gateway.home import gateway_home

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
# The processor's consumer: how long the broker may hold a fetch to fill it (librdkafka's
# fetch.wait.max.ms, with a fetch.min.bytes that a fetch below full load never reaches).
# 0, the default: librdkafka's own settings, a fetch returned as soon as a record is there,
# so a lone request waits for nothing. Above 0, a steady load below full costs the processor
# less CPU (fewer, fuller fetches) and every answer up to that much more latency
# (docs/processor.md, Fetch wait).
DEFAULT_FETCH_WAIT_MS = 0
MAX_FETCH_WAIT_MS = 500
FETCH_MIN_BYTES = 1_000_000
_LAUNCHER_VARS = {"GATEWAY_KAFKA_VERSION"}
KAFKA_LOGGER = logging.getLogger("librdkafka")
KAFKA_LOGGER.addFilter(logs.BrokerStarting())


class ConfigError(Exception):
    """The configuration file is missing or malformed."""


def client_config(explicit_bootstrap: str | None = None) -> dict[str, Any]:
    """librdkafka settings common to producers, consumers and admin clients.

    librdkafka's own log lines go to the `librdkafka` logger, so they come out
    as JSON like every other line, instead of raw `%3|...|FAIL|...` on stderr.
    """
    config = _settings()
    config["bootstrap.servers"] = _bootstrap(explicit_bootstrap, config)[0]
    return config


def bootstrap_of(explicit_bootstrap: str | None = None) -> tuple[str, str]:
    """The bootstrap address client_config uses, and where it comes from, in words a
    message can name (`$KAFKA_BOOTSTRAP`, `the running gateway up`, ...)."""
    return _bootstrap(explicit_bootstrap, _settings())


def _settings() -> dict[str, Any]:
    return (
        {"logger": KAFKA_LOGGER}
        | _file_settings()
        | {
            name[len(_PREFIX) :].lower().replace("_", "."): value
            for name, value in os.environ.items()
            if name.startswith(_PREFIX) and name not in _LAUNCHER_VARS
        }
    )


def _bootstrap(explicit: str | None, settings: dict[str, Any]) -> tuple[str, str]:
    if explicit:
        return explicit, "--bootstrap"
    if os.environ.get("KAFKA_BOOTSTRAP"):
        return os.environ["KAFKA_BOOTSTRAP"], "$KAFKA_BOOTSTRAP"
    if settings.get("bootstrap.servers"):
        return str(settings["bootstrap.servers"]), "bootstrap.servers in $GATEWAY_CONFIG"
    up = running_up()
    if up is not None:
        return up[0], f"the running gateway up (pid {up[1]})"
    # Imported here: the launcher takes its home from this module.
    from gateway.broker import launcher

    cluster = launcher.load_cluster()
    if cluster is not None and launcher.running_nodes(cluster):
        return cluster.bootstrap, "the running local cluster (gateway kafka up)"
    return f"127.0.0.1:{launcher.DEFAULT_PORT}", "the default"


# -- the running `gateway up` ---------------------------------------------------------

UP_FILE = "up.json"


def record_up(bootstrap: str, url: str | None = None, decisions: str | None = None) -> None:
    """`gateway up` notes its broker, so other commands with this home find it, and its
    HTTP binding's `url` with the `decisions` topic it serves, so `gateway explain` asks
    the audit index that binding keeps."""
    home = gateway_home()
    home.mkdir(parents=True, exist_ok=True)
    tmp = home / f".{UP_FILE}.{os.getpid()}"
    record = {"bootstrap": bootstrap, "pid": os.getpid(), "url": url, "decisions": decisions}
    tmp.write_text(json.dumps(record))
    tmp.replace(home / UP_FILE)


def forget_up() -> None:
    """`gateway up` is stopping: its record goes, unless another `up` wrote its own since."""
    if _up_record().get("pid") == os.getpid():
        (gateway_home() / UP_FILE).unlink(missing_ok=True)


def running_up() -> tuple[str, int] | None:
    """The broker and pid of the `gateway up` running with this home, or None when none
    runs (a record left by one that was killed names a process that is gone)."""
    record = _up_record()
    pid = record.get("pid")
    if not isinstance(pid, int) or not isinstance(record.get("bootstrap"), str):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # it runs, as another user
    return str(record["bootstrap"]), pid


def up_binding(bootstrap: str, decisions: str) -> str | None:
    """The URL of the running `gateway up`'s HTTP binding when that `up` uses the broker
    at `bootstrap` and serves `decisions`, else None."""
    record = _up_record()
    up = running_up()
    url = record.get("url")
    if up is None or up[0] != bootstrap or record.get("decisions") != decisions:
        return None
    return url if isinstance(url, str) else None


def _up_record() -> dict[str, Any]:
    try:
        record = json.loads((gateway_home() / UP_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


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
