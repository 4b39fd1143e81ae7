"""`gateway up` as a user runs it: its own process group, Ctrl-C, and what it wrote."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import orjson


class Up:
    """One `gateway up`, in a process group of its own, like a terminal's foreground job."""

    def __init__(self, workdir: Path, *args: str, env: dict[str, str] | None = None) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.out, self.err = workdir / "up.out", workdir / "up.err"
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "gateway", "up", *args],
                stdout=out, stderr=err, start_new_session=True, env=env,
                preexec_fn=_as_a_terminal_starts_it,
            )  # fmt: skip
        self.started = time.monotonic()

    def get(self, url: str) -> httpx.Response | None:
        """The response, or None while nothing listens yet."""
        try:
            return httpx.get(url, timeout=10)
        except httpx.TransportError:
            assert self.proc.poll() is None, self.stderr()[-3000:]
            return None

    def wait_ready(self, url: str, timeout: float = 120) -> list[httpx.Response]:
        """Poll GET `url` until 200; return every answer seen, the last one the 200."""
        seen: list[httpx.Response] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            answer = self.get(url)
            if answer is not None:
                seen.append(answer)
                if answer.status_code == 200:
                    return seen
            time.sleep(0.2)
        raise AssertionError(f"not ready in {timeout}s: {seen[-1:]}\n{self.stderr()[-3000:]}")

    def interrupt(self, timeout: float = 60) -> float:
        """Ctrl-C: SIGINT to the whole group; seconds until every process of it is gone."""
        sent = time.monotonic()
        os.killpg(self.proc.pid, signal.SIGINT)
        deadline = sent + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None and not _group_alive(self.proc.pid):
                return time.monotonic() - sent
            time.sleep(0.02)
        self.kill()
        raise AssertionError(f"still running {timeout}s after Ctrl-C:\n{self.stderr()[-3000:]}")

    def kill(self) -> None:
        if _group_alive(self.proc.pid):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stdout(self) -> str:
        return self.out.read_text(errors="replace")

    def stderr(self) -> str:
        return self.err.read_text(errors="replace")

    def log_lines(self) -> list[dict[str, Any]]:
        """Every stderr line, each of which must be a JSON object."""
        lines, other = [], []
        for line in self.stderr().splitlines():
            try:
                lines.append(orjson.loads(line))
            except orjson.JSONDecodeError:
                other.append(line)
        assert not other, "lines on stderr that are not JSON:\n" + "\n".join(other)
        return lines


def _as_a_terminal_starts_it() -> None:
    """Ctrl-C at its default, as a shell leaves it for a foreground job: a suite run in the
    background (`nohup`, `&`) passes SIGINT down ignored, and a Ctrl-C while `up` still
    imports would then be lost, not what a user at a terminal meets."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _group_alive(pgid: int) -> bool:
    """Whether any process of group `pgid` is still running (zombies do not count)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False
