"""`gateway up` refuses taken ports before it starts or prints anything."""

from __future__ import annotations

import argparse
import logging
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest

from gateway import config, logs
from gateway.broker import ports
from gateway.children import Stop
from gateway.cli import main
from gateway.cli.up import _cannot_listen, _watch
from tests.support import free_port_block

# Nothing listens here: were `up` to go on, it would wait for this broker (and exit 3).
NO_BROKER = ("--bootstrap", "127.0.0.1:1")


@pytest.fixture
def taken() -> Iterator[int]:
    """A loopback port something listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def up(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["up", *NO_BROKER, *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_taken_http_port_is_refused_first_with_nothing_printed(capsys, taken):
    code, out, err = up(capsys, "--http-port", str(taken))
    assert (code, out) == (1, "")
    assert err.startswith(f"gateway: cannot listen on 127.0.0.1:{taken} (--http-port): ")
    assert "choose another with --http-port" in err and err.count("\n") == 1


def test_a_taken_metrics_port_is_refused_too(capsys, taken):
    http = free_port_block()
    code, out, err = up(capsys, "--http-port", str(http), "--metrics-port", str(taken))
    assert (code, out) == (1, "")
    assert err.startswith(f"gateway: cannot listen on 127.0.0.1:{taken} (--metrics-port): ")


def test_each_process_port_after_the_metrics_port_is_checked(capsys):
    # With 2 processes, process n listens on P+n: P and P+1 are free, P+2 is taken.
    http, metrics = free_port_block(), free_port_block()  # each a free block of three
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", metrics + 2))
        sock.listen()
        argv = ("--http-port", str(http), "--metrics-port", str(metrics), "--processes", "2")
        code, out, err = up(capsys, *argv)
    assert (code, out) == (1, "")
    assert f"cannot listen on 127.0.0.1:{metrics + 2} (--metrics-port)" in err
    assert "process n listens on P+n" in err


def test_a_free_port_is_free_and_a_taken_one_says_why(taken):
    assert _cannot_listen("127.0.0.1", free_port_block()) is None
    assert _cannot_listen("127.0.0.1", taken) == "Address already in use"
    assert _cannot_listen("127.0.0.1", 0) is not None


def test_make_up_passes_args_on_to_gateway_up():
    """`make up ARGS="--http-port 8081"`: the quick start's ports are not the only ones."""
    import shutil
    import subprocess
    from pathlib import Path

    if shutil.which("make") is None:
        pytest.skip("no make on this machine")
    root = Path(__file__).resolve().parents[2]
    planned = subprocess.run(
        ["make", "-n", "-C", str(root), "up", "ARGS=--http-port 8081 --port 9093"],
        capture_output=True, text=True, check=True,
    ).stdout.splitlines()  # fmt: skip
    assert ".venv/bin/gateway up --http-port 8081 --port 9093" in planned
    plain = subprocess.run(
        ["make", "-n", "-C", str(root), "up"], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert ".venv/bin/gateway up" in [line.strip() for line in plain]


def test_a_start_names_each_taken_port_and_what_it_is_for():
    base = free_port_block()
    with socket.socket() as node, socket.socket() as controller:
        node.bind(("127.0.0.1", base + 1))
        controller.bind(("127.0.0.1", base + 100))
        assert ports.taken(base, brokers=2) == [
            (base + 1, "node 2's"), (base + 100, "node 1's controller"),
        ]  # fmt: skip
    assert ports.taken(base, brokers=2) == []


def test_a_starting_broker_s_warnings_are_said_to_be_expected(caplog):
    kafka = config.KAFKA_LOGGER
    with caplog.at_level(logging.INFO, logger="librdkafka"):
        kafka.warning("%s [%s] %s", "TXNERR", "rdkafka#producer-1", "Failed to acquire "
                      "transactional PID from broker TxnCoordinator/1: Broker: Not coordinator: "
                      "retrying")  # fmt: skip
        kafka.warning("%s [%s] %s", "FAIL", "rdkafka#producer-1", "Connection refused")
    starting, other = caplog.records
    assert (starting.levelname, getattr(starting, "expected", None)) == (
        "INFO", logs.STARTING_NOTE,
    )  # fmt: skip
    assert other.levelname == "WARNING" and not hasattr(other, "expected")


@pytest.mark.parametrize(
    ("code", "stopping", "why"),
    [(3, False, True), (0, False, False), (3, True, False)],
    ids=["died", "its-own-ctrl-c", "after-a-stop"],
)
def test_the_http_binding_ending_stops_up_and_only_a_failure_is_reported(code, stopping, why):
    """A binding that exits 0 took the group's Ctrl-C before `up` handled its own: a stop, not
    a failure; one that fails before any stop is reported. Either way `up` stops."""
    stop, died = Stop(), []
    if stopping:
        stop.request()
    http = subprocess.Popen([sys.executable, "-c", f"raise SystemExit({code})"])
    _watch(http, argparse.Namespace(http_host="127.0.0.1", http_port=1), stop, died)
    assert stop.requested
    assert bool(died) == why
