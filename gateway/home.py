"""The gateway's home on this machine (config.py says what it holds): a module of its
own, so the local cluster's files (broker/install.py) and the configuration that finds
the running cluster (config.py) both stand on it."""

from __future__ import annotations

import os
from pathlib import Path


def gateway_home() -> Path:
    """Where the gateway keeps its files: $GATEWAY_HOME, else ~/.cache/unique-jobs-gateway."""
    env = os.environ.get("GATEWAY_HOME")
    return Path(env) if env else Path.home() / ".cache" / "unique-jobs-gateway"
