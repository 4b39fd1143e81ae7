"""The `gateway` command: one subcommand per module, each registering itself."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from gateway import __version__
from gateway.cli import (
    bench,
    enqueue,
    explain,
    fingerprint,
    kafka,
    process,
    replay,
    serve,
    topics,
    up,
)
from gateway.cli.common import CommandError
from gateway.config import ConfigError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gateway", description=__doc__)
    parser.add_argument("--version", action="version", version=f"gateway {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (up, kafka, topics, process, fingerprint, enqueue, replay, explain, serve, bench):
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except CommandError as exc:
        print(f"gateway: {exc}", file=sys.stderr)
        return exc.exit_code
    except ConfigError as exc:
        print(f"gateway: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
