"""`gateway bench --quick` runs every system and writes consistent results (no timing asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from gateway.bench.services import TOOLS

pytestmark = pytest.mark.kafka


@pytest.mark.skipif(
    any(tool.find() is None for tool in TOOLS.values()),
    reason="needs redis-server, postgres and wrk (`gateway bench --install-missing` installs "
    "them from Debian's packages)",
)
def test_quick_bench_runs_every_system_and_counts_agree(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    topics_before = _topics(admin)
    done = subprocess.run(
        [sys.executable, "-m", "gateway", "bench", "--quick", "--bootstrap", kafka_bootstrap,
         "--output", str(tmp_path), "--figures", "fingerprint,restore,audit", "--requests", "1000",
         "--restore-keys", "500"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (run,) = tmp_path.iterdir()
    result = json.loads((run / "results.json").read_text())
    workload = result["workload"]
    rounds = {r["system"]: r for r in result["rounds"]}
    # --quick measures answers early only (--answers early,committed compares the modes).
    assert {
        "gateway", "passthrough", "redis", "postgres", "http c=64 early", "http batch c=4 early",
        "http fetch early", "sdk answer early",
    } <= set(rounds)  # fmt: skip
    gateway = rounds["gateway"]
    assert gateway["outcomes"]["accepted"] == workload["distinct_keys"]
    duplicates = gateway["outcomes"].get("rejected", 0) + gateway["outcomes"].get("ignored", 0)
    assert duplicates == workload["duplicates"] > 0
    assert rounds["redis"]["duplicates"] == rounds["postgres"]["duplicates"] == duplicates
    # Outputs plus changelog: at least the decision and the job or rejection.
    assert gateway["records_per_request"] >= 2
    # The passthrough writes what the one-process gateway round wrote per request.
    assert rounds["passthrough"]["records_per_request"] == pytest.approx(
        gateway["records_per_request"], rel=0.01
    )
    for system in ("gateway", "passthrough", "sdk answer early"):
        assert set(rounds[system]["latency_ms"]) >= {"p50", "p95", "p99"}
    # Every SDK answer was checked; the paced jobs hold repeats too.
    sdk = rounds["sdk answer early"]
    assert 0 < sdk["outcomes"]["accepted"] < sdk["requests"] == sum(sdk["outcomes"].values())
    statuses = rounds["http c=64 early"]["statuses"]
    assert set(statuses) <= {"200", "201", "409"} and sum(statuses.values()) > 0
    assert rounds["http c=64 early"]["cpu_serve_s"] > 0
    fetch = rounds["http fetch early"]
    assert fetch["claimed"] > 0 and set(fetch["statuses"]) == {"200"}
    assert result["figures"]["decisions/s, gateway ÷ passthrough"]["value"]["median"] > 0
    assert result["versions"]["redis"] and result["versions"]["postgres"]
    assert result["figures"]["state on disk per key (bytes)"]["value"] > 0
    assert result["figures"]["replay, 1,000 requests (decisions/s)"]["value"]["median"] > 0
    table = (run / "results.md").read_text()
    assert "| gateway |" in table and "| postgres |" in table
    assert (run / "throughput.png").stat().st_size > 0 and (run / "latency.png").exists()
    assert "results in" in done.stdout.splitlines()[-1]
    # Each row deleted its topics: the cluster is left as the bench found it (once the
    # deletions reach the broker's metadata), but for Kafka's own topics, which the
    # first group and transaction on a new cluster create.
    deadline = time.monotonic() + 30
    while (left := _topics(admin) - topics_before) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left


def _topics(admin: AdminClient) -> set[str]:
    return {t for t in admin.list_topics(timeout=30).topics if not t.startswith("__")}
