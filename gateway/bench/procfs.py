"""CPU time, memory and machine facts, read from /proc (Linux)."""

from __future__ import annotations

import os
import platform
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces; everything after its ')' splits cleanly.
    return text[text.rindex(")") + 2 :].split()


def tree(pid: int) -> list[int]:
    """The process and its live descendants."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := _stat(int(entry.name))) is not None:
            parents.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(parents.get(current, []))
    return found


def cpu_seconds(pid: int | None, children: bool = True) -> float | None:
    """User + system CPU of a process (all its threads), with its descendants' if asked.

    Descendants count whether alive (their own times) or exited and reaped
    (in their parent's cutime/cstime).
    """
    if pid is None:
        return None
    total = 0
    for member in tree(pid) if children else [pid]:
        fields = _stat(member)
        if fields is None:
            continue
        # Fields 14-17 of stat (utime, stime, cutime, cstime), counted after the name.
        utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
        total += utime + stime + (cutime + cstime if children else 0)
    return total / _TICK


def peak_rss_bytes(pid: int) -> int:
    """The largest resident set of any process in the tree (VmHWM)."""
    return max(_status_bytes(pid, "VmHWM:"), default=0)


def tree_rss_bytes(pid: int) -> int:
    """The resident memory of a process and its descendants together, now (VmRSS)."""
    return sum(_status_bytes(pid, "VmRSS:"))


def _status_bytes(pid: int, field: str) -> list[int]:
    """A memory field of /proc/<pid>/status, in bytes, for each live process of the tree."""
    found = []
    for member in tree(pid):
        try:
            status = Path(f"/proc/{member}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith(field):
                found.append(int(line.split()[1]) * 1024)
    return found


def directory_bytes(path: Path) -> int:
    """Bytes the files under `path` take on disk (allocated blocks, as du counts)."""
    return sum(f.stat().st_blocks * 512 for f in path.rglob("*") if f.is_file())


def machine() -> dict[str, object]:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory = int(line.split()[1]) * 1024
    except OSError:
        pass
    return {
        "cores": os.cpu_count(),
        "cpu_model": model,
        "memory_bytes": memory,
        "kernel": platform.release(),
        "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None,
    }
