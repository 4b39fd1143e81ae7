"""Run the real `gateway` command in a subprocess, as a user would."""

from __future__ import annotations

import subprocess
import sys


def gateway(
    *args: str, input: str | None = None, timeout: float = 180
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gateway", *args],
        capture_output=True, text=True, input=input, timeout=timeout,
    )  # fmt: skip
