"""How far a long read has come, on stderr: a bar on a terminal, else a line every few
seconds, so no long step is silent (a log file or CI reads stderr too)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

LONG_READ = 10_000  # records; shorter reads show no progress
LINE_EVERY_S = 5.0

Advance = Callable[[int], None]


@contextmanager
def progress_bar(total: int, what: str) -> Iterator[Advance | None]:
    """`advance(n)` after each n records read of `total`; None when the read is short."""
    if total < LONG_READ:
        yield None
        return
    console = Console(stderr=True)
    if not console.is_terminal:
        yield _lines(total, what)
        return
    columns = (TextColumn(what), BarColumn(), MofNCompleteColumn(),
               TimeRemainingColumn())  # fmt: skip
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task("read", total=total)
        yield lambda n: bar.advance(task, n)


def _lines(total: int, what: str) -> Advance:
    """A line at the start, then one every LINE_EVERY_S with the share done and the time
    left at the pace so far."""
    began = time.monotonic()
    state = {"done": 0, "said": began}
    print(f"{what}: {total:,} records to read", file=sys.stderr, flush=True)

    def advance(n: int) -> None:
        state["done"] += n
        now = time.monotonic()
        if now - state["said"] < LINE_EVERY_S:
            return
        state["said"] = now
        done = state["done"]
        left = (now - began) * max(0, total - done) / max(done, 1)
        print(f"{what}: {done:,} of {total:,} ({100 * done / total:.0f}%), "
              f"about {left:.0f} s left", file=sys.stderr, flush=True)  # fmt: skip

    return advance
