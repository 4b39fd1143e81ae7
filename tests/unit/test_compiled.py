"""`make compiled` puts mypyc's build of some modules beside their sources, where it
shadows them: one older than its source would run code that is no longer there."""

import os
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import gateway


def stale(root: Path) -> list[str]:
    """The compiled modules under `root` older than their sources."""
    return [
        str(built.relative_to(root))
        for suffix in EXTENSION_SUFFIXES
        for built in root.rglob(f"*{suffix}")
        if (source := built.with_name(built.name[: -len(suffix)] + ".py")).exists()
        and built.stat().st_mtime < source.stat().st_mtime
    ]


def test_no_compiled_module_is_older_than_its_source() -> None:
    found = stale(Path(gateway.__file__).parent)
    assert found == [], f"rebuild them (make compiled) or remove them (make uncompiled): {found}"


def test_a_compiled_module_older_than_its_source_is_found(tmp_path: Path) -> None:
    (tmp_path / "fresh.py").write_text("")
    (tmp_path / f"fresh{EXTENSION_SUFFIXES[0]}").write_bytes(b"")
    (tmp_path / "edited.py").write_text("")
    built = tmp_path / f"edited{EXTENSION_SUFFIXES[0]}"
    built.write_bytes(b"")
    os.utime(built, (0, 0))
    assert stale(tmp_path) == [built.name]


def test_the_sources_alone_decide_the_recorded_log_byte_for_byte() -> None:
    """Where `make install` compiled the hot modules, the tests run them compiled; the
    sources they shadow must give the same bytes: the differential log and the audit
    trail's replay, run again on the sources alone, with the tests that replace a
    compiled function to make a record fail."""
    import subprocess
    import sys

    root = Path(gateway.__file__).parent.parent
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
         "tests.sources_only", "tests/unit/test_differential.py",
         "tests/unit/test_trail_replay.py", "tests/unit/test_sources_only.py",
         "tests/unit/test_total.py", "tests/unit/test_early_answers.py",
         "tests/unit/test_replay.py", "tests/unit/test_dataclass_inits.py"],
        cwd=root, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
