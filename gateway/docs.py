"""The parts of the docs made from the code, so they cannot drift: written into the files
themselves (a reader on a code host sees them), and checked by a test.

In a page, the lines between `<!-- generated: NAME -->` and `<!-- end: NAME -->` are
the table NAME: `cli` from the argparse parsers, `metrics` from the processor's registry,
`limits` from core/limits.py. The manifest's version (conformance.json) is the package's.
`python -m gateway.docs` writes them all; `stale()` names the files that differ.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gateway import __version__
from gateway.core import limits
from gateway.processor.metrics import Metrics

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
MANIFEST = ROOT / "conformance.json"
_REGION = re.compile(
    r"^<!-- generated: ([a-z]+) -->\n(.*?)^<!-- end: \1 -->$", re.MULTILINE | re.DOTALL
)
_MARKER = re.compile(r"^<!-- generated: ([a-z]+) -->$", re.MULTILINE)
_HELP_COLUMNS = "100"

# What each limit bounds; the values are read from core/limits.py.
LIMITS: tuple[tuple[str, str], ...] = (
    ("MAX_REQUEST_BYTES", "an enqueue request as sent (bytes)"),
    ("MAX_EVENT_BYTES", "a job-state event as sent (bytes)"),
    ("MAX_RESULT_BYTES", "a job's `result`, as serialised (bytes)"),
    ("MAX_ERROR_BYTES", "one error of a failed attempt, as serialised (bytes)"),
    ("MAX_HEADERS_BYTES", "the headers of an input record together (bytes)"),
    ("MAX_ID_BYTES", "a request_id, job id or worker_id (characters)"),
    ("MAX_IDEMPOTENCY_KEY_CHARS", "an idempotency key (printable characters)"),
    ("MAX_JOB_RECORD_BYTES", "a job record as stored and published (bytes)"),
    ("MAX_RECORD_BYTES", "any record the processor writes: key, value and headers (bytes)"),
    ("MAX_DEPTH", "nesting of JSON values (levels)"),
    ("MAX_CRON_BYTES", "a cron's definition, template included, as JSON (bytes)"),
    ("MAX_SAFE_INTEGER", "the magnitude of an integer literal (larger ones are rounded by "
     "JSON parsers, so they are refused; a double such as 1e21 is taken)"),
    ("MAX_DURATION_DAYS", "a duration: a period, a retention, a lease, a relative time, a "
     "cron's @every (days)"),
    ("MIN_INSTANT", "the earliest instant (scheduled_at, expires_at)"),
    ("MAX_INSTANT", "the first instant past the latest"),
)  # fmt: skip


def cli_reference() -> str:
    """`gateway --help` and every command's `--help`, as the parsers print them."""
    from gateway import cli  # the CLI imports the whole gateway: only when asked

    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = _HELP_COLUMNS  # argparse wraps to the terminal's width
    try:
        sections = _help("gateway", cli.build_parser())
        sub = _Recording(prog="gateway").add_subparsers(metavar="COMMAND")
        for name in cli.COMMANDS:
            cli.command(name).register(sub)
        for name, parser in sub.choices.items():
            sections += _help(f"gateway {name}", parser)
            if isinstance(parser, _Recording) and parser.nested is not None:
                for action, nested in parser.nested.choices.items():
                    sections += _help(f"gateway {name} {action}", nested)
        return "\n".join(sections)
    finally:
        if before is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = before


class _Recording(argparse.ArgumentParser):
    """A parser that keeps the subparsers it is given, so nested commands can be listed."""

    nested: Any = None

    def add_subparsers(self, **kwargs: Any) -> Any:
        self.nested = super().add_subparsers(**kwargs)
        return self.nested


def _help(title: str, parser: argparse.ArgumentParser) -> list[str]:
    return ["", f"## {title}", "", "```text", parser.format_help().rstrip(), "```"]


_METRIC_KINDS = (("counter", "Counters"), ("gauge", "Gauges"), ("histogram", "Histograms"))


def metrics_table() -> str:
    """Every metric of the processor's registry: name as exposed, labels, meaning; one
    table per type, so that no table grows into a wall."""
    described = Metrics().described
    unknown = {kind for _, kind, _, _ in described} - {kind for kind, _ in _METRIC_KINDS}
    if unknown:
        raise ValueError(f"no metrics table for the type {', '.join(sorted(unknown))}")
    tables = []
    for kind, title in _METRIC_KINDS:
        rows = [f"**{title}**", "", "| Metric | Labels | Meaning |", "|---|---|---|"]
        for name, of_kind, documentation, labels in described:
            if of_kind == kind:
                shown = f"{name}_total" if kind == "counter" else name
                label_text = ", ".join(f"`{label}`" for label in labels) or "–"
                rows.append(f"| `{shown}` | {label_text} | {documentation} |")
        if len(rows) > 4:
            tables.append("\n".join(rows))
    return "\n\n".join(tables)


def limits_table() -> str:
    """Every limit of core/limits.py, with its value as the code has it."""
    rows = ["| Limit | Value | Bounds |", "|---|---|---|"]
    for name, meaning in LIMITS:
        value = getattr(limits, name)
        shown = f"{value:,}" if isinstance(value, int) else str(value)
        rows.append(f"| `{name}` | {shown} | {meaning} |")
    return "\n".join(rows)


TABLES: dict[str, Callable[[], str]] = {
    "cli": cli_reference,
    "metrics": metrics_table,
    "limits": limits_table,
}


def render(markdown: str) -> str:
    """The page with every generated region made anew from the code; an unknown name, or a
    region without its end, is an error, so a typo cannot leave a hole or a stale table."""

    def region(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in TABLES:
            raise ValueError(f"no generated table {name!r}; known: {', '.join(TABLES)}")
        return f"<!-- generated: {name} -->\n{TABLES[name]()}\n<!-- end: {name} -->"

    rendered = _REGION.sub(region, markdown)
    opened, closed = len(_MARKER.findall(markdown)), len(_REGION.findall(markdown))
    if opened != closed:
        raise ValueError("a `<!-- generated: NAME -->` line without its `<!-- end: NAME -->`")
    return rendered


def manifest(text: str) -> str:
    """conformance.json with the package's version as the implementation's."""
    document = json.loads(text)
    document["implementation"]["version"] = __version__
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def generated() -> dict[Path, str]:
    """Every file with parts made from the code, as the code makes it now."""
    files = {page: render(page.read_text()) for page in sorted(DOCS.glob("*.md"))}
    return {**files, MANIFEST: manifest(MANIFEST.read_text())}


def stale() -> list[Path]:
    """The files whose generated parts differ from what the code makes."""
    return [path for path, text in generated().items() if path.read_text() != text]


def main() -> int:
    """Write every generated part; print the files that changed."""
    for path, text in generated().items():
        if path.read_text() != text:
            path.write_text(text)
            print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
