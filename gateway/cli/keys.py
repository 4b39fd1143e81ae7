"""`gateway keys`: the principals of a credentials file, and their keys.

A key is printed once, alone on the last line, when it is made; the file holds
its hash only (gateway/auth/credentials.py). A serve process reads the file
again when it changes: a new key works, and a revoked one is refused, within a
second, without a restart.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from gateway.auth import credentials, keys, roles
from gateway.auth.credentials import CredentialsError, Principal
from gateway.cli.common import EXIT_INVALID, CommandError
from gateway.core.times import format_rfc3339


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "keys",
        help="add, rotate, revoke and list the principals and keys of a credentials file",
        description="Edit the credentials file `gateway serve --credentials` reads "
        "(docs/security.md). A new key is printed once, alone on the last line; the file "
        "keeps its scrypt hash only. A serve process reads the file again when it changes.",
    )
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    new = actions.add_parser(
        "new", help="a new principal with a key, or another key for one",
        description="Add principal NAME with a new key, or, if NAME exists, a second key "
        "(both work until one is revoked: see `rotate` for a key that replaces the others).",
    )  # fmt: skip
    new.add_argument("name", metavar="NAME", help="the principal's name")
    grant = new.add_mutually_exclusive_group()
    grant.add_argument(
        "--role", choices=list(roles.ROLES),
        help="a new principal's role (default: none; a new principal needs this or --operations)",
    )  # fmt: skip
    grant.add_argument(
        "--operations", metavar="OP,...",
        help=f"a new principal's operations instead of a role: some of "
        f"{', '.join(roles.OPERATIONS)} (default: none)",
    )  # fmt: skip
    new.add_argument(
        "--queues", metavar="PATTERN,...", default=None,
        help='the queues a new principal reaches; "*" stands for any characters '
        '(default "*": every queue)',
    )  # fmt: skip
    new.add_argument(
        "--tenants", metavar="TENANT,...", default=None,
        help="bind a new principal to these tenants: it acts for and sees only their jobs "
        "(default: none, every tenant)",
    )  # fmt: skip
    new.add_argument(
        "--keyless-from", metavar="NETWORK,...", default=None,
        help="requests without an Authorization header from these networks are this new "
        "principal's (for the OJS Admin UI on this machine: docs/security.md; default: none)",
    )  # fmt: skip
    rotate = actions.add_parser(
        "rotate", help="a new key for a principal; its other keys expire after a grace period",
        description="Add a new key to NAME; its other keys keep working for --grace seconds, "
        "then are refused: time to give every caller the new key.",
    )  # fmt: skip
    rotate.add_argument("name", metavar="NAME", help="the principal's name")
    rotate.add_argument(
        "--grace", type=int, default=credentials.DEFAULT_GRACE_S, metavar="SECONDS",
        help="how long the old keys still work (default %(default)s: a day)",
    )  # fmt: skip
    revoke = actions.add_parser(
        "revoke", help="remove a principal's keys, or one of them",
        description="Remove every key of NAME (it keeps its role and queues, and can be "
        "given a key again), or with --key only that one: refused from the next request on.",
    )  # fmt: skip
    revoke.add_argument("name", metavar="NAME", help="the principal's name")
    revoke.add_argument(
        "--key", metavar="ID",
        help="the key's id, as `keys list` shows it (default: every key of NAME)",
    )  # fmt: skip
    listing = actions.add_parser(
        "list", help="the principals, their operations, queues and key ids (never a key)"
    )
    for action in (new, rotate, revoke, listing):
        action.add_argument(
            "--file", type=Path, default=None,
            help="the credentials file (default $GATEWAY_CREDENTIALS)",
        )  # fmt: skip
    p.set_defaults(func=_keys)


def _keys(args: argparse.Namespace) -> int:
    given = args.file or os.environ.get("GATEWAY_CREDENTIALS")
    if not given:
        raise CommandError("name the credentials file: --file FILE or $GATEWAY_CREDENTIALS",
                           EXIT_INVALID)  # fmt: skip
    path = Path(given)
    if args.action == "list":
        try:
            _list(credentials.load(path))
        except CredentialsError as exc:
            raise CommandError(str(exc), EXIT_INVALID) from None
        return 0
    try:
        with credentials.editing(path):
            key = _edit(args, path)
    except CredentialsError as exc:
        raise CommandError(str(exc), EXIT_INVALID) from None
    except OSError as exc:
        raise CommandError(f"cannot edit {path}: {exc.strerror}", EXIT_INVALID) from None
    if key is None:
        what = "every key" if args.key is None else f"key {args.key}"
        print(f"principal {args.name}: {what} revoked")
        return 0
    print(f"principal {args.name}: key {keys.key_id(keys.digest(key))} added; the key, "
          "shown this once:")  # fmt: skip
    print(key)
    return 0


def _edit(args: argparse.Namespace, path: Path) -> str | None:
    """Change the file as `args` ask, under its edit lock; the new key, if one was made."""
    principals = credentials.load(path) if path.exists() or args.action != "new" else ()
    if args.action == "revoke":
        credentials.save(path, credentials.without_keys(principals, args.name, args.key))
        return None
    key, now_ms = keys.new_key(), time.time_ns() // 1_000_000
    if args.action == "rotate":
        if args.grace < 0:
            raise CredentialsError("--grace must be 0 or more seconds")
        changed = credentials.with_key(
            principals, args.name, key, now_ms, grace_ms=args.grace * 1000
        )
    else:
        changed = credentials.with_key(
            principals, args.name, key, now_ms, new=_new(args, principals)
        )
    credentials.save(path, changed)
    return key


def _new(args: argparse.Namespace, principals: tuple[Principal, ...]) -> Principal | None:
    """The principal to add, if NAME is new; for an existing one, nothing else may be
    asked (a second key changes nothing else)."""
    asked = (args.role, args.operations, args.queues, args.tenants, args.keyless_from)
    if any(p.name == args.name for p in principals):
        if any(a is not None for a in asked):
            raise CredentialsError(
                f"principal {args.name!r} exists: `keys new` only adds a key to it; edit "
                "the file to change its role, operations, queues, tenants or keyless_from"
            )
        return None
    if args.role is None and args.operations is None:
        raise CredentialsError(f"a new principal needs --role or --operations ({args.name!r})")
    return credentials.principal(
        args.name, args.role, _listed(args.operations), _listed(args.queues) or ["*"],
        _listed(args.keyless_from) or (), _listed(args.tenants) or (),
    )  # fmt: skip


def _listed(value: str | None) -> list[str] | None:
    return None if value is None else [v.strip() for v in value.split(",") if v.strip()]


def _list(principals: tuple[Principal, ...]) -> None:
    now_ms = time.time_ns() // 1_000_000
    for p in principals:
        grant = f"role {p.role}" if p.role else f"operations {','.join(sorted(p.operations))}"
        line = f"{p.name}: {grant}; queues {','.join(p.queues.patterns)}"
        if p.tenants:
            line += f"; tenants {','.join(sorted(p.tenants))}"
        if p.keyless_from:
            line += f"; keyless from {','.join(map(str, p.keyless_from))}"
        print(line)
        for k in p.keys:
            state = "live" if k.live(now_ms) else "expired"
            until = "" if k.expires_ms is None else f", expires {format_rfc3339(k.expires_ms)}"
            print(f"  key {k.id}: created {format_rfc3339(k.created_ms)}{until} ({state})")
