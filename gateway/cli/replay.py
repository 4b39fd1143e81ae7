"""`gateway replay`: re-run the committed log through the core and compare the decisions."""

from __future__ import annotations

import argparse
import logging
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import orjson

from gateway import catalogue
from gateway.audit import FlipReport, LogRecord, ReplayReport, replay_under_policy
from gateway.audit.findings import Position
from gateway.audit.kafka import ReadError
from gateway.audit.stream import default_processes, parts, read, records_in, replay_log
from gateway.audit.whatif import paired
from gateway.catalogue import Catalogue, CatalogueError
from gateway.cli.common import (
    EXIT_INVALID,
    EXIT_UNAVAILABLE,
    CommandError,
    add_audit_key_argument,
    add_kafka_arguments,
    audit_keys_of,
    kafka_asked,
    reachable_config,
)
from gateway.cli.progress import progress_bar
from gateway.core import DEFAULT_RETENTION_MS, GatewayError, UniquePolicy, parse_policy
from gateway.core.idempotency import DEFAULT_IDEMPOTENCY_MS
from gateway.core.times import parse_rfc3339
from gateway.stage.parsing import Limits

EXIT_DIFFERENT = 1
T = TypeVar("T")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "replay",
        help="replay the committed log through the core and compare with the recorded decisions",
        description=(
            "Stream the committed requests and intake records (job events, ticks and "
            "commands included), partition by partition, beside their audit trail on "
            "decisions, and decide each again in the order the processor did, from the "
            "state its audit record says it was decided from; compare what each writes "
            "with its recorded audit record. A window whose start is gone (retention) "
            "replays the same way. Every record of decisions is accounted for: what cannot "
            "be verified is counted, with why; an audit record missing, altered, out of "
            "order, misplaced on another partition, without input, beyond the last input or "
            "off its partition's chain is named by position. Exits 1 on any difference or "
            "finding. With --policy, decide again under that policy what the unique policy "
            "decided, keep as recorded what was decided before or beside it, and report "
            "which outcomes would flip."
        ),
    )
    add_log_arguments(p)
    p.add_argument(
        "--from", dest="from_time", metavar="ISO-TIME",
        help="replay from this RFC 3339 time on: each key starts from the state its first "
        "record in the window carries (default: from the oldest record kept)",
    )  # fmt: skip
    p.add_argument(
        "--to", dest="to_time", metavar="ISO-TIME",
        help="replay up to this RFC 3339 time (default: to the end seen at start)",
    )  # fmt: skip
    p.add_argument(
        "--partition", type=int, action="append", metavar="N",
        help="replay only this partition of requests; repeatable (default: all). The other "
        "partitions of decisions are still read for its records written there",
    )  # fmt: skip
    p.add_argument(
        "--processes", type=int, metavar="N",
        help="partitions replayed at once, one process each (default: the cores, "
        f"{default_processes()})",
    )  # fmt: skip
    p.add_argument(
        "--policy", metavar="FILE|JSON",
        help="decide again, under this OJS UniquePolicy (a JSON file, or the JSON itself), "
        "what the unique policy decided, and report the flips; what was decided before or "
        "beside it (invalid requests, idempotency keys, taken job ids, tenant and rate "
        "limits, pauses) is kept as recorded (default: none, compare with the recorded "
        "decisions)",
    )  # fmt: skip
    p.add_argument(
        "--max-request-bytes", type=int, default=Limits().max_request_bytes,
        help="the processor's --max-request-bytes (default %(default)s)",
    )  # fmt: skip
    p.add_argument(
        "--show", type=int, default=100, metavar="N",
        help="list at most N differences or flips (default %(default)s)",
    )  # fmt: skip
    add_audit_key_argument(p, sealing=False)
    p.set_defaults(func=run)


def add_log_arguments(p: argparse.ArgumentParser) -> None:
    """Where the log is and how the processor read it; shared with `gateway explain`."""
    add_kafka_arguments(p)
    p.add_argument(
        "--retention-seconds", type=int, default=DEFAULT_RETENTION_MS // 1000,
        help="the processor's --retention-seconds (default %(default)s)",
    )  # fmt: skip
    p.add_argument(
        "--idempotency-seconds", type=int, default=DEFAULT_IDEMPOTENCY_MS // 1000,
        help="the processor's --idempotency-seconds (default %(default)s)",
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    cat = load_catalogue(args.namespace)
    if args.retention_seconds < 1:
        raise CommandError("--retention-seconds must be positive", EXIT_INVALID)
    try:
        limits = Limits(
            args.max_request_bytes, args.retention_seconds * 1000, args.idempotency_seconds * 1000
        )
    except ValueError as exc:
        raise CommandError(str(exc), EXIT_INVALID) from exc
    from_ms = _time(args.from_time, "--from") if args.from_time else None
    to_ms = _time(args.to_time, "--to") if args.to_time else None
    if args.processes is not None and args.processes < 1:
        raise CommandError("--processes must be at least 1", EXIT_INVALID)
    if args.policy:
        # What-if merges every partition by time in one process: neither can be chosen.
        for flag, given in (("--partition", args.partition), ("--processes", args.processes)):
            if given is not None:
                raise CommandError(f"{flag} is not taken with --policy: what-if decides every "
                                   "partition together, merged by time", EXIT_INVALID)  # fmt: skip
        return what_if(args, cat, limits, _policy(args.policy), from_ms, to_ms)
    keys = audit_keys_of(args)
    topics = {role: cat.name(role) for role in ("intake", "requests", "decisions")}
    client = reachable_config(args.bootstrap)
    partitions = cat.by_role("requests").partitions
    asked = args.partition or range(partitions)
    wrong = sorted(set(asked) - set(range(partitions)))
    if wrong:
        raise CommandError(
            f"--partition {wrong[0]}: requests has partitions 0 to {partitions - 1}", EXIT_INVALID
        )
    try:
        work = parts(client, topics, limits, asked, from_ms, to_ms, args.show, keys)
        with progress_bar(sum(records_in(part) for part in work), "replaying") as advance:
            report = replay_log(work, args.processes or default_processes(), advance)
    except ReadError as exc:
        raise CommandError(f"{exc} ({kafka_asked(args.bootstrap)})", EXIT_UNAVAILABLE) from exc
    print_report(report, args.show)
    return EXIT_DIFFERENT if report.differences or report.findings else 0


def what_if(
    args: argparse.Namespace,
    cat: Catalogue,
    limits: Limits,
    policy: UniquePolicy,
    from_ms: int | None,
    to_ms: int | None,
) -> int:
    """Every partition of requests streamed beside its decisions, merged by time."""
    client = reachable_config(args.bootstrap)
    # The processor's warnings (re-routed requests, events not applied) are the
    # log's history here, not news.
    logging.getLogger("gateway.processor").setLevel(logging.ERROR)
    try:
        work = parts(client, {r: cat.name(r) for r in ("intake", "requests", "decisions")},
                     limits, range(cat.by_role("requests").partitions),
                     from_ms, to_ms, args.show)  # fmt: skip
        with progress_bar(sum(records_in(part) for part in work), "replaying") as advance:
            logs = [paired(_counted(read(part, "requests", part.partition, part.requests),
                                    advance),
                           read(part, "decisions", part.partition, part.decisions))
                    for part in work]  # fmt: skip
            report = replay_under_policy(logs, policy, limits)
    except ReadError as exc:
        raise CommandError(f"{exc} ({kafka_asked(args.bootstrap)})", EXIT_UNAVAILABLE) from exc
    print_flips(report, args.show)
    return 0


def _counted(records: Iterator[LogRecord], advance: Any) -> Iterator[LogRecord]:
    """The records, the progress bar advanced every thousand."""
    for n, record in enumerate(records, 1):
        yield record
        if advance is not None and n % 1_000 == 0:
            advance(1_000)


def load_catalogue(namespace: str | None) -> Catalogue:
    try:
        return catalogue.load(namespace=namespace)
    except CatalogueError as exc:
        raise CommandError(str(exc), EXIT_INVALID) from exc


def print_report(report: ReplayReport, show: int) -> None:
    share = 100.0 * report.verified / report.compared if report.compared else 100.0
    print(
        f"read {report.records} records; decided {report.compared} again: {report.verified} "
        f"verified identical ({share:.1f}%), {report.different} different; "
        f"{report.rerouted} re-routed requests (decided where they landed)"
    )
    _reasons("outside the window, read as its context (expected): {}", report.context())
    _reasons("could not verify {}:", report.unchecked())
    if report.findings:
        print(f"the audit trail shows {len(report.findings)} problems:")
    for finding in report.findings[:show]:
        print(f"  {finding.kind}: {_where(finding.position)}: {finding.detail}")
    _more(len(report.findings), show)
    for diff in report.differences[:show]:
        print(
            f"  different: request {diff.request_id} ({_where(diff.source)}) {diff.field}: "
            f"recorded {_show(diff.recorded)}, replayed {_show(diff.replayed)}"
        )
    _more(len(report.differences), show)
    print(verdict(report))


def verdict(report: ReplayReport) -> str:
    """The last line: whether anything is wrong, in words a user acts on."""
    problems = [f"{n} {what}" for n, what in (
        (report.different, "decided differently"),
        (len(report.findings), "problems in the audit trail"),
    ) if n]  # fmt: skip
    if problems:
        return f"result: WRONG: {', '.join(problems)} (exit 1)"
    unchecked = sum(report.unchecked().values())
    if unchecked:
        return (
            f"result: nothing wrong found; {unchecked} records could not be verified, for the "
            "reasons above (expected after retention; else look at them)"
        )
    return "result: nothing wrong found: every decision decided again is identical"


def print_flips(report: FlipReport, show: int) -> None:
    share = 100.0 * len(report.flips) / report.replayed if report.replayed else 0.0
    print(
        f"replayed {report.replayed} requests under the policy: {len(report.flips)} decisions "
        f"would flip ({share:.1f}%), {report.replayed - len(report.flips)} unchanged; "
        f"{report.skipped} re-routed requests skipped"
    )
    for (was, now), count in sorted(report.transitions.items()):
        print(f"  {was} -> {now}: {count}")
    _reasons("kept as recorded {} (decided before or beside the unique policy):", report.kept)
    _rows(report.flips, show, lambda flip: (
        f"  request {flip.request_id} ({_where(flip.source)}): {flip.recorded} -> "
        f"{flip.replayed} (job {flip.recorded_job_id} -> {flip.replayed_job_id})"
    ))  # fmt: skip
    if report.other_jobs:
        print(f"{len(report.other_jobs)} unchanged decisions would name another job:")
    _rows(report.other_jobs, show, lambda other: (
        f"  request {other.request_id} ({_where(other.source)}): {other.recorded} "
        f"(job {other.recorded_job_id} -> {other.replayed_job_id})"
    ))  # fmt: skip


def _reasons(head: str, counts: Counter[str]) -> None:
    """`head` with the total, then a line a reason, the most frequent first; none if none."""
    if counts:
        print(head.format(sum(counts.values())))
    for reason, count in counts.most_common():
        print(f"  {count}: {reason}")


def _rows(rows: Sequence[T], show: int, line: Callable[[T], str]) -> None:
    """The first `show` rows, a line each, and how many more there are."""
    for row in rows[:show]:
        print(line(row))
    _more(len(rows), show)


def _more(count: int, show: int) -> None:
    if count > show:
        print(f"  ... and {count - show} more (--show N lists more)")


def _where(position: Position) -> str:
    return "{}[{}]@{}".format(*position)


def _show(value: Any) -> str:
    return orjson.dumps(value).decode()


def _policy(given: str) -> UniquePolicy:
    """The policy `--policy` gives: its JSON (an object), or a file that holds it."""
    inline = given.lstrip().startswith("{")
    try:
        raw: Mapping[str, Any] = orjson.loads(given if inline else Path(given).read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise CommandError(f"--policy {given}: {exc}", EXIT_INVALID) from exc
    policy = parse_policy(raw, "--policy")
    if isinstance(policy, GatewayError):
        raise CommandError(str(policy), EXIT_INVALID)
    return policy


def _time(text: str, option: str) -> int:
    ms = parse_rfc3339(text)
    if ms is None:
        raise CommandError(
            f"{option} {text!r} is not an RFC 3339 time with a zone, e.g. 2026-02-12T10:00:00Z",
            EXIT_INVALID,
        )
    return ms
