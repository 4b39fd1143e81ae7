"""What every command shares: its one-line error, exit codes, the Kafka options and probe.

Exit codes, the same for every command:
  0  done (enqueue: accepted, replaced or ignored)
  1  a negative answer or a refusal: rejected, differences found, nothing found,
     a conflict with existing topics or a local cluster
  2  bad input: a usage error, an invalid job, policy or setting
  3  Kafka could not be reached, or gave no answer in time
  130 interrupted (Ctrl-C)
  141 the reader of its output went away (`gateway explain ... | head`)
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

if TYPE_CHECKING:
    from gateway.stage.audit_keys import AuditKeys

EXIT_OK = 0
EXIT_REFUSED = 1
EXIT_INVALID = 2
EXIT_UNAVAILABLE = 3
EXIT_INTERRUPTED = 130
EXIT_PIPE_CLOSED = 141

# How long a command waits for a first answer from Kafka before giving up;
# with the interpreter's start, every command fails within 10 s.
PROBE_S = 5.0


class CommandError(Exception):
    """A failure reported to the user as one line, with a non-zero exit."""

    def __init__(self, message: str, exit_code: int = EXIT_REFUSED) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def add_kafka_arguments(p: argparse.ArgumentParser, bootstrap: bool = True) -> None:
    """--bootstrap and --namespace, the same for every command that reaches Kafka."""
    if bootstrap:
        p.add_argument(
            "--bootstrap", metavar="HOST:PORT[,...]",
            help="Kafka bootstrap servers (default: $KAFKA_BOOTSTRAP, else bootstrap.servers "
            "from $GATEWAY_CONFIG, else the broker of the running `gateway up`, else the "
            "running local cluster, else 127.0.0.1:9092)",
        )  # fmt: skip
    p.add_argument(
        "--namespace",
        help="prefix every topic name with NAMESPACE. (default $GATEWAY_NAMESPACE, else none)",
    )


def add_log_level_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--log-level", default=os.environ.get("GATEWAY_LOG_LEVEL", "INFO"),
        choices=("DEBUG", "INFO", "WARNING", "ERROR"), type=str.upper,
        help="JSON logs on stderr from this level up; the uniqueness key is logged only at "
        "DEBUG (default $GATEWAY_LOG_LEVEL, else INFO)",
    )  # fmt: skip


def add_audit_key_argument(p: argparse.ArgumentParser, sealing: bool) -> None:
    """--audit-key-file: the processor seals with its newest key, the readers verify with any."""
    from gateway.stage.audit_keys import ENV

    use = (
        "seal the audit trail with a key: the last of this file's `ID SECRET` lines "
        "(docs/audit.md; default $%s, else unkeyed)"
        if sealing
        else "verify audit records sealed with a key against the keys of this file "
        "(default $%s, else their keyed digests are not checked)"
    )
    p.add_argument(
        "--audit-key-file", type=Path, default=os.environ.get(ENV) or None, metavar="FILE",
        help=use % ENV,
    )  # fmt: skip


def add_credentials_argument(p: argparse.ArgumentParser, guards: str, without: str) -> None:
    """--credentials, of serve, process and up: `guards` says what then needs a key,
    `without` what happens without a file."""
    p.add_argument(
        "--credentials", type=Path, metavar="FILE", default=None,
        help=f"the credentials file (`gateway keys`; docs/security.md): {guards}; the file "
        "is read again when it changes, or on SIGHUP (default $GATEWAY_CREDENTIALS, else "
        f"none: {without})",
    )  # fmt: skip


def credentials_of(args: argparse.Namespace) -> Path | None:
    """The credentials file, checked (exit 2 naming the problem), or None."""
    from gateway.auth.credentials import CredentialsError, load

    given = args.credentials or os.environ.get("GATEWAY_CREDENTIALS") or None
    if given is None:
        return None
    path = Path(given).resolve()
    try:
        load(path)
    except CredentialsError as exc:
        raise CommandError(str(exc), EXIT_INVALID) from None
    return path


def add_store_memory_argument(p: argparse.ArgumentParser) -> None:
    """--store-memory-mb: what every RocksDB store of one process may hold together."""
    from gateway.store_memory import DEFAULT_MB, MAX_MB, MIN_MB

    p.add_argument(
        "--store-memory-mb", type=int, default=DEFAULT_MB, metavar="MB",
        help="memory all the RocksDB stores of one process share, memtables and block cache "
        f"({MIN_MB}..{MAX_MB}; default %(default)s; each processor runtime and each serve "
        "worker has its own)",
    )  # fmt: skip


def store_memory_of(args: argparse.Namespace) -> int:
    """--store-memory-mb, checked."""
    from gateway.store_memory import MAX_MB, MIN_MB

    if not MIN_MB <= args.store_memory_mb <= MAX_MB:
        raise CommandError(f"--store-memory-mb must be from {MIN_MB} to {MAX_MB}")
    return int(args.store_memory_mb)


def audit_keys_of(args: argparse.Namespace) -> AuditKeys | None:
    """The keys --audit-key-file names, or None; a bad file is refused with its code."""
    from gateway.stage import audit_keys

    if args.audit_key_file is None:
        return None
    try:
        return audit_keys.load(Path(args.audit_key_file))
    except audit_keys.AuditKeyError as exc:
        raise CommandError(f"--audit-key-file {exc} [{exc.code}]", EXIT_INVALID) from exc


def kafka_asked(bootstrap: str | None) -> str:
    """The broker a command asks and where its address came from, for a message that must
    say which one answered nothing or had nothing (see config.bootstrap_of)."""
    from gateway import config

    address, source = config.bootstrap_of(bootstrap)
    return f"Kafka at {address} (from {source})"


def namespace_of(namespace: str | None) -> str:
    """The namespace a command's topics are in, as --namespace or $GATEWAY_NAMESPACE gave it."""
    chosen = namespace if namespace is not None else os.environ.get("GATEWAY_NAMESPACE")
    return chosen or "none (the default)"


def reachable_config(bootstrap: str | None) -> dict[str, Any]:
    """The Kafka client settings, once a broker has answered at their address.

    Fails in PROBE_S with one line naming the address and what to do, instead
    of letting each client retry for its own, much longer, timeout.
    """
    from gateway import config

    settings = config.client_config(bootstrap)
    address, source = config.bootstrap_of(bootstrap)
    try:
        # Silent: the connection errors would bury the one line we print.
        AdminClient({**settings, "log_level": 0}).list_topics(timeout=PROBE_S)
    except KafkaException as exc:
        raise CommandError(
            f"no Kafka broker answered at {address} within {PROBE_S:.0f}s "
            f"({exc.args[0].str()}): start one with: gateway kafka up, "
            f"or name yours with --bootstrap (this address is from {source})",
            EXIT_UNAVAILABLE,
        ) from exc
    return settings
