"""The docs cannot drift: the site builds with --strict (no broken link), its reference
tables come from the code and cover all of it, and the README stays a front door."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import gateway
from gateway import cli, docs
from gateway.core import limits
from gateway.processor.metrics import Metrics

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
# Derived or internal: stated by the limits they follow from.
NOT_TABLED = {"MS_PER_DAY", "MAX_DURATION_MS", "MIN_INSTANT_MS", "MAX_INSTANT_MS"}


def test_the_site_builds_strictly(tmp_path: Path):
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert built.returncode == 0, built.stdout + built.stderr
    cli_page = (tmp_path / "site" / "cli" / "index.html").read_text()
    assert "gateway kafka up" in cli_page and "usage: gateway enqueue" in cli_page


def test_the_committed_reference_is_what_the_code_generates():
    assert docs.stale() == [], "regenerate them: .venv/bin/python -m gateway.docs"


def test_the_package_and_the_manifest_have_one_version():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "gateway.__version__"}
    manifest = json.loads((ROOT / "conformance.json").read_text())
    assert manifest["implementation"]["version"] == gateway.__version__


def test_every_limit_is_in_the_table():
    public = {n for n in vars(limits) if re.fullmatch(r"(MAX|MIN)_[A-Z_]+", n)} - NOT_TABLED
    assert public == {name for name, _ in docs.LIMITS}
    table = docs.limits_table()
    assert f"{limits.MAX_REQUEST_BYTES:,}" in table and limits.MAX_INSTANT in table


def test_every_metric_and_command_is_in_its_table():
    table = docs.metrics_table()
    for name, kind, _, labels in Metrics().described:
        assert (f"`{name}_total`" if kind == "counter" else f"`{name}`") in table
        assert all(f"`{label}`" in table for label in labels)
    reference = docs.cli_reference()
    for name in cli.COMMANDS:
        assert f"## gateway {name}" in reference


def test_a_generated_region_is_made_anew_and_a_wrong_one_is_an_error():
    with pytest.raises(ValueError, match="no generated table"):
        docs.render("<!-- generated: nothing -->\n<!-- end: nothing -->\n")
    with pytest.raises(ValueError, match="without its"):
        docs.render("<!-- generated: limits -->\n| stale |\n")
    made = docs.render("text\n<!-- generated: limits -->\n| stale |\n<!-- end: limits -->\n")
    assert made.startswith("text\n<!-- generated: limits -->\n| Limit |")
    assert "| stale |" not in made and made.endswith("|\n<!-- end: limits -->\n")


def test_the_readme_is_a_front_door():
    assert len(README.splitlines()) <= 250
    for target in re.findall(r"\]\((docs/[^)#]+)", README):
        assert (ROOT / target).is_file(), target


# A paragraph, list item or table longer than this is a wall, not a paragraph to scan.
MAX_BLOCK_CHARS = 1_500
_FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
_ITEM = re.compile(r"^\s*([-*+]|\d+[.)])\s")


def blocks(markdown: str) -> list[str]:
    """The page's paragraphs, list items and tables as written, fenced code left out: a
    blank line ends a block, and each list item is a block of its own."""
    found: list[str] = []
    lines: list[str] = []
    fence = ""

    def close() -> None:
        if lines:
            found.append("\n".join(lines))
            lines.clear()

    for line in markdown.splitlines():
        marker = _FENCE.match(line)
        if fence:
            if marker and marker.group(1)[0] == fence[0] and len(marker.group(1)) >= len(fence):
                fence = ""
            continue
        if marker:
            close()
            fence = marker.group(1)
        elif not line.strip():
            close()
        else:
            if _ITEM.match(line):
                close()
            lines.append(line)
    close()
    return found


def test_blocks_are_paragraphs_items_and_tables_without_code():
    page = "A para\nwrapped.\n\n- one\n- two\n  more\n\n```\nx\n\ny\n```\n| a |\n|---|\n"
    assert blocks(page) == ["A para\nwrapped.", "- one", "- two\n  more", "| a |\n|---|"]


def test_no_paragraph_is_a_wall():
    pages = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
    walls = [
        f"{page.relative_to(ROOT)}: {len(block):,} characters, {' '.join(block.split()[:8])!r}"
        for page in pages
        for block in blocks(page.read_text())
        if len(block) > MAX_BLOCK_CHARS
    ]
    assert walls == [], "split them (at most 1,500 characters each):\n" + "\n".join(walls)


def test_the_history_route_names_every_kind_of_audit_record() -> None:
    from gateway.stage.kinds import Kind

    text = (ROOT / "docs" / "http.md").read_text()
    line = next(x for x in text.splitlines() if x.startswith("- its `source`, `at`, `kind`"))
    named = set(re.findall(r"`([a-z_]+)`", line.split(":", 1)[1]))
    assert named == {str(kind) for kind in Kind} | {"forwarded"}
