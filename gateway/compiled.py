"""The per-record path's hot modules, compiled by mypyc beside their sources.

`make install` runs this file (`python gateway/compiled.py`, not as a module: the
package it builds is not imported while it is built). Each compiled module shadows
its source, so the same code runs about a quarter faster (docs/benchmarks.md, "Where
a decision's microseconds go"); without the build, the sources run, giving the same
bytes. mypyc's shared runtime goes inside the package (`gateway/native__mypyc`), so
the compiled modules import from any directory. `--remove` removes the build: the
sources run again. A unit test fails while a compiled module is older than its source.

A dataclass built for every record writes its own `__init__` (`init=False`): mypyc
compiles that one, where the one dataclasses generates runs as Python, six times slower
(test_dataclass_inits.py keeps each in step with its fields).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GROUP = "gateway.native"
# Not compiled: package __init__ modules, which mypyc does not place, and modules whose
# classes cross processes pickled (a compiled frozen dataclass does not unpickle), as
# parsing.py's Limits in the runtime's settings. Tests that replace a compiled function to
# make a record fail run on the sources (test_compiled.py).
MODULES = (
    "gateway/core/canonical.py", "gateway/core/concurrency.py", "gateway/core/debounce.py",
    "gateway/core/decision.py", "gateway/core/decision_records.py",
    "gateway/core/dialects/parse.py", "gateway/core/engine.py", "gateway/core/entries.py",
    "gateway/core/envelope.py", "gateway/core/errors.py", "gateway/core/fingerprint.py",
    "gateway/core/holder.py", "gateway/core/idempotency.py", "gateway/core/ids.py",
    "gateway/core/jobs.py", "gateway/core/limits.py", "gateway/core/matching.py",
    "gateway/core/periods.py", "gateway/core/policy.py", "gateway/core/request.py",
    "gateway/core/retry.py", "gateway/core/states.py", "gateway/core/successor.py",
    "gateway/core/times.py", "gateway/core/updates.py", "gateway/partitioner.py",
    "gateway/processor/emitter.py", "gateway/processor/loop.py", "gateway/processor/metrics.py",
    "gateway/processor/stages.py", "gateway/processor/store.py", "gateway/stage/context.py",
    "gateway/stage/dedup.py", "gateway/stage/due.py", "gateway/stage/idempotency.py",
    "gateway/stage/ids.py", "gateway/stage/kinds.py", "gateway/stage/records.py",
    "gateway/stage/reports.py",
    "gateway/stage/requests.py", "gateway/stage/schedule.py", "gateway/stage/shared.py",
    "gateway/stage/total.py", "gateway/stage/trail.py", "gateway/wire.py",
)  # fmt: skip


def built() -> list[Path]:
    """The compiled files this build leaves in the package."""
    found = []
    for suffix in EXTENSION_SUFFIXES:
        found += [ROOT / (m[: -len(".py")] + suffix) for m in MODULES]
        found.append(ROOT / (GROUP.replace(".", "/") + "__mypyc" + suffix))
    return [path for path in found if path.exists()]


def remove() -> None:
    for path in built():
        path.unlink()


@contextmanager
def _saying_every(seconds: float) -> Iterator[None]:
    """A line every `seconds` while the build runs: a long silence reads as a hang."""
    began, done = time.monotonic(), threading.Event()

    def say() -> None:
        while not done.wait(seconds):
            print(f"  still compiling ({time.monotonic() - began:.0f} s)", flush=True)

    threading.Thread(target=say, daemon=True).start()
    try:
        yield
    finally:
        done.set()
        print(f"compiled in {time.monotonic() - began:.0f} s", flush=True)


def build() -> None:
    from mypyc.build import mypycify
    from setuptools import setup

    remove()
    print(f"compiling {len(MODULES)} modules of the per-decision path with mypyc (a few "
          "minutes; `make uncompiled` runs the sources instead)", flush=True)  # fmt: skip
    with _saying_every(10.0):
        setup(
            name="gateway-compiled",
            packages=[],
            py_modules=[],
            ext_modules=mypycify(list(MODULES), group_name=GROUP),
            script_args=["--quiet", "build_ext", "--inplace"],
        )
    for path in built():  # setuptools copies a module it did not rebuild with its old time
        path.touch()


if __name__ == "__main__":
    import os

    # Run as a file, its own folder comes first on the path: gateway/logs.py would then be
    # anyone's `import logs`.
    sys.path = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "gateway"]
    os.chdir(ROOT)
    if sys.argv[1:] == ["--remove"]:
        remove()
    else:
        build()
