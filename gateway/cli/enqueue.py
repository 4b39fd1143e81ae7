"""`gateway enqueue`: send one job through the SDK and print its decision."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import orjson
from confluent_kafka import KafkaException

from gateway.catalogue import CatalogueError
from gateway.cli.common import (
    EXIT_INVALID,
    EXIT_REFUSED,
    EXIT_UNAVAILABLE,
    CommandError,
    add_kafka_arguments,
    kafka_asked,
    namespace_of,
    reachable_config,
)
from gateway.core import INVALID_REQUEST, GatewayError
from gateway.core.limits import rounded_integer_problem

_EXIT_BY_OUTCOME = {
    "accepted": 0, "replaced": 0, "ignored": 0, "updated": 0, "rejected": EXIT_REFUSED,
}  # fmt: skip


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "enqueue",
        help="send one job to the gateway and print its decision",
        description=(
            "Send one job, read as JSON on stdin or built from --type/--args/--unique/--queue, "
            "to the requests topic, and print the committed decision record as JSON (its job "
            "shown as the HTTP binding shows it: `retry` as the OJS retry object). Exit 0 "
            "for accepted, replaced, ignored or updated, 1 for rejected, 2 for an invalid job "
            "(`invalid_request: ...` on stderr), 3 when no decision could be had."
        ),
    )
    p.add_argument(
        "--type", dest="job_type",
        help="the job type (default: none, the whole job is read as JSON on stdin)",
    )  # fmt: skip
    p.add_argument("--args", help="the job's args as JSON (default: [])")
    p.add_argument(
        "--unique",
        help='the unique policy as JSON, e.g. \'{"keys": ["type"]}\' (default: none)',
    )
    p.add_argument("--queue", help="the queue (default: default)")
    add_kafka_arguments(p)
    p.add_argument(
        "--no-wait", action="store_true",
        help="return once Kafka has the request; print its request_id and unique_key",
    )  # fmt: skip
    p.add_argument(
        "--idempotency-key", metavar="KEY",
        help="name the request (1 to 256 printable characters): sent again with the same key "
        "and job within the processor's --idempotency-seconds, it prints the first decision "
        "record again and makes no new job; with another job, invalid idempotency_key_reused "
        "(default: none)",
    )  # fmt: skip
    p.add_argument(
        "--tenant", metavar="TENANT",
        help="the job's tenant, written into its meta.tenant_id: its unique keys are the "
        "tenant's own and it passes the tenant's limits (default: the job's meta, else none)",
    )  # fmt: skip
    p.add_argument(
        "--timeout", type=float, default=30.0,
        help="seconds to wait for the decision (default %(default)s)",
    )  # fmt: skip
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from gateway.core.idempotency import key_problem
    from gateway.core.tenants import for_tenant
    from gateway.sdk import Client, ClientError, EnqueueResult, EnqueueTimeout, InvalidJob
    from gateway.sdk.prepare import prepare

    job = for_tenant(_job(args), args.tenant)
    # An invalid job is refused before Kafka is asked anything.
    problem = job if isinstance(job, GatewayError) else prepare(job)
    if args.idempotency_key is not None and not isinstance(problem, GatewayError):
        problem = key_problem(args.idempotency_key, "--idempotency-key") or problem
    if isinstance(problem, GatewayError):
        return _invalid(problem)
    bootstrap = reachable_config(args.bootstrap)["bootstrap.servers"]
    try:
        # librdkafka's connection logs would bury the one line we print.
        with Client(bootstrap, args.namespace, log_level=0) as client:
            answer = client.enqueue(
                job, wait=not args.no_wait, timeout=args.timeout,
                idempotency_key=args.idempotency_key,
            )  # fmt: skip
    except InvalidJob as exc:
        return _invalid(exc.error)
    except EnqueueTimeout as exc:
        raise CommandError(
            f"{exc} after {args.timeout:g}s: no processor decided the request sent to "
            f"{kafka_asked(args.bootstrap)}, namespace {namespace_of(args.namespace)}; "
            "start one with gateway up, or name the broker `gateway up` printed with --bootstrap",
            EXIT_UNAVAILABLE,
        ) from exc
    except (ClientError, CatalogueError) as exc:
        # Kafka unreachable, a topic missing: not a verdict on the job.
        raise CommandError(f"{exc} ({kafka_asked(args.bootstrap)})", EXIT_UNAVAILABLE) from exc
    except KafkaException as exc:  # a Kafka setting the client refused
        raise CommandError(f"kafka: {exc.args[0].str()}", EXIT_UNAVAILABLE) from exc
    if not isinstance(answer, EnqueueResult):
        _print({"request_id": answer.request_id, "unique_key": answer.unique_key})
        return 0
    # The decision record, its job shown as every surface shows a job (`retry` as OJS's).
    _print(answer.record if answer.job is None else {**answer.record, "job": answer.job})
    return _EXIT_BY_OUTCOME.get(str(answer.outcome), EXIT_INVALID)


def _job(args: argparse.Namespace) -> Any:
    """The job from the flags, else from stdin; malformed JSON is a GatewayError."""
    if args.job_type is None:
        if any(v is not None for v in (args.args, args.unique, args.queue)):
            return GatewayError(INVALID_REQUEST, "--args, --unique and --queue need --type")
        return _loads(sys.stdin.buffer.read(), "the job on stdin", "")
    job: dict[str, Any] = {
        "type": args.job_type,
        "args": _loads(args.args or "[]", "--args", "args"),
    }
    if args.unique is not None:
        job["unique"] = _loads(args.unique, "--unique", "unique")
    if args.queue is not None:
        job["queue"] = args.queue
    bad = next((v for v in job.values() if isinstance(v, GatewayError)), None)
    return bad or job


def _loads(text: str | bytes, what: str, root: str) -> Any:
    """Malformed JSON is `invalid_request`, as the HTTP binding and the processor say; so
    is an integer beyond 64 bits, which orjson reads as a float (`root` names it)."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        return GatewayError(INVALID_REQUEST, f"{what} is not valid JSON: {exc}")
    problem = rounded_integer_problem(value, text, root)
    return value if problem is None else GatewayError(INVALID_REQUEST, problem)


def _print(value: Any) -> None:
    sys.stdout.write(orjson.dumps(value).decode() + "\n")


def _invalid(error: GatewayError) -> int:
    print(error, file=sys.stderr)
    return EXIT_INVALID
