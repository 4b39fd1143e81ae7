"""`gateway explain`: every decision and job event of a job's key, with the reason for each."""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence

import orjson

from gateway import wire
from gateway.audit import HistoryItem, LogRecord, explain_history
from gateway.audit.explain import find_key
from gateway.cli.common import EXIT_INVALID, CommandError, kafka_asked
from gateway.cli.replay import add_log_arguments, load_catalogue, read_log
from gateway.core.times import parse_rfc3339

_KEY = re.compile(r"[0-9a-f]{64}")
EXIT_NOT_FOUND = 1


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "explain",
        help="show every decision and job event for a job or uniqueness key, with reasons",
        description=(
            "Print, in log order, every decision and job-state event under the uniqueness "
            "key of a job (give its id) or under a key (64 hex digits), with the policy "
            "applied and why each outcome followed. Exits 1 if nothing mentions it."
        ),
    )
    p.add_argument(
        "target", metavar="JOB_ID|UNIQUE_KEY",
        help="a job id, or a uniqueness key (64 hex digits, as `gateway fingerprint` prints)",
    )  # fmt: skip
    add_log_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.retention_seconds < 1:
        raise CommandError("--retention-seconds must be positive", EXIT_INVALID)
    cat = load_catalogue(args.namespace)
    decisions_topic, requests_topic = cat.name("decisions"), cat.name("requests")
    logs = read_log(args.bootstrap, [decisions_topic, requests_topic])
    items = history_items(logs[decisions_topic], logs[requests_topic])
    target = args.target.strip().lower()
    key = target if _KEY.fullmatch(target) else find_key(items, target)
    mine = [i for i in items if key and i.record.get("unique_key") == key]
    if not mine:
        raise CommandError(
            f"no decision or job event mentions {args.target} in {decisions_topic} and "
            f"{requests_topic} of {kafka_asked(args.bootstrap)}; if `gateway up` printed "
            "another bootstrap, name it with --bootstrap (and its --namespace)",
            EXIT_NOT_FOUND,
        )
    decisions = sum(i.kind == "decision" for i in mine)
    print(f"unique_key {key}: {decisions} decisions, {len(mine) - decisions} job events")
    timeline = with_clock(mine, logs[requests_topic])
    for line in explain_history(timeline, args.retention_seconds * 1000):
        print(line)
    return 0


def history_items(
    decisions: Sequence[LogRecord], requests: Sequence[LogRecord]
) -> list[HistoryItem]:
    """Decisions and job events, per partition in the order the processor handled them.

    Both stand at their place in the `requests` log: a decision at its
    request's offset (its record's source), an event at its own.
    """
    items: list[HistoryItem] = []
    for record in decisions:
        value = _json(record.value)
        source = value.get("source") or {}
        decided_at = parse_rfc3339(str(value.get("decided_at")))
        if not value.get("unique_key") or decided_at is None:
            continue  # decided at intake: no key, so in no key's history
        position = (str(source.get("topic")), int(source["partition"]), int(source["offset"]))
        items.append(HistoryItem("decision", decided_at, position, value))
    for record in requests:
        if record.source.is_job_event:
            items.append(
                HistoryItem("event", record.timestamp_ms, record.position, _json(record.value))
            )
    return sorted(items, key=lambda i: (i.position[1], i.position[2]))


def with_clock(mine: Sequence[HistoryItem], requests: Sequence[LogRecord]) -> list[HistoryItem]:
    """The key's items among every other record of its partitions (ticks, other keys):
    each moves the partition's time on, and with it the leases of the key's jobs; a queue
    command (pause, resume) also says whether the key's jobs may be claimed."""
    taken = {i.position for i in mine}
    partitions = {i.position[1] for i in mine}
    clock = [
        HistoryItem("queue", r.timestamp_ms, r.position, r.value or b"")
        if r.headers.get(wire.KIND_HEADER) == wire.QUEUE_COMMAND
        else HistoryItem("time", r.timestamp_ms, r.position, {})
        for r in requests
        if r.partition in partitions and r.position not in taken
    ]
    return sorted([*mine, *clock], key=lambda i: (i.position[1], i.position[2]))


def _json(value: bytes | None) -> dict:
    try:
        parsed = orjson.loads(value or b"")
    except orjson.JSONDecodeError:
        return {}
    return parsed if isinstance(parsed, dict) else {}
