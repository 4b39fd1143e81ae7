"""`gateway explain`: a job's or a unique key's audit records, each with why it came out so.

It keeps an index of where each key's records are on `decisions` (audit/index.py),
brought up to date at each run (the first run reads the topic once, later ones
what is new), then reads exactly the key's records (audit/follow.py). A record its
seal, its partition or its chain refutes is marked so (audit/verify.py).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from confluent_kafka import Consumer, KafkaException
from confluent_kafka.admin import AdminClient

from gateway import catalogue
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
            "with what it did, each expiry. Reads only the key's records, found through a "
            "local index of the topic brought up to date first. A record that its digest, "
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
        "--index", type=Path, metavar="DIR",
        help="where the index of the decisions topic is kept (default: under the gateway "
        "home, audit-index/<topic>/<cluster id>); delete it and the next run reads the "
        "topic again",
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
    layout = Layout(cat.name("requests"), cat.name("intake"), cat.by_role("decisions").partitions)
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
            behind = follow.catch_up(follower, topic, index)
            verifier = Verifier(layout, keys)
            return _print(index, reader, topic, target, behind, args.bootstrap, verifier)
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


def _print(
    index: AuditIndex, client: Consumer, topic: str, target: str,
    behind: int, bootstrap: str | None, verifier: Verifier,
) -> int:  # fmt: skip
    found = history.routes_of(index, target)
    if found is None:
        raise CommandError(
            f"no audit record mentions {target} in {topic} of {kafka_asked(bootstrap)}; if "
            "`gateway up` printed another bootstrap, name it with --bootstrap (and its "
            "--namespace)",
            EXIT_NOT_FOUND,
        )
    unique_key, routes = found
    count = sum(1 for _ in history.positions(index, routes, (0, 0)))
    what = f"unique_key {unique_key}" if unique_key else f"job {target} (no unique key)"
    print(f"{what}: {count} audit record{'' if count == 1 else 's'}")
    if behind:
        print(
            f"note: the index is {behind} offsets behind {topic} (a transaction still "
            "open?): the newest records may be missing"
        )
    start: DecisionAt | None = (0, 0)
    refuted = 0
    while start is not None:
        page = history.page(index, target, start, _PAGE,
                            lambda p: follow.read_at(client, topic, p), verifier)  # fmt: skip
        assert page is not None  # the routes were found above
        for item in page.items:
            _print_item(item, topic)
            refuted += bool(item.verdict.refuted)
        start = page.next
    if refuted:
        print(
            f"{refuted} of these records {'is' if refuted == 1 else 'are'} REFUTED: not as the "
            "processor wrote them, or not where it wrote them (`gateway replay` checks every "
            "record against its input)"
        )
    sys.stdout.flush()
    return 0


def _print_item(item: history.Item, topic: str) -> None:
    where = history.where(item, topic)
    if item.told is None:
        print(f"(gone)  ({where})")
        print(f"    {history.gone(item, topic)}")
        return
    mark = "REFUTED  " if item.verdict.refuted else ""
    print(f"{mark}{item.told.at}  {item.told.head}  ({where})")
    for line in item.told.reason:
        print(f"    {line}")
    for line in item.verdict.refuted:
        print(f"    REFUTED: {line}")
    for line in item.verdict.unchecked:
        print(f"    unchecked: {line}")
