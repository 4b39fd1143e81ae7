"""The results: a JSON file with every round, a markdown table, PNG charts, one summary line.

Every figure is the median over rounds with its min and max; ratios are to
the gateway's median.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

Row = dict[str, Any]


def spread(values: Iterable[float | None]) -> dict[str, float] | None:
    present = [v for v in values if v is not None]
    if not present:
        return None
    return {"median": statistics.median(present), "min": min(present), "max": max(present)}


def summarise(rounds: list[Row]) -> dict[str, Row]:
    """Per system: rate, CPU per request, latency and record counts, each with its spread."""
    by_system: dict[str, list[Row]] = {}
    for r in rounds:
        by_system.setdefault(r["system"], []).append(r)

    def per_request(rows: list[Row], field: str) -> dict[str, float] | None:
        return spread(
            r[field] / r["requests"] * 1e6 if r.get(field) is not None and r["requests"] else None
            for r in rows
        )

    summary: dict[str, Row] = {}
    for system, rows in by_system.items():
        summary[system] = {
            "rounds": len(rows),
            "rate": spread(r["rate"] for r in rows),
            "cpu_system_us": per_request(rows, "cpu_process_s"),
            "cpu_broker_us": per_request(rows, "cpu_broker_s"),
            "cpu_serve_us": per_request(rows, "cpu_serve_s"),
            "cpu_processor_us": per_request(rows, "cpu_processor_s"),
            "records_per_request": spread(r.get("records_per_request") for r in rows),
            "latency_ms": {
                q: spread(r.get("latency_ms", {}).get(q) for r in rows)
                for q in ("p50", "p95", "p99")
            },
            "latency_rate": spread(r.get("latency_rate") or None for r in rows),
        }
    return summary


def _fmt(s: dict[str, float] | None, digits: int = 0, unit: str = "") -> str:
    if s is None:
        return "–"
    f = f"{{:,.{digits}f}}"
    if s["min"] == s["max"]:
        return f.format(s["median"]) + unit
    return f"{f.format(s['median'])}{unit} [{f.format(s['min'])}–{f.format(s['max'])}]"


def markdown(result: Row) -> str:
    summary: dict[str, Row] = result["summary"]
    gateway = (summary.get("gateway") or {}).get("rate")
    lines = [
        f"# gateway bench, {result['started']}",
        "",
        _workload_line(result),
        "",
        "Median [min–max] over rounds. CPU is per request: the system's own processes "
        "(processor tree, passthrough, redis-server, postgres, or processor + serve) and the "
        "Kafka broker's JVM, from /proc. Latency: request's broker timestamp to committed "
        "decision, at about half the measured rate; sdk answer: from handing the job to "
        "the SDK to its answer, at half the first gateway row's rate or --answer-rate, "
        "and in the paced row at a set pace, whatever the machine drains (their CPU: the "
        "processor's per decision); HTTP: the round trip at "
        "full load (fetch: of the calls that claimed a job).",
        "",
        "| system | per second | × gateway | system CPU µs/req | broker CPU µs/req "
        "| records/req | latency p50 / p95 / p99 ms (at /s) |",
        "|---|---|---|---|---|---|---|",
    ]
    for system, s in summary.items():
        # The SDK answer rows send at a set pace: their rate is no throughput.
        paced = system.startswith("sdk answer")
        ratio = (
            f"{s['rate']['median'] / gateway['median']:.2f}"
            if gateway and s["rate"] and not paced
            else "–"
        )
        lat = s["latency_ms"]
        latency = (
            " / ".join(_fmt(lat[q]) for q in ("p50", "p95", "p99"))
            + (f" (at {_fmt(s['latency_rate'])})" if s["latency_rate"] else "")
            if lat["p50"]
            else "–"
        )
        lines.append(
            f"| {system} | {_fmt(s['rate'])} | {ratio} | {_fmt(s['cpu_system_us'])} "
            f"| {_fmt(s['cpu_broker_us'])} | {_fmt(s['records_per_request'], 2)} | {latency} |"
        )
    http = {n: s for n, s in summary.items() if s.get("cpu_serve_us")}
    if http:
        lines += [
            "",
            "HTTP CPU per job enqueued (fetch: per job claimed), each process with its "
            "descendants:",
            "",
            "| load | per second | serve CPU µs/req | processor CPU µs/decision "
            "| broker CPU µs/req |",
            "|---|---|---|---|---|",
        ]
        for name, s in http.items():
            lines.append(
                f"| {name} | {_fmt(s['rate'])} | {_fmt(s['cpu_serve_us'])} "
                f"| {_fmt(s['cpu_processor_us'])} | {_fmt(s['cpu_broker_us'])} |"
            )
    lines += ["", "| figure | value |", "|---|---|"]
    for name, value in result.get("figures", {}).items():
        lines.append(f"| {name} | {value['text']} |")
    lines += ["", f"Charts: {', '.join(result.get('charts', [])) or 'none'}", ""]
    lines += [f"Skipped: {line}" for line in result["settings"].get("skipped", ())]
    return "\n".join(lines)


def _workload_line(result: Row) -> str:
    w = result["workload"]
    m = result["machine"]
    return (
        f"{w['requests']:,} requests, {w['duplicates']:,} duplicates "
        f"({w['duplicate_share']:.0%}), {w['distinct_keys']:,} keys; "
        f"{result['settings']['rounds']} rounds interleaved; "
        f"{m['cores']} cores, {m['memory_bytes'] / 2**30:.0f} GiB, {m['cpu_model']}; "
        f"Kafka {result['versions'].get('kafka')}, one broker"
    )


def summary_line(result: Row, where: Path) -> str:
    s = result["summary"]
    parts = []
    if "gateway" in s:
        g = s["gateway"]
        parts.append(f"gateway {_fmt(g['rate'])} decisions/s")
        ratio = result.get("figures", {}).get("decisions/s, gateway ÷ passthrough")
        if ratio and ratio["value"]:
            parts.append(f"{_fmt(ratio['value'], 2)}× the passthrough")
        if g["latency_ms"]["p99"]:
            parts.append(f"p99 {g['latency_ms']['p99']['median']:,.0f} ms")
        for mode in result["settings"].get("answers", ()):
            lat = (s.get(f"sdk answer {mode}") or {}).get("latency_ms") or {}
            if lat.get("p50"):
                parts.append(f"SDK answer {mode} p50/p99 {lat['p50']['median']:,.0f}/"
                             f"{lat['p99']['median']:,.0f} ms")  # fmt: skip
        for other in ("redis", "postgres"):
            if other in s:
                parts.append(f"{other} {s[other]['rate']['median'] / g['rate']['median']:.1f}×")
    else:
        parts += [f"{name} {_fmt(v['rate'])}/s" for name, v in s.items()]
    return "; ".join(parts) + f"; results in {where}"


def charts(result: Row, directory: Path) -> list[str]:
    """throughput.png (median with min–max bars) and latency.png (p50/p95/p99 per system)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary: dict[str, Row] = result["summary"]
    written = []
    names = [n for n, s in summary.items() if s["rate"]]
    if names:
        fig, ax = plt.subplots(figsize=(max(6, len(names) * 1.1), 4))
        med = [summary[n]["rate"]["median"] for n in names]
        low = [m - summary[n]["rate"]["min"] for n, m in zip(names, med, strict=True)]
        high = [summary[n]["rate"]["max"] - m for n, m in zip(names, med, strict=True)]
        ax.bar(names, med, yerr=[low, high], capsize=4, color="#4c72b0")
        ax.set_yscale("log")
        ax.set_ylabel("requests decided per second (log)")
        ax.set_title("Throughput: median, bars min–max over rounds")
        plt.setp(ax.get_xticklabels(), rotation=30, ha="right")
        fig.tight_layout()
        written.append(_save(fig, directory / "throughput.png"))
        plt.close(fig)
    with_latency = [n for n, s in summary.items() if s["latency_ms"]["p50"]]
    if with_latency:
        fig, ax = plt.subplots(figsize=(max(6, len(with_latency) * 1.3), 4))
        width = 0.27
        for i, q in enumerate(("p50", "p95", "p99")):
            xs = [x + (i - 1) * width for x in range(len(with_latency))]
            values = [summary[n]["latency_ms"][q]["median"] for n in with_latency]
            ax.bar(xs, values, width, label=q)
        ax.set_xticks(range(len(with_latency)), with_latency, rotation=30, ha="right")
        ax.set_yscale("log")
        ax.set_ylabel("milliseconds (log)")
        ax.set_title("Latency to committed decision (median over rounds)")
        ax.legend()
        fig.tight_layout()
        written.append(_save(fig, directory / "latency.png"))
        plt.close(fig)
    return written


def _save(fig: Any, path: Path) -> str:
    fig.savefig(path, dpi=110)
    return str(path)


def write_json(result: Row, path: Path, default: Callable[[Any], Any] = str) -> None:
    path.write_text(json.dumps(result, indent=2, default=default))
