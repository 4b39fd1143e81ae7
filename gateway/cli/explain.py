"""`gateway explain`: a job's or a unique key's audit records, each with why it came out so.

A running gateway already keeps an index of where each key's records are on
`decisions` (audit/key_history.py): explain asks its history route when one is
named (--url, $GATEWAY_URL) or `gateway up` runs with this home for the same broker
and topic (history_client.py), and answers at once. Otherwise it keeps an index of
its own (audit/index.py), brought up to date at each run (the first reads the topic
once, with a progress line; later runs read what is new), then reads exactly the
key's records (audit/follow.py). A record its seal, its partition or its chain
refutes is marked so (audit/verify.py), by the gateway asked or here.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaException
from confluent_kafka.admin import AdminClient

from gateway import catalogue, config
from gateway.audit import follow, history
from gateway.audit.index import (
    LAYOUT,
    AuditIndex,
    DecisionAt,
    IndexUnavailable,
    default_index_dir,
    open_index,
)
from gateway.audit.verify import Layout, Verifier
from gateway.catalogue import CatalogueError
from gateway.cli import history_client
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
from gateway.processor import state_identity

EXIT_NOT_FOUND = 1
_PAGE = 1000


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "explain",
        help="show every audit record of a job or uniqueness key, with reasons",
        description=(
            "Print, in log order, every audit record on the decisions topic about a job "
            "(give its id; a job with a unique key shows its key's) or a uniqueness key: each "
            "decision with the policy applied and why its outcome followed, each job event "
            "with what it did, each expiry. Asks the index a running gateway keeps (--url, "
            "else $GATEWAY_URL, else the running `gateway up` of the same broker and topics); "
            "else reads the key's records through an index of the topic kept here, brought up "
            "to date first (a first run reads the whole topic). A record that its digest, "
            "its partition or the chain of its partition refutes is marked REFUTED. Exits 1 "
            "if nothing mentions it."
        ),
    )
    p.add_argument(
        "target", metavar="JOB_ID|UNIQUE_KEY",
        help="a job id, or a uniqueness key (64 hex digits, as `gateway fingerprint` prints)",
    )  # fmt: skip
    add_kafka_arguments(p)
    p.add_argument(
        "--url", metavar="URL",
        help="the gateway (`gateway serve` or `up`) whose audit index to ask, e.g. "
        f"http://127.0.0.1:8080; with credentials, ${history_client.API_KEY_ENV} holds "
        f"the key (default: ${history_client.URL_ENV}, else the running `gateway up` of this "
        "broker and topics, else none: read the log here)",
    )  # fmt: skip
    p.add_argument(
        "--here", action="store_true",
        help="read the log here through an index kept here, asking no gateway (and check "
        "each record with the keys of --audit-key-file, not the gateway's)",
    )  # fmt: skip
    p.add_argument(
        "--index", type=Path, metavar="DIR",
        help="where the index of the decisions topic is kept (default: under the gateway "
        "home, audit-index/<topic>/<cluster id>); delete it and the next run reads the "
        "topic again; given, no gateway is asked",
    )  # fmt: skip
    add_audit_key_argument(p, sealing=False)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    target = args.target.strip()
    problem = history.key_problem(target)
    if problem is not None:
        raise CommandError(f"JOB_ID|UNIQUE_KEY {problem}", EXIT_INVALID)
    keys = audit_keys_of(args)
    try:
        cat = catalogue.load(namespace=args.namespace)
    except CatalogueError as exc:
        raise CommandError(str(exc), EXIT_INVALID) from exc
    topic = cat.name("decisions")
    url, named = _gateway_of(args, topic)
    if url is not None:
        try:
            return _ask(url, target, topic, args.bootstrap, keys is not None)
        except history_client.Unanswered as exc:
            if named:
                raise CommandError(f"the gateway's history: {exc}", EXIT_UNAVAILABLE) from None
            print(f"note: the running gateway up gave no history: {exc}; reading {topic} "
                  "here instead", file=sys.stderr, flush=True)  # fmt: skip
    layout = Layout(cat.name("requests"), cat.name("intake"), cat.by_role("decisions").partitions)
    return _read_here(args, target, topic, layout, Verifier(layout, keys))


def _gateway_of(args: argparse.Namespace, topic: str) -> tuple[str | None, bool]:
    """The gateway whose index to ask, and whether the user named it: --url, else
    $GATEWAY_URL, else the running `gateway up` of the broker and topic asked (none with
    --index or --here)."""
    if args.url and (args.index is not None or args.here):
        raise CommandError("--url asks a gateway, --index and --here read the log here: "
                           "give one", EXIT_INVALID)  # fmt: skip
    if args.index is not None or args.here:
        return None, False
    named = args.url or os.environ.get(history_client.URL_ENV)
    if named:
        if not named.startswith(("http://", "https://")):
            where = "--url" if args.url else f"${history_client.URL_ENV}"
            raise CommandError(f"{where} {named!r} is no http:// or https:// URL", EXIT_INVALID)
        return named, True
    address, _ = config.bootstrap_of(args.bootstrap)
    return config.up_binding(address, topic), False


def _ask(url: str, target: str, topic: str, bootstrap: str | None, keyed: bool) -> int:
    """Print the history as the gateway at `url` tells it and checks it."""
    print(f"asking the audit index of the gateway at {url}", file=sys.stderr, flush=True)
    if keyed:
        print("note: each record is checked by that gateway, with the keys of its "
              "--audit-key-file; --here checks them with yours", file=sys.stderr)  # fmt: skip
    pages = history_client.pages(url, target)
    try:
        first = next(pages)
    except history_client.NotFound as exc:
        raise _not_found(target, topic, bootstrap, f" (the gateway at {url}: {exc})") from None
    index = first.get("index")
    behind = int(index.get("behind") or 0) if isinstance(index, dict) else 0
    items = _chain_pages(first, pages)
    return _print(first.get("unique_key"), target, first.get("count"), behind, topic, items)


def _chain_pages(first: dict[str, Any], rest: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Every page's items; a gateway that stops answering after the first page ends the
    command (exit 3), never a second telling read here."""
    yield from first["items"]
    try:
        for page in rest:
            yield from page["items"]
    except history_client.Unanswered as exc:
        message = f"the gateway stopped answering mid-way: {exc}"
        raise CommandError(message, EXIT_UNAVAILABLE) from None


def _read_here(
    args: argparse.Namespace, target: str, topic: str, layout: Layout, verifier: Verifier
) -> int:
    """Print the history from an index of the topic kept here, brought up to date first."""
    settings = reachable_config(args.bootstrap)
    # Both made at once, so they reach the brokers together.
    follower, reader = follow.consumer(settings), follow.consumer(settings, seeking=True)
    try:
        identity = state_identity.current(AdminClient(settings), [topic], LAYOUT)
        directory = args.index or default_index_dir(topic, identity.cluster_id)
        try:
            index = open_index(directory, identity)
        except IndexUnavailable as exc:
            raise CommandError(
                f"{exc} (another `gateway explain` running?): wait for it, or give --index DIR"
            ) from exc
        try:
            ranges = follow.unread(follower, topic, index)
            total = sum(end - start for start, end in ranges.values())
            with progress_bar(total, f"indexing {topic} here (once; --url asks a gateway)") as step:
                behind = follow.catch_up(follower, topic, index, ranges, step)
            found = history.routes_of(index, target)
            if found is None:
                raise _not_found(target, topic, args.bootstrap, "")
            count = history.count(index, target)
            return _print(found[0], target, count, behind, topic,
                          _items_here(index, reader, topic, target, verifier))  # fmt: skip
        finally:
            index.close()
    except KafkaException as exc:
        raise CommandError(
            f"cannot read {topic} ({exc.args[0].str()}) from {kafka_asked(args.bootstrap)}",
            EXIT_UNAVAILABLE,
        ) from exc
    finally:
        follower.close()
        reader.close()


def _items_here(
    index: AuditIndex, client: Consumer, topic: str, target: str, verifier: Verifier
) -> Iterator[dict[str, Any]]:
    """The history's items, read a page at a time, as the history route tells them."""
    start: DecisionAt | None = (0, 0)
    while start is not None:
        page = history.page(index, target, start, _PAGE,
                            lambda p: follow.read_at(client, topic, p), verifier)  # fmt: skip
        assert page is not None  # the routes were found before
        yield from (history.as_json(item, topic) for item in page.items)
        start = page.next


def _not_found(target: str, topic: str, bootstrap: str | None, where: str) -> CommandError:
    return CommandError(
        f"no audit record mentions {target} in {topic} of {kafka_asked(bootstrap)}{where}; "
        "if `gateway up` printed another bootstrap, name it with --bootstrap (and its "
        "--namespace)",
        EXIT_NOT_FOUND,
    )


def _print(
    unique_key: Any, target: str, count: Any, behind: int, topic: str,
    items: Iterator[dict[str, Any]],
) -> int:  # fmt: skip
    what = f"unique_key {unique_key}" if unique_key else f"job {target} (no unique key)"
    print(f"{what}: {count} audit record{'' if count == 1 else 's'}")
    if behind:
        print(
            f"note: the index is {behind} offsets behind {topic} (a transaction still "
            "open?): the newest records may be missing"
        )
    refuted = 0
    for item in items:
        _print_item(item)
        trail = item.get("trail") or {}
        refuted += trail.get("verdict") == "refuted"
    if refuted:
        print(
            f"{refuted} of these records {'is' if refuted == 1 else 'are'} REFUTED: not as the "
            "processor wrote them, or not where it wrote them (`gateway replay` checks every "
            "record against its input)"
        )
    sys.stdout.flush()
    return 0


def _print_item(item: dict[str, Any]) -> None:
    where = _where(item)
    trail = item.get("trail")
    if item.get("record") is None or not isinstance(trail, dict):
        print(f"(gone)  ({where})")
        print(f"    {item.get('reason')}")
        return
    mark = "REFUTED  " if trail.get("verdict") == "refuted" else ""
    print(f"{mark}{item.get('at')}  {item.get('head')}  ({where})")
    for line in str(item.get("reason") or "").split("\n"):
        print(f"    {line}")
    for line in trail.get("refuted") or ():
        print(f"    REFUTED: {line}")
    for line in trail.get("unchecked") or ():
        print(f"    unchecked: {line}")


def _where(item: dict[str, Any]) -> str:
    """The record's place, and its source's when it has one."""
    position = item.get("position") or {}
    text = "{}[{}]@{}".format(position.get("topic"), position.get("partition"),
                              position.get("offset"))  # fmt: skip
    source = item.get("source")
    if isinstance(source, dict):
        text += " from {}[{}]@{}".format(source.get("topic"), source.get("partition"),
                                          source.get("offset"))  # fmt: skip
    return text
