"""Run by test_compiled.py with `-p tests.sources_only`: the gateway came from its
sources. (Alone, it checks nothing but that it imports.)"""

import sys

import gateway.core.engine


def test_the_gateway_came_from_its_sources_when_asked() -> None:
    if any(type(f).__name__ == "SourcesOnly" for f in sys.meta_path):
        assert str(gateway.core.engine.__file__).endswith(".py")
