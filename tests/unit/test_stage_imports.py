"""The per-record stage runs without Kafka, a store or the audit: the processor and replay
run the same code over their own state, and hand it what it needs (stage/context.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import gateway.stage

STAGE = Path(gateway.stage.__file__).parent
FORBIDDEN = ("confluent_kafka", "rocksdict", "gateway.processor", "gateway.audit")


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


@pytest.mark.parametrize("path", sorted(STAGE.glob("*.py")), ids=lambda path: path.name)
def test_a_stage_module_imports_no_runtime(path: Path) -> None:
    wrong = [name for name in _imports(path) if name.startswith(FORBIDDEN)]
    assert wrong == []
    if path.name != "dedup.py":  # the handlers are given what they use, never the stage
        assert "gateway.stage.dedup" not in _imports(path)
