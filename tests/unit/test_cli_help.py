"""The help a user reads: what the gateway does first, every flag with its default."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

from gateway.broker import install
from gateway.cli import build_parser


def _parsers(parser: argparse.ArgumentParser, name: str = "gateway"):
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from _parsers(sub, f"{name} {sub_name}")


def test_gateway_help_opens_with_what_the_gateway_does():
    text = build_parser().format_help()
    description = text.split("\n\n", 1)[1]
    assert description.startswith("gateway: a Kafka-native unique-jobs gateway.")
    assert "exit codes:" in text


def test_every_command_and_flag_has_help_naming_its_default():
    missing = []
    for name, parser in _parsers(build_parser()):
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction | argparse._VersionAction):
                continue
            if action.help == argparse.SUPPRESS:
                continue  # between the gateway's own processes, never typed by a user
            if isinstance(action, argparse._SubParsersAction):
                missing += [f"{name} {c.dest}" for c in action._choices_actions if not c.help]
                continue
            label = f"{name} {'/'.join(action.option_strings) or action.dest}"
            if not action.help:
                missing.append(label)
            elif action.option_strings and action.nargs != 0 and "default" not in action.help:
                missing.append(f"{label} (no default named)")
    assert not missing, missing


def test_every_default_a_flag_holds_is_the_one_its_help_names():
    """A default fixed in the parser is shown as it is (a default chosen at run time is
    said in words: test_no_default_reads_none)."""
    wrong = []
    for name, parser in _parsers(build_parser()):
        formatter = parser._get_formatter()
        for action in parser._actions:
            default = action.default
            if (
                not action.option_strings
                or action.nargs == 0
                or action.help
                in (
                    None,
                    argparse.SUPPRESS,
                )
                or default is None
                or isinstance(default, bool)
                or default == argparse.SUPPRESS
            ):
                continue  # fmt: skip
            text = " ".join(formatter._expand_help(action).split())
            shown = {str(default)} | ({f"{default:,}"} if isinstance(default, int) else set())
            if not any(s in text for s in shown):
                wrong.append(f"{name} {action.option_strings[0]}: default {default!r}: {text}")
    assert not wrong, wrong


def test_docker_compose_runs_the_launchers_kafka_release():
    compose = (Path(__file__).parents[2] / "docker-compose.yml").read_text()
    assert re.findall(r"image: apache/kafka:(\S+)", compose) == [install.DEFAULT_VERSION]


def test_no_default_reads_none():
    """A default chosen when the command runs is said in words, never as `None`."""
    shown = []
    for name, parser in _parsers(build_parser()):
        help_text = " ".join(parser.format_help().split())
        shown += [f"{name}: {m}" for m in re.findall(r"\(default:? None\)", help_text)]
    assert not shown, shown


def test_a_command_run_imports_no_other_command():
    """The first answer of a command (`gateway explain --url`) pays for its own modules."""
    probe = (
        "import sys; from gateway.cli import main\n"
        "try:\n    main(['fingerprint', '--help'])\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('gateway.cli.')))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    loaded = done.stdout.strip().splitlines()[-1]
    assert "gateway.cli.fingerprint" in loaded and "gateway.cli.serve" not in loaded, loaded


def test_ctrl_c_while_a_commands_modules_load_is_an_interrupt_not_a_traceback(monkeypatch):
    """`gateway up` imports its modules for a second or more on a busy machine."""
    from gateway import cli

    def interrupted(_name: str):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "command", interrupted)
    assert cli.main(["up"]) == cli.EXIT_INTERRUPTED == 130
