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
