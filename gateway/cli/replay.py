"""`gateway replay`: re-run the committed log through the core and compare the decisions."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from gateway import catalogue
from gateway.audit import FlipReport, LogRecord, ReplayReport, replay, replay_under_policy
from gateway.audit.kafka import ReadError, count_records, read_topics
from gateway.audit.replay import Position
from gateway.catalogue import Catalogue, CatalogueError
from gateway.cli.common import (
    EXIT_INVALID,
    EXIT_UNAVAILABLE,
    CommandError,
    add_kafka_arguments,
    kafka_asked,
    reachable_config,
)
from gateway.core import DEFAULT_RETENTION_MS, GatewayError, UniquePolicy, parse_policy
from gateway.core.times import parse_rfc3339
from gateway.processor.parsing import Limits

EXIT_DIFFERENT = 1
LONG_READ = 10_000  # records; shorter reads show no progress bar


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "replay",
        help="replay the committed log through the core and compare with the recorded decisions",
        description=(
            "Read the committed intake and requests records (job events included), "
            "decide them again over a fresh state in the order the processor did, and "
            "compare each decision with the one recorded for the same source record. "
            "Exits 1 when any differs. "
            "With --policy, decide every request under that policy instead and report which "
            "outcomes would flip."
        ),
    )
    add_log_arguments(p)
    p.add_argument(
        "--from", dest="from_time", metavar="ISO-TIME",
        help="compare only decisions at or after this RFC 3339 time; the state is still "
        "rebuilt from the start of the log (default: compare all)",
    )  # fmt: skip
    p.add_argument(
        "--policy", type=Path, metavar="FILE",
        help="decide every request under this JSON OJS UniquePolicy and report the flips "
        "(default: none, compare with the recorded decisions)",
    )  # fmt: skip
    p.add_argument(
        "--max-request-bytes", type=int, default=Limits.max_request_bytes,
        help="the processor's --max-request-bytes (default %(default)s)",
    )  # fmt: skip
    p.add_argument(
        "--show", type=int, default=100, metavar="N",
        help="list at most N differences or flips (default %(default)s)",
    )  # fmt: skip
    p.set_defaults(func=run)


def add_log_arguments(p: argparse.ArgumentParser) -> None:
    """Where the log is and how the processor read it; shared with `gateway explain`."""
    add_kafka_arguments(p)
    p.add_argument(
        "--retention-seconds", type=int, default=DEFAULT_RETENTION_MS // 1000,
        help="the processor's --retention-seconds (default %(default)s)",
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    cat = load_catalogue(args.namespace)
    if args.retention_seconds < 1:
        raise CommandError("--retention-seconds must be positive", EXIT_INVALID)
    try:
        limits = Limits(args.max_request_bytes, args.retention_seconds * 1000)
    except ValueError as exc:
        raise CommandError(str(exc), EXIT_INVALID) from exc
    policy = _policy(args.policy) if args.policy else None
    from_ms = _time(args.from_time) if args.from_time else None
    roles = ("intake", "requests", "decisions")
    logs = read_log(args.bootstrap, [cat.name(r) for r in roles])
    intake, requests, decisions = (logs[cat.name(r)] for r in roles)
    recorded = recorded_decisions(decisions)
    # The processor's warnings (re-routed requests, events not applied) are the
    # log's history here, not news.
    logging.getLogger("gateway.processor").setLevel(logging.ERROR)
    if policy is not None:
        print_flips(replay_under_policy(requests, recorded, policy, limits), args.show)
        return 0
    partitions = cat.by_role("requests").partitions
    report = replay(intake, requests, recorded, partitions, limits, from_ms)
    print_report(report, args.show)
    return EXIT_DIFFERENT if report.differences else 0


def load_catalogue(namespace: str | None) -> Catalogue:
    try:
        return catalogue.load(namespace=namespace)
    except CatalogueError as exc:
        raise CommandError(str(exc), EXIT_INVALID) from exc


def read_log(bootstrap: str | None, topics: Sequence[str]) -> dict[str, list[LogRecord]]:
    """Read the topics from the broker `bootstrap` names (see reachable_config), with a
    progress bar on stderr when the read is long."""
    client = reachable_config(bootstrap)
    try:
        with progress_bar(count_records(client, topics)) as advance:
            return read_topics(client, topics, advance)
    except ReadError as exc:
        raise CommandError(f"{exc} ({kafka_asked(bootstrap)})", EXIT_UNAVAILABLE) from exc


@contextmanager
def progress_bar(total: int) -> Iterator[Any]:
    console = Console(stderr=True)
    if total < LONG_READ or not console.is_terminal:
        yield None
        return
    columns = (TextColumn("reading the log"), BarColumn(), MofNCompleteColumn(),
               TimeRemainingColumn())  # fmt: skip
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task("read", total=total)
        yield lambda n: bar.advance(task, n)


def recorded_decisions(records: Sequence[LogRecord]) -> dict[Position, dict[str, Any]]:
    """The decision records by their source; a malformed one is an error, not a skip."""
    out: dict[Position, dict[str, Any]] = {}
    for record in records:
        try:
            value = orjson.loads(record.value or b"")
            source = value["source"]
            out[(source["topic"], source["partition"], source["offset"])] = value
        except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
            raise CommandError(
                f"{record.topic} offset {record.offset} is not a decision record: {exc}",
                EXIT_INVALID,
            ) from exc
    return out


def print_report(report: ReplayReport, show: int) -> None:
    share = 100.0 * report.identical / report.compared if report.compared else 100.0
    print(
        f"compared {report.compared} decisions: {report.identical} identical ({share:.1f}%), "
        f"{report.different} different, {len(report.differences)} differing fields; "
        f"{report.rerouted} re-routed requests skipped"
    )
    for diff in report.differences[:show]:
        print(
            f"  request {diff.request_id} ({_where(diff.source)}) {diff.field}: "
            f"recorded {_show(diff.recorded)}, replayed {_show(diff.replayed)}"
        )
    _more(len(report.differences), show)


def print_flips(report: FlipReport, show: int) -> None:
    share = 100.0 * len(report.flips) / report.replayed if report.replayed else 0.0
    print(
        f"replayed {report.replayed} requests under the policy: {len(report.flips)} decisions "
        f"would flip ({share:.1f}%), {report.replayed - len(report.flips)} unchanged; "
        f"{report.skipped} re-routed requests skipped"
    )
    for (was, now), count in sorted(report.transitions.items()):
        print(f"  {was} -> {now}: {count}")
    for flip in report.flips[:show]:
        print(
            f"  request {flip.request_id} ({_where(flip.source)}): {flip.recorded} -> "
            f"{flip.replayed} (job {flip.recorded_job_id} -> {flip.replayed_job_id})"
        )
    _more(len(report.flips), show)


def _more(count: int, show: int) -> None:
    if count > show:
        print(f"  ... and {count - show} more (--show N lists more)")


def _where(position: Position) -> str:
    return "{}[{}]@{}".format(*position)


def _show(value: Any) -> str:
    return orjson.dumps(value).decode()


def _policy(path: Path) -> UniquePolicy:
    try:
        raw: Mapping[str, Any] = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise CommandError(f"--policy {path}: {exc}", EXIT_INVALID) from exc
    policy = parse_policy(raw, "--policy")
    if isinstance(policy, GatewayError):
        raise CommandError(str(policy), EXIT_INVALID)
    return policy


def _time(text: str) -> int:
    ms = parse_rfc3339(text)
    if ms is None:
        raise CommandError(
            f"--from {text!r} is not an RFC 3339 time with a zone, e.g. 2026-02-12T10:00:00Z",
            EXIT_INVALID,
        )
    return ms
