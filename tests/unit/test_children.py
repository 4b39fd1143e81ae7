"""The gateway's child processes run the installed gateway, whatever folder they start in."""

from __future__ import annotations

import subprocess
from pathlib import Path

from gateway.children import python_module


def test_a_gateway_folder_in_the_working_directory_is_never_imported(tmp_path: Path) -> None:
    impostor = tmp_path / "gateway"
    impostor.mkdir()
    (impostor / "__init__.py").write_text("raise SystemExit('the impostor ran')\n")
    ran = subprocess.run(
        python_module("gateway.children"), cwd=tmp_path, capture_output=True, text=True,
        timeout=60, check=False,
    )  # fmt: skip
    assert (ran.returncode, ran.stderr) == (0, "")


def test_a_signal_is_a_stop_noted_with_its_time_even_if_sigint_was_ignored() -> None:
    """SIGINT and SIGTERM each set the flag; an inherited ignored SIGINT is taken too."""
    script = (
        "import os, signal, time\n"
        "from gateway.children import Stop\n"
        "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "for sig in (signal.SIGINT, signal.SIGTERM):\n"
        "    stop = Stop().install()\n"
        "    before = time.monotonic()\n"
        "    os.kill(os.getpid(), sig)\n"
        "    assert stop.requested and before <= stop.at <= time.monotonic(), sig\n"
        "    stop.request()\n"
        "    assert stop.at <= time.monotonic()\n"
        "print('ok')\n"
    )
    ran = subprocess.run(
        [*python_module("gateway.children")[:2], "-c", script], capture_output=True, text=True,
        timeout=60, check=False,
    )  # fmt: skip
    assert (ran.returncode, ran.stdout, ran.stderr) == (0, "ok\n", "")
