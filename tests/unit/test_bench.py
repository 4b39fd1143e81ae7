"""The bench's pure parts: the workload it generates and how it reports rounds."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest

from gateway.bench import procfs, report
from gateway.bench.run import answer_ratios, passthrough_ratio, process_ratios
from gateway.bench.workload import generate
from gateway.core import Request, parse_request_json


def test_workload_repeats_the_asked_share_and_is_the_same_for_the_same_seed() -> None:
    workload = generate(2000, 0.3, seed=5)
    assert workload.items == generate(2000, 0.3, seed=5).items
    assert len(workload.items) == 2000
    assert workload.duplicates == 2000 - len({i.key for i in workload.items})
    assert 0.25 < workload.duplicates / 2000 < 0.35
    # A repeat is the same job, so the gateway computes the same key for it.
    for item in workload.items[:50]:
        request = parse_request_json(item.value)
        assert isinstance(request, Request) and request.unique_key == item.key


def test_a_tag_makes_every_key_new() -> None:
    first, second = generate(300, 0.3, seed=5), generate(300, 0.3, seed=5, tag="x")
    assert not {i.key for i in first.items} & {i.key for i in second.items}


def test_summary_gives_median_and_spread_per_request() -> None:
    rounds = [
        {"system": "gateway", "requests": 1000, "rate": r, "cpu_process_s": c,
         "cpu_broker_s": None, "latency_ms": {"p50": 10.0, "p95": 20.0, "p99": 30.0}}
        for r, c in ((100.0, 0.1), (300.0, 0.3), (200.0, 0.2))
    ]  # fmt: skip
    summary = report.summarise(rounds)["gateway"]
    assert summary["rate"] == {"median": 200.0, "min": 100.0, "max": 300.0}
    assert summary["cpu_system_us"]["median"] == pytest.approx(200.0)
    assert summary["cpu_broker_us"] is None
    assert summary["latency_ms"]["p99"]["median"] == 30.0


def test_cpu_of_this_process_is_read_from_proc() -> None:
    if not os.path.exists("/proc/self/stat"):
        pytest.skip("no /proc")
    before = procfs.cpu_seconds(os.getpid())
    sum(i * i for i in range(2_000_000))
    after = procfs.cpu_seconds(os.getpid())
    assert before is not None and after is not None and after > before
    assert procfs.peak_rss_bytes(os.getpid()) > 0


def test_cpu_of_a_process_counts_its_children() -> None:
    if not os.path.exists("/proc/self/stat"):
        pytest.skip("no /proc")
    # The child burns some CPU, says so, then idles: its count stands still while read.
    child = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; sum(i * i for i in range(3_000_000)); print(flush=True); "
         "time.sleep(60)"],
        stdout=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert child.stdout is not None and child.stdout.readline() == b"\n"
        own = procfs.cpu_seconds(child.pid, children=False)
        me = procfs.cpu_seconds(os.getpid(), children=False)
        tree = procfs.cpu_seconds(os.getpid())
        assert own is not None and me is not None and tree is not None and own > 0
        # Within two clock ticks: /proc rounds each process's time to ticks on its own.
        assert tree + 2 / os.sysconf("SC_CLK_TCK") >= me + own
    finally:
        child.kill()
        child.wait()


def test_processes_are_compared_to_one_round_by_round() -> None:
    rows = [
        {"system": "gateway", "round": 1, "rate": 100.0},
        {"system": "gateway×2", "round": 1, "rate": 180.0},
        {"system": "passthrough", "round": 1, "rate": 900.0},
        {"system": "gateway", "round": 2, "rate": 50.0},
        {"system": "gateway×2", "round": 2, "rate": 100.0},
    ]
    assert process_ratios(rows) == {
        "decisions/s, 2 processes ÷ 1": {"median": 1.9, "min": 1.8, "max": 2.0}
    }
    assert process_ratios(rows[2:3]) == {}


def test_cpu_per_decision_is_compared_to_one_process_too() -> None:
    rows = [
        {"system": "gateway", "round": 1, "rate": 100.0, "requests": 1000, "cpu_process_s": 0.1},
        {"system": "gateway×2", "round": 1, "rate": 150.0, "requests": 1000,
         "cpu_process_s": 0.12},
    ]  # fmt: skip
    ratios = process_ratios(rows)
    cpu = ratios["CPU per decision, 2 processes ÷ 1"]
    assert cpu is not None
    assert cpu["median"] == pytest.approx(1.2)


def test_the_gateway_is_compared_to_the_passthrough_round_by_round() -> None:
    rows = [
        {"system": "gateway", "round": 1, "rate": 100.0},
        {"system": "gateway×2", "round": 1, "rate": 500.0},
        {"system": "passthrough", "round": 1, "rate": 1000.0},
        {"system": "gateway", "round": 2, "rate": 300.0},
        {"system": "passthrough", "round": 2, "rate": 1000.0},
        {"system": "gateway", "round": 3, "rate": 300.0},
    ]
    assert passthrough_ratio(rows) == {
        "decisions/s, gateway ÷ passthrough": {"median": 0.2, "min": 0.1, "max": 0.3}
    }
    assert passthrough_ratio(rows[:2]) == {}


def test_answer_modes_are_compared_per_load_and_round() -> None:
    def row(system: str, mode: str, number: int, p50: float, rate: float) -> dict[str, Any]:
        return {"system": f"{system} {mode}", "answers": mode, "round": number, "rate": rate,
                "latency_ms": {"p50": p50, "p99": p50 * 2}}  # fmt: skip

    rows = [
        row("sdk answer", "early", 1, 10.0, 50.0), row("sdk answer", "committed", 1, 100.0, 50.0),
        row("http c=16", "early", 1, 5.0, 900.0), row("http c=16", "committed", 1, 50.0, 300.0),
        row("http c=64", "early", 1, 5.0, 900.0),  # measured in the first mode only
        row("sdk answer", "early", 2, 20.0, 50.0), row("sdk answer", "committed", 2, 100.0, 50.0),
        {"system": "gateway", "round": 1, "rate": 100.0},
    ]  # fmt: skip
    ratios = answer_ratios(rows)
    assert ratios["sdk answer: p50, early ÷ committed"] == {
        "median": pytest.approx(0.15),
        "min": 0.1,
        "max": 0.2,
    }
    p99 = ratios["sdk answer: p99, early ÷ committed"]
    assert p99 is not None
    assert p99["median"] == pytest.approx(0.15)
    assert "sdk answer: per second, early ÷ committed" not in ratios
    per_second = ratios["http c=16: per second, early ÷ committed"]
    assert per_second is not None
    assert per_second["median"] == 3.0
    assert not any(name.startswith("http c=64") for name in ratios)


def test_a_missing_program_skips_a_system_not_asked_for_and_refuses_one_asked_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gateway.bench import services
    from gateway.cli.bench import _tools
    from gateway.cli.common import CommandError

    monkeypatch.setattr(services.Tool, "find", lambda tool: None if tool.binary == "wrk" else "/x")
    systems = ("gateway", "redis", "http")
    kept, skipped, packages = _tools(systems, asked=False, install=False)
    assert kept == ("gateway", "redis") and packages == []
    assert skipped == ("http: wrk is missing (Debian package wrk); --install-missing installs it",)
    with pytest.raises(CommandError, match="--install-missing"):
        _tools(systems, asked=True, install=False)
    # Only on the opt-in does anything get installed, and the bench names it first.
    assert _tools(systems, asked=True, install=True) == (systems, (), ["wrk"])
    assert _tools(("gateway", "redis"), asked=True, install=False) == (("gateway", "redis"), (), [])


def test_quick_takes_as_long_in_help_as_in_the_readme(capsys: pytest.CaptureFixture[str]) -> None:
    """One claim about --quick's length: the benchmarks page's comment, said by --help."""
    import re
    from pathlib import Path

    from gateway.cli import main

    page = (Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md").read_text()
    [claim] = re.findall(r"gateway bench --quick +# (a smoke run of [^\n]+)", page)
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    options = shown[shown.index("options:") :]
    quick = options[options.index("--quick") : options.index("--output")]
    assert claim in quick, (claim, quick)
