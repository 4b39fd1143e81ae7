"""A pytest plugin (`-p tests.sources_only`) that imports the gateway from its sources
alone, whatever `make install` compiled beside them (gateway/compiled.py)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib.abc import MetaPathFinder
from importlib.machinery import SOURCE_SUFFIXES, FileFinder, ModuleSpec, SourceFileLoader
from types import ModuleType


class SourcesOnly(MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname != "gateway" and not fullname.startswith("gateway."):
            return None
        for entry in path if path is not None else sys.path:
            spec = FileFinder(entry or ".", (SourceFileLoader, SOURCE_SUFFIXES)).find_spec(fullname)
            if spec is not None:
                return spec
        return None


assert "gateway" not in sys.modules, "load this plugin before the gateway is imported"
sys.meta_path.insert(0, SourcesOnly())
