"""`gateway fingerprint`: print the uniqueness key of one job read on stdin."""

from __future__ import annotations

import argparse
import sys

from gateway.core import INVALID_REQUEST, GatewayError, canonical_form, parse_request_json

EXIT_INVALID = 2


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "fingerprint",
        help="print the uniqueness key of a job read on stdin",
        description=(
            "Read one job as JSON on stdin, either an OJS envelope (top-level queue and "
            "unique) or the HTTP form (options.queue, options.unique), and print its "
            "uniqueness key: SHA-256 hex of the RFC 8785 form of the selected dimensions. "
            "Exits 2 with `invalid_request: ...` on stderr if the job or policy is invalid."
        ),
    )
    parser.add_argument(
        "--canonical",
        action="store_true",
        help="print the canonical JSON that is hashed instead of the key",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    request = parse_request_json(sys.stdin.buffer.read())
    if isinstance(request, GatewayError):
        return _fail(request)
    envelope, policy = request.envelope, request.policy
    if policy is None or request.unique_key is None:
        return _fail(
            GatewayError(
                INVALID_REQUEST,
                "the job has no unique policy (unique or options.unique), so it has no key",
            )
        )
    if not args.canonical:
        print(request.unique_key)
        return 0
    form = canonical_form(
        policy, envelope.type, envelope.queue, envelope.args, envelope.meta,
        envelope.unique_field or "unique",
    )  # fmt: skip
    if isinstance(form, GatewayError):
        return _fail(form)
    print(form.decode())
    return 0


def _fail(error: GatewayError) -> int:
    print(error, file=sys.stderr)
    return EXIT_INVALID
