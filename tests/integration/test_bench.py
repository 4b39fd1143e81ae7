"""`gateway bench --quick` runs every system and writes consistent results (no timing asserted)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.kafka


def _can_get(binary: str) -> bool:
    return shutil.which(binary) is not None or (os.geteuid() == 0 and bool(shutil.which("apt-get")))


@pytest.mark.skipif(
    not all(_can_get(b) for b in ("redis-server", "wrk")),
    reason="needs redis-server and wrk, or root with apt-get to install them",
)
def test_quick_bench_runs_every_system_and_counts_agree(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gateway", "bench", "--quick", "--bootstrap", kafka_bootstrap,
         "--output", str(tmp_path), "--figures", "fingerprint,restore", "--requests", "1000",
         "--restore-keys", "500"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (run,) = tmp_path.iterdir()
    result = json.loads((run / "results.json").read_text())
    workload = result["workload"]
    rounds = {r["system"]: r for r in result["rounds"]}
    assert {"gateway", "passthrough", "redis", "postgres", "http c=64", "http batch c=4"} <= set(
        rounds
    )
    gateway = rounds["gateway"]
    assert gateway["outcomes"]["accepted"] == workload["distinct_keys"]
    duplicates = gateway["outcomes"].get("rejected", 0) + gateway["outcomes"].get("ignored", 0)
    assert duplicates == workload["duplicates"] > 0
    assert rounds["redis"]["duplicates"] == rounds["postgres"]["duplicates"] == duplicates
    # Outputs plus changelog: at least the decision and the job or rejection.
    assert gateway["records_per_request"] >= 2
    # The passthrough writes what the gateway round just before it wrote per request
    # (with several process counts, the last of them).
    order = [r["system"] for r in result["rounds"]]
    before = result["rounds"][order.index("passthrough") - 1]
    assert before["system"].startswith("gateway")
    assert rounds["passthrough"]["records_per_request"] == pytest.approx(
        before["records_per_request"], rel=0.01
    )
    for system in ("gateway", "passthrough"):
        assert set(rounds[system]["latency_ms"]) >= {"p50", "p95", "p99"}
    statuses = rounds["http c=64"]["statuses"]
    assert set(statuses) <= {"200", "201", "409"} and sum(statuses.values()) > 0
    assert result["versions"]["redis"] and result["versions"]["postgres"]
    assert result["figures"]["state on disk per key (bytes)"]["value"] > 0
    table = (run / "results.md").read_text()
    assert "| gateway |" in table and "| postgres |" in table
    assert (run / "throughput.png").stat().st_size > 0 and (run / "latency.png").exists()
    assert "results in" in done.stdout.splitlines()[-1]
