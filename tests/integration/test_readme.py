"""The README's front door, run as a new user would: every shell block with promised
outputs (`# ⇒ text` under a command) runs against `gateway up`, in order, in one shell,
and each command's output must hold what the README promises."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from tests.integration.harness import apply_topics

pytestmark = pytest.mark.kafka

ROOT = Path(__file__).resolve().parents[2]
PROMISE = "# ⇒ "
_BLOCK = re.compile(r"```sh\n(.*?)```", re.DOTALL)
_PYTHON = re.compile(r"```python\n(.*?)```", re.DOTALL)


def promised_commands(readme: str, holding: str = "") -> list[tuple[str, str | None]]:
    """(command, what its output must hold or None) in README order, from the shell blocks
    that promise an output (and hold `holding`); a command's continuation lines (ending in
    `\\`) are joined."""
    steps: list[tuple[str, str | None]] = []
    for block in _BLOCK.findall(readme):
        if PROMISE not in block or holding not in block:
            continue
        command: list[str] = []
        for line in block.splitlines():
            if line.startswith(PROMISE):
                last, _ = steps.pop()
                steps.append((last, line[len(PROMISE) :].strip()))
                continue
            command.append(line)
            if not line.endswith("\\"):
                steps.append(("\n".join(command), None))
                command = []
    return steps


def test_the_readme_lists_its_promises():
    steps = promised_commands((ROOT / "README.md").read_text())
    assert sum(expected is not None for _, expected in steps) >= 5
    assert any("explain" in command for command, _ in steps)


def test_the_quick_start_gives_what_it_promises(kafka_bootstrap: str, tmp_path: Path):
    namespace = f"t{uuid.uuid4().hex[:10]}"
    apply_topics(kafka_bootstrap, namespace)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # A new user's shells: the CLI finds the broker of the running `gateway up` by itself.
    env = {k: v for k, v in os.environ.items() if k != "KAFKA_BOOTSTRAP"}
    env |= {"GATEWAY_HOME": str(tmp_path / "home"), "GATEWAY_NAMESPACE": namespace}
    gateway = str(Path(sys.executable).parent / "gateway")
    with (tmp_path / "up.log").open("wb") as log:
        up = subprocess.Popen(
            [gateway, "up", "--bootstrap", kafka_bootstrap, "--namespace", namespace,
             "--http-port", str(port), "--processes", "1",
             "--state-dir", str(tmp_path / "state")],
            env=env, stdout=subprocess.DEVNULL, stderr=log,
        )  # fmt: skip
    try:
        _wait_healthy(port, up, tmp_path / "up.log")
        readme = (ROOT / "README.md").read_text()
        _run(promised_commands(readme), port, gateway, tmp_path, env)
        # A worker's turn again, now that the gateway holds other jobs and its own last
        # turn's: it gives the same.
        _run(promised_commands(readme, "workers/fetch"), port, gateway, tmp_path, env)
        # The SDK's snippet, as printed: it finds the running `gateway up` by itself too.
        [snippet] = [b for b in _PYTHON.findall(readme) if "from gateway.sdk import Client" in b]
        sdk = subprocess.run([sys.executable, "-c", snippet], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=120)  # fmt: skip
        assert sdk.returncode == 0 and sdk.stdout.startswith("accepted "), sdk.stdout + sdk.stderr
    finally:
        up.send_signal(signal.SIGINT)
        try:
            up.wait(timeout=60)
        except subprocess.TimeoutExpired:
            up.kill()


def _run(
    steps: list[tuple[str, str | None]], port: int, gateway: str, cwd: Path, env: dict[str, str]
) -> None:
    """Run the steps in one shell; each output must hold what the README promises."""
    script = ["set -u"]
    for n, (command, _) in enumerate(steps):
        command = command.replace("localhost:8080", f"localhost:{port}")
        command = command.replace(".venv/bin/gateway", gateway)
        script += [f"printf '\\n@@ {n}\\n'", command]
    done = subprocess.run(
        ["bash", "-c", "\n".join(script)], cwd=cwd, env=env,
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    outputs = re.split(r"\n@@ \d+\n", done.stdout)[1:]
    assert len(outputs) == len(steps), done.stdout + done.stderr
    for (command, expected), output in zip(steps, outputs, strict=True):
        if expected is not None:
            assert expected in output, f"{command}\n gave\n{output}\n{done.stderr}"


def _wait_healthy(port: int, up: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert up.poll() is None, log.read_text()
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/ojs/v1/health", timeout=2):
                return
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"gateway up was not healthy in time:\n{log.read_text()}")
