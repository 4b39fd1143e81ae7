"""The reference tables the docs site shows, made from the code so they cannot drift.

`mkdocs build` loads this module as a hook (mkdocs.yml): on every page a line
`<!-- generated: NAME -->` becomes the table NAME: `cli` from the argparse
parsers, `metrics` from the processor's registry, `limits` from core/limits.py.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable
from typing import Any

from gateway.core import limits
from gateway.processor.metrics import Metrics

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
        for module in cli.COMMANDS:
            module.register(sub)
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


def metrics_table() -> str:
    """Every metric of the processor's registry: name as exposed, type, labels, meaning."""
    rows = ["| Metric | Type | Labels | Meaning |", "|---|---|---|---|"]
    for name, kind, documentation, labels in Metrics().described:
        shown = f"{name}_total" if kind == "counter" else name
        label_text = ", ".join(f"`{label}`" for label in labels) or "–"
        rows.append(f"| `{shown}` | {kind} | {label_text} | {documentation} |")
    return "\n".join(rows)


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
    """The page with every generated marker replaced by its table; an unknown name is an
    error, so a typo breaks the build instead of leaving a hole."""

    def table(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in TABLES:
            raise ValueError(f"no generated table {name!r}; known: {', '.join(TABLES)}")
        return TABLES[name]()

    return _MARKER.sub(table, markdown)


def on_page_markdown(markdown: str, **_: Any) -> str:
    """The mkdocs hook."""
    return render(markdown)
