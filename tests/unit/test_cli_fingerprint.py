"""`gateway fingerprint`: one job on stdin, the key on stdout, exit 2 on invalid input."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.cli import main

WORKED_EXAMPLE = {
    "type": "email.send",
    "queue": "notifications",
    "args": {"user_id": 42, "template": "welcome"},
    "unique": {"keys": ["type", "queue", "args"], "args_keys": ["user_id"]},
}
WORKED_KEY = "71f9344b82e66297a49775bbe27752297922842b675330641ebe3ff4fea46c1f"


def run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], stdin: bytes, *argv: str
) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    code = main(["fingerprint", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_prints_the_key_of_an_ojs_envelope(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(monkeypatch, capsys, json.dumps(WORKED_EXAMPLE).encode()) == (
        0, WORKED_KEY + "\n", "",
    )  # fmt: skip


def test_reads_the_http_form(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    http_form = {
        "type": "email.send",
        "args": {"user_id": 42, "template": "welcome"},
        "options": {"queue": "notifications", "unique": WORKED_EXAMPLE["unique"]},
    }
    assert run(monkeypatch, capsys, json.dumps(http_form).encode())[:2] == (0, WORKED_KEY + "\n")


def test_canonical_prints_what_is_hashed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(monkeypatch, capsys, json.dumps(WORKED_EXAMPLE).encode(), "--canonical")
    assert code == 0
    assert out == '{"args":{"user_id":42},"queue":"notifications","type":"email.send"}\n'


@pytest.mark.parametrize(
    ("stdin", "stderr"),
    [
        (
            b'{"type": "t", "args": [], "unique": {"keys": ["type", "meta"]}}',
            'invalid_request: unique.meta_keys is required when unique.keys contains "meta"\n',
        ),
        (
            b'{"type": "t", "args": {"a": 1}, "unique": {"keys": ["args"], "args_keys": ["b"]}}',
            'invalid_request: unique.args_keys names "b", not present in args; add it to args '
            "or remove it from unique.args_keys\n",
        ),
        (b'{"args": []}', "invalid_request: type is required"),
        (b'{"type": "t", "args": []}', "invalid_request: the job has no unique policy"),
        (b"{not json", "invalid_request: the request is not valid JSON"),
        (b"", "invalid_request: the request is not valid JSON"),
    ],
)
def test_invalid_input_exits_2_with_one_line_on_stderr(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], stdin: bytes, stderr: str
) -> None:
    code, out, err = run(monkeypatch, capsys, stdin)
    assert (code, out) == (2, "")
    assert err.startswith(stderr) and err.count("\n") == 1


def test_the_installed_command_line(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-m", "gateway", "fingerprint"],
        input=json.dumps(WORKED_EXAMPLE).encode(),
        capture_output=True,
        cwd=root,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout.decode()) == (0, WORKED_KEY + "\n")
