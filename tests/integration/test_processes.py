"""`gateway process --processes 2`: two runtimes in one group, supervised as one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.processor.shutdown import EXIT_CONFIG
from tests.integration.harness import DuplicateLoad, Processor, apply_topics
from tests.support import free_port_block

pytestmark = pytest.mark.kafka

RESTART_LINE = "processor runtime exited; restarting"


def ready(port: int) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=3) as r:
            return r.status, orjson.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, orjson.loads(exc.read())
    except (urllib.error.URLError, OSError):
        return 0, {}


def wait_until_all_ready(proc: Processor, port: int, timeout: float = 120) -> list[int]:
    """Every runtime's own /ready and the supervisor's answer 200; each runtime's partitions."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.alive, proc.log()
        answers = [ready(port + n) for n in (0, 1, 2)]
        if all(status == 200 for status, _ in answers):
            whole, *each = [body["partitions"] for _, body in answers]
            assert whole == sum(each)
            return each
        time.sleep(0.5)
    raise AssertionError(f"not ready in {timeout}s: {answers}\n{proc.log()}")


def metric_names(port: int) -> set[str]:
    """The metric families /metrics shows on `port` (creation times left out)."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=3) as r:
        text = r.read().decode()
    return {f.name for f in text_string_to_metric_families(text) if not f.name.endswith("_created")}


def runtimes(supervisor: int) -> list[int]:
    """The supervisor's child processes, from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat[stat.rindex(")") + 2 :].split()[1]) == supervisor:
            found.append(int(entry.name))
    return found


def test_two_processes_share_the_partitions_and_a_killed_one_is_restarted(
    kafka_bootstrap, namespace, tmp_path
):
    cat = apply_topics(kafka_bootstrap, namespace)
    port = free_port_block()
    proc = Processor(
        kafka_bootstrap, namespace, tmp_path, "m", "--processes", "2", "--metrics-port", str(port)
    ).start(wait=False)
    load = DuplicateLoad(kafka_bootstrap, cat, keys=600, copies=3)
    killed: list[int] = []

    def disturb(batch: int) -> None:
        if batch == 6:
            assert proc.proc is not None
            first, second = runtimes(proc.proc.pid)
            os.kill(second, signal.SIGKILL)  # no flush, no commit, no goodbye
            killed.append(second)

    try:
        # Both own partitions: the group gave each runtime a share.
        assert all(n > 0 for n in wait_until_all_ready(proc, port))
        # The added-up port shows every metric a runtime's own port shows.
        own = metric_names(port + 1)
        assert {"gateway_dead_letters", "gateway_refused_inputs"} <= own
        assert {"gateway_restore_remaining", "gateway_decisions"} <= own
        assert metric_names(port) == own
        load.run(disturb=disturb)
        counts = load.check()
        # The supervisor lives on; the killed runtime came back beside the other.
        assert proc.alive and RESTART_LINE in proc.log()
        assert all(n > 0 for n in wait_until_all_ready(proc, port))
        assert proc.proc is not None
        now = runtimes(proc.proc.pid)
        assert len(now) == 2 and killed[0] not in now
        state = sorted(p.name for p in (tmp_path / "state-m").iterdir())
        assert state == ["m-1", "m-2"]
    finally:
        proc.stop()
    assert counts["requests"] == 1800
    assert proc.proc.returncode == 0, proc.log()


def test_a_deployment_refused_by_the_runtimes_stops_them_all_with_78(kafka_bootstrap, namespace):
    # No topics applied: every runtime refuses to start, and none is restarted.
    done = subprocess.run(
        [sys.executable, "-m", "gateway", "process", "--bootstrap", kafka_bootstrap,
         "--namespace", namespace, "--processes", "2"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == EXIT_CONFIG, done.stderr[-3000:]
    assert RESTART_LINE not in done.stderr
