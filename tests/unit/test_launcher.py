"""The local broker launcher's parts that need no broker."""

import signal
import subprocess
import sys
import time

from gateway.broker.install import new_cluster_id
from gateway.broker.launcher import _cmdline, _exit


def test_cluster_ids_never_look_like_an_option():
    ids = {new_cluster_id() for _ in range(2000)}
    assert len(ids) == 2000 and not any(i.startswith("-") for i in ids)


def _ended(pid: int) -> str:
    deadline = time.monotonic() + 30
    while (ended := _exit(pid)) is None:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    return ended


def test_a_started_process_is_seen_running_then_told_how_it_ended():
    # Like the launcher, which keeps pids, never Popen objects; read at once
    # after Popen, the command line must not read empty mid-exec.
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    failing = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    assert b"time.sleep(60)" in _cmdline(sleeper.pid)
    assert _exit(sleeper.pid) is None
    sleeper.send_signal(signal.SIGKILL)
    assert _ended(sleeper.pid) == "was killed by SIGKILL"
    assert _ended(failing.pid) == "exited with code 3"
