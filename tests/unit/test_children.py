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


def _run(script: str) -> subprocess.CompletedProcess[str]:
    """`script` in a Python of its own, as the gateway's children are started."""
    return subprocess.run(
        [*python_module("gateway.children")[:2], "-c", script], capture_output=True, text=True,
        timeout=60, check=False,
    )  # fmt: skip


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
    ran = _run(script)
    assert (ran.returncode, ran.stdout, ran.stderr) == (0, "ok\n", "")


def test_an_interrupting_stop_is_noted_even_when_its_keyboardinterrupt_is_dropped() -> None:
    """Before any child, a signal cuts short what runs; Python drops a KeyboardInterrupt
    raised inside a callback (here a finaliser, as an import lock's), yet the stop stands."""
    script = (
        "import gc, os, signal, weakref\n"
        "from gateway.children import Stop\n"
        "stop = Stop().install(interrupting=True)\n"
        "try:\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    raise SystemExit('not interrupted')\n"
        "except KeyboardInterrupt:\n"
        "    assert stop.requested\n"
        "late = Stop().install(interrupting=True)\n"
        "class Held: pass\n"
        "held = Held()\n"
        "weakref.finalize(held, os.kill, os.getpid(), signal.SIGINT)\n"
        "del held; gc.collect()\n"
        "for _ in range(1000): pass\n"
        "assert late.requested\n"
        "late.interrupting = False\n"
        "os.kill(os.getpid(), signal.SIGTERM)\n"
        "print('ok')\n"
    )
    ran = _run(script)
    assert (ran.returncode, ran.stdout) == (0, "ok\n"), ran.stderr
