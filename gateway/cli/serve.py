"""`gateway serve`: the OJS HTTP binding (jobs and worker endpoints) over the SDK."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

from gateway import logs, store_memory
from gateway.cli.common import (
    EXIT_INVALID,
    CommandError,
    add_audit_key_argument,
    add_credentials_argument,
    add_kafka_arguments,
    add_log_level_argument,
    add_store_memory_argument,
    audit_keys_of,
    credentials_of,
    reachable_config,
    store_memory_of,
)
from gateway.core import DEFAULT_RETENTION_MS
from gateway.http.binding import (
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_CLIENT_CONNECTIONS,
    DEFAULT_MAX_ENQUEUE_RATE,
)
from gateway.http.serving import GRACEFUL_SHUTDOWN_S, MAX_WORKERS

if TYPE_CHECKING:
    import ssl

    from gateway.http.tls import TlsFiles


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve",
        help="serve the OJS HTTP binding",
        description=(
            "Serve POST /ojs/v1/jobs (answered once the processor has decided), "
            "/ojs/v1/jobs/batch, GET and DELETE /ojs/v1/jobs/{id}, /ojs/v1/workers/fetch|ack|nack, "
            "/ojs/manifest, /ojs/v1/health (readiness) and /ojs/v1/health/live."
        ),
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default %(default)s)")
    p.add_argument("--port", type=int, default=8080, help="port (default %(default)s)")
    add_kafka_arguments(p)
    add_credentials_argument(p, HTTP_GUARDED, "every request may do anything")
    add_job_types_argument(p)
    p.add_argument(
        "--max-body-bytes", type=int, default=DEFAULT_MAX_BODY_BYTES,
        help="larger bodies get 413 (default %(default)s)",
    )  # fmt: skip
    p.add_argument(
        "--timeout", type=float, default=30.0,
        help="seconds to wait for a decision before answering 504 (default %(default)s)",
    )  # fmt: skip
    p.add_argument(
        "--processor-url", default=os.environ.get("GATEWAY_PROCESSOR_URL"),
        help="the processor's status URL (`gateway process --metrics-port P` serves "
        "http://127.0.0.1:P): health is ready only when that processor owns its partitions "
        "and has restored its state (default $GATEWAY_PROCESSOR_URL, else health checks "
        "the consumer group only)",
    )  # fmt: skip
    p.add_argument(
        "--view-dir", type=Path, default=None,
        help="where this process keeps its job view (RocksDB; default: under the gateway home, "
        "per namespace and port), and beside it, in DIR-audit, its index of the decisions "
        "topic. Two serve processes need two directories.",
    )  # fmt: skip
    p.add_argument(
        "--retention-seconds", type=int, default=DEFAULT_RETENTION_MS // 1000,
        help="the processor's --retention-seconds: the view drops a finished job that long "
        "after it ended (default %(default)s)",
    )  # fmt: skip
    add_json_responses_argument(p)
    add_tls_arguments(p)
    add_workers_argument(p, "--workers", 1)
    add_limit_arguments(p)
    add_audit_key_argument(p, sealing=False)
    add_store_memory_argument(p)
    # A worker of `--workers N`: the listening socket and its board byte, by descriptor.
    p.add_argument("--worker-socket", type=int, help=argparse.SUPPRESS)
    p.add_argument("--worker-board", help=argparse.SUPPRESS)
    add_log_level_argument(p)
    p.set_defaults(func=_serve)


def add_workers_argument(
    p: argparse.ArgumentParser, flag: str, default: int | None, default_text: str = "%(default)s"
) -> None:
    """Shared with `gateway up` (`--http-workers`), which passes it on to serve; a default
    of None is chosen when the command runs, as `default_text` says."""
    p.add_argument(
        flag, type=int, default=default,
        help="serve processes answering on the one port, each with its own producer, reply "
        f"consumer and job view; one uses at most one core (default {default_text})",
    )  # fmt: skip


# The edge's limits: (flag, environment variable, default), shared with `gateway up`,
# which passes them on to serve.
LIMIT_FLAGS = (
    ("--max-client-connections", "GATEWAY_MAX_CLIENT_CONNECTIONS", DEFAULT_MAX_CLIENT_CONNECTIONS),
    ("--max-enqueue-rate", "GATEWAY_MAX_ENQUEUE_RATE", DEFAULT_MAX_ENQUEUE_RATE),
)


def add_limit_arguments(p: argparse.ArgumentParser) -> None:
    (conn_flag, conn_env, conn), (rate_flag, rate_env, rate) = LIMIT_FLAGS
    p.add_argument(
        conn_flag, metavar="N", default=os.environ.get(conn_env) or None,
        help="requests one client address may have in flight at once, an open event stream "
        "included; one more gets 429 too_many_connections with Retry-After. Counted per serve "
        f"worker: with --workers W a client may hold N x W. 0: no limit (default ${conn_env}, "
        f"else {conn})",
    )  # fmt: skip
    p.add_argument(
        rate_flag, metavar="N", default=os.environ.get(rate_env) or None,
        help="jobs a principal of --credentials may enqueue a second, a batch counting its "
        "jobs: a burst of N, then one every 1/N s; one more gets 429 rate_limited with "
        "Retry-After. Counted per serve worker: with --workers W, N x W. Without a "
        f"credentials file, no limit. 0: no limit (default ${rate_env}, else {rate})",
    )  # fmt: skip


def limits_of(args: argparse.Namespace) -> None:
    """The edge's limits, checked (exit 2 naming the problem), as whole numbers in `args`."""
    for flag, env, default in LIMIT_FLAGS:
        name = flag[2:].replace("-", "_")
        given = getattr(args, name)
        text = str(default if given is None else given).strip()
        if not (text.isascii() and text.isdigit()):
            raise CommandError(
                f"{flag} (or ${env}) must be a whole number, 0 for no limit, not {given!r}",
                EXIT_INVALID,
            )  # fmt: skip
        setattr(args, name, int(text))


# What a credentials file guards in the HTTP binding (`--credentials` of serve and up).
HTTP_GUARDED = (
    "every route but health, /ojs/manifest and /openapi.json then needs `Authorization: "
    "Bearer KEY` of a principal allowed the route's operation on its queue"
)


def refuse_shared_token() -> None:
    """The binding's old shared token is refused rather than ignored: ignored, it would
    leave open a binding its deployer meant to close."""
    if os.environ.get("GATEWAY_HTTP_TOKEN"):
        raise CommandError(
            "$GATEWAY_HTTP_TOKEN is no longer read: make a credentials file with `gateway keys "
            "new NAME --role admin --file FILE` and pass --credentials FILE (docs/security.md)",
            EXIT_INVALID,
        )


def add_job_types_argument(p: argparse.ArgumentParser) -> None:
    """Shared with `gateway up`, which passes it on to serve."""
    p.add_argument(
        "--job-types", metavar="PATTERN,...", default=None,
        help="the job types an enqueue may name (OJS security §8.1), as comma-separated "
        "patterns where `*` is any run of characters (`email.*,report.build`); a job, a "
        "batch's job or a cron's job template of any other type is refused with 422 "
        "job_type_not_allowed (default $GATEWAY_JOB_TYPES, else none: every type is allowed)",
    )  # fmt: skip


def job_types_of(args: argparse.Namespace) -> tuple[str, ...] | None:
    """The job-type patterns, checked (exit 2 naming a bad one), or None: every type."""
    from gateway.auth.roles import PATTERN_RULE, is_valid_pattern

    given = args.job_types or os.environ.get("GATEWAY_JOB_TYPES") or None
    if given is None:
        return None
    patterns = tuple(part.strip() for part in given.split(","))
    for pattern in patterns:
        if not is_valid_pattern(pattern):
            raise CommandError(
                f"--job-types: {pattern!r} is not a pattern: each is {PATTERN_RULE}, "
                "comma-separated [job_types_invalid]", EXIT_INVALID,
            )  # fmt: skip
    return patterns


def add_json_responses_argument(p: argparse.ArgumentParser) -> None:
    """Shared with `gateway up`, which passes it on to its serve process."""
    p.add_argument(
        "--json-responses", action="store_true",
        help="answer every response as application/json, whatever Accept says, for clients "
        "that read no other type; the default is OJS's own type, "
        "application/openjobspec+json, except for the official OJS Python SDK (httpx's "
        "User-Agent with an OJS-Version header), which gets application/json without it",
    )  # fmt: skip


def add_tls_arguments(p: argparse.ArgumentParser) -> None:
    """HTTPS (docs/security.md, "TLS"); shared with `gateway up`, which passes the paths on."""
    env = os.environ.get
    p.add_argument(
        "--tls-cert-file", type=Path, default=env("GATEWAY_TLS_CERT_FILE") or None,
        metavar="FILE",
        help="serve HTTPS (TLS 1.2 or later) with this PEM certificate, its chain after it "
        "(default $GATEWAY_TLS_CERT_FILE, else plain HTTP)",
    )  # fmt: skip
    p.add_argument(
        "--tls-key-file", type=Path, default=env("GATEWAY_TLS_KEY_FILE") or None, metavar="FILE",
        help="the certificate's PEM private key, unencrypted (default $GATEWAY_TLS_KEY_FILE)",
    )  # fmt: skip
    p.add_argument(
        "--tls-client-ca-file", type=Path, default=env("GATEWAY_TLS_CLIENT_CA_FILE") or None,
        metavar="FILE",
        help="mutual TLS: verify each client's certificate against the CA certificates of "
        "this PEM file (default $GATEWAY_TLS_CLIENT_CA_FILE, else no client certificate is "
        "asked for)",
    )  # fmt: skip
    p.add_argument(
        "--tls-client-cert", choices=("required", "optional"), type=str.lower,
        default=env("GATEWAY_TLS_CLIENT_CERT") or None,
        help="with --tls-client-ca-file, whether a client without a certificate is refused in "
        "the handshake (required) or served (optional: health probes, token holders); a "
        "certificate that does not verify is refused either way "
        "(default $GATEWAY_TLS_CLIENT_CERT, else required)",
    )  # fmt: skip


def tls_files_of(args: argparse.Namespace) -> TlsFiles | None:
    """The TLS options, checked as a whole (not each file: see tls_context_of); None when
    serve speaks plain HTTP."""
    from gateway.http.tls import TlsFiles

    cert, key, ca = args.tls_cert_file, args.tls_key_file, args.tls_client_ca_file
    if cert is None and key is None:
        if ca is not None or args.tls_client_cert is not None:
            raise CommandError(
                "--tls-client-ca-file and --tls-client-cert need --tls-cert-file and "
                "--tls-key-file [tls_incomplete]", EXIT_INVALID,
            )  # fmt: skip
        return None
    if cert is None or key is None:
        raise CommandError(
            "--tls-cert-file and --tls-key-file go together [tls_incomplete]", EXIT_INVALID
        )
    if args.tls_client_cert not in (None, "required", "optional"):  # $GATEWAY_TLS_CLIENT_CERT
        raise CommandError(
            f"--tls-client-cert must be required or optional, not {args.tls_client_cert!r} "
            "[tls_client_cert_invalid]", EXIT_INVALID,
        )  # fmt: skip
    if args.tls_client_cert is not None and ca is None:
        raise CommandError(
            "--tls-client-cert needs --tls-client-ca-file, the CA to verify client certificates "
            "against [tls_incomplete]", EXIT_INVALID,
        )  # fmt: skip
    return TlsFiles(cert, key, ca, args.tls_client_cert or "required")


def tls_context_of(args: argparse.Namespace) -> ssl.SSLContext | None:
    """The TLS context the options describe, every file read and checked; None for plain
    HTTP. A file that cannot be used is refused with its code."""
    from gateway.http.tls import TlsError, server_context

    files = tls_files_of(args)
    if files is None:
        return None
    try:
        return server_context(files)
    except TlsError as exc:
        raise CommandError(f"{exc} [{exc.code}]", EXIT_INVALID) from exc


def _serve(args: argparse.Namespace) -> int:
    from gateway.http import serving

    if args.max_body_bytes < 1 or args.timeout <= 0 or args.retention_seconds < 1:
        raise CommandError("--max-body-bytes, --timeout and --retention-seconds must be positive")
    if not 1 <= args.workers <= MAX_WORKERS:
        raise CommandError(f"--workers must be from 1 to {MAX_WORKERS}")
    logs.configure(args.log_level)
    audit_keys_of(args)  # a bad key file is refused before anything starts
    tls_context_of(args)  # and so is a bad TLS file
    refuse_shared_token()
    args.credentials = credentials_of(args)  # and a bad credentials file
    limits_of(args)  # and a bad limit
    args.job_types = job_types_of(args)  # and a bad job-type pattern
    store_memory_of(args)
    if args.worker_socket is None and args.workers > 1:
        reachable_config(args.bootstrap)  # one line now, not a worker failing on and on
        try:
            sock = serving.bind(args.host, args.port)
        except OSError as exc:
            raise CommandError(f"cannot listen on {args.host}:{args.port}: {exc.strerror}") from exc
        board = serving.Board.create(args.workers)
        return serving.supervise(serving.worker_command(), args.workers, sock, board)
    return _serve_one(args)


def _serve_one(args: argparse.Namespace) -> int:
    """One binding: the only serve process, or one worker of several."""
    import socket

    import uvicorn

    from gateway.auth.roles import Patterns
    from gateway.http.app import HttpSettings, create_app
    from gateway.http.serving import Board
    from gateway.view.store import default_view_dir

    store_memory.configure(store_memory_of(args))
    tls = tls_context_of(args)
    bootstrap = reachable_config(args.bootstrap)["bootstrap.servers"]
    board, view_dir = None, args.view_dir or default_view_dir(args.namespace, f"port-{args.port}")
    if args.worker_board is not None:
        fd, index = (int(part) for part in args.worker_board.split(":"))
        board = Board(fd, args.workers, index)
        # Each worker its own view.
        view_dir = (
            args.view_dir / f"worker-{index + 1}"
            if args.view_dir
            else default_view_dir(args.namespace, f"port-{args.port}-worker-{index + 1}")
        )
    settings = HttpSettings(
        bootstrap=bootstrap,
        namespace=args.namespace,
        credentials=args.credentials,
        job_types=None if args.job_types is None else Patterns.of(args.job_types),
        max_body_bytes=args.max_body_bytes,
        decision_timeout=args.timeout,
        processor_url=args.processor_url,
        view_dir=view_dir,
        retention_ms=args.retention_seconds * 1000,
        json_responses=args.json_responses,
        board=board,
        audit_keys=audit_keys_of(args),
        max_client_connections=args.max_client_connections,
        max_enqueue_rate=args.max_enqueue_rate,
    )
    config = uvicorn.Config(
        create_app(settings), host=args.host, port=args.port,
        log_level=args.log_level.lower(), log_config=None,
        # The C event loop and HTTP parser: each takes a large share of the CPU an
        # answer costs off what asyncio and h11 spend. Named, so a missing one is an error.
        loop="uvloop", http="httptools",
        ssl_context_factory=None if tls is None else lambda _config, _default: tls,
        # The client's address is the peer's, as the per-client limit counts it: a proxy's
        # header would let a caller name any address, and its rewrite costs every request.
        proxy_headers=False,
        # Requests still waiting for a decision get this long after Ctrl-C.
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
    )  # fmt: skip
    sockets = None if args.worker_socket is None else [socket.socket(fileno=args.worker_socket)]
    uvicorn.Server(config).run(sockets=sockets)
    return 0
