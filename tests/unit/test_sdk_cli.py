"""`gateway enqueue` without a broker: local validation and failures exit non-zero with one line."""

from __future__ import annotations

import io
import sys

import pytest

from gateway.cli import main


def run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], stdin: bytes, *argv: str
) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    code = main(["enqueue", "--bootstrap", "127.0.0.1:1", *argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    ("stdin", "argv", "line"),
    [
        (b'{"type": "t"}', (), "invalid_request: args is required"),
        (b"{not json", (), "invalid_request: the job on stdin is not valid JSON"),
        (b"", ("--type", "t", "--args", "{x"), "invalid_request: --args is not valid JSON"),
        (b"", ("--type", "t", "--unique", '{"keys": ["meta"]}'), "invalid_request: unique.meta"),
        (b"", ("--args", "[]"), "invalid_request: --args, --unique and --queue need --type"),
        (
            b"",
            ("--type", "t", "--idempotency-key", "k" * 257),
            "invalid_request: --idempotency-key must be 1 to 256 characters",
        ),
    ],
)
def test_an_invalid_job_exits_2_naming_the_problem(monkeypatch, capsys, stdin, argv, line):
    code, out, err = run(monkeypatch, capsys, stdin, *argv)
    assert (code, out) == (2, "")
    assert err.startswith(line) and err.count("\n") == 1


def test_kafka_out_of_reach_is_one_line_and_exit_3(monkeypatch, capsys):
    code, out, err = run(monkeypatch, capsys, b"", "--type", "t", "--timeout", "1")
    assert (code, out) == (3, "")
    assert err.startswith("gateway: no Kafka broker answered at 127.0.0.1:1 within 5s")
    assert "start one with: gateway kafka up" in err and err.count("\n") == 1
