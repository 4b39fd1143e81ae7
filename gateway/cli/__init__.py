"""gateway: a Kafka-native unique-jobs gateway.

Decides, for every job enqueue request, whether it duplicates a job that is
still live under the request's unique policy (Open Job Spec unique jobs), and
publishes the outcome exactly once: the accepted job, the cancellation of a
replaced job, the rejection, and an audit record of every decision.

Start here: `gateway up` runs a local Kafka broker, the dedup processor and the
OJS HTTP binding on http://127.0.0.1:8080 until Ctrl-C.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from types import ModuleType

from gateway import __version__, logs
from gateway.cli.common import EXIT_INTERRUPTED, EXIT_INVALID, EXIT_PIPE_CLOSED, CommandError
from gateway.config import ConfigError

EPILOG = """\
exit codes: 0 done; 1 a negative answer or refusal (rejected, differences,
not found, a conflict); 2 bad input or settings; 3 Kafka unreachable or no
answer in time; 130 interrupted; 141 the reader of the output went away.
Logs are JSON lines on stderr (level: --log-level, else $GATEWAY_LOG_LEVEL).
"""


# Every command, in the order `gateway --help` lists them (the docs' CLI reference too):
# each a module of this package, imported when asked for.
COMMANDS = ("up", "kafka", "topics", "process", "fingerprint", "enqueue", "replay", "explain",
            "serve", "keys", "bench")  # fmt: skip


def command(name: str) -> ModuleType:
    return importlib.import_module(f"gateway.cli.{name}")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """Every command's parser, or `only` that one's: a command run imports no other
    (the whole CLI's modules take most of a second to import)."""
    parser = argparse.ArgumentParser(
        prog="gateway",
        description=__doc__,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"gateway {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS if only is None else (only,):
        command(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        # A command's modules are imported here: Ctrl-C while they are is an interrupt too.
        args = build_parser(argv[0] if argv and argv[0] in COMMANDS else None).parse_args(argv)
        # Commands that run a service set their own level; the others log warnings only.
        logs.configure(os.environ.get("GATEWAY_LOG_LEVEL", "WARNING"))
        code = int(args.func(args) or 0)
        sys.stdout.flush()
        return code
    except CommandError as exc:
        print(f"gateway: {exc}", file=sys.stderr)
        return exc.exit_code
    except ConfigError as exc:
        print(f"gateway: {exc}", file=sys.stderr)
        return EXIT_INVALID
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # `gateway explain ... | head`: the reader has all it wanted. Point stdout
        # at /dev/null so the interpreter's final flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_PIPE_CLOSED


if __name__ == "__main__":
    sys.exit(main())
