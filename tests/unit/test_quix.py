"""The adapter to quixstreams' private parts finds them in the pinned version, and names
what is missing in another."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from quixstreams import Application
from quixstreams.processing import ProcessingContext

from gateway.processor import quix


def runtime(tmp_path: Path) -> tuple[Application, object]:
    app = Application(
        broker_address="127.0.0.1:1", consumer_group="g", state_dir=str(tmp_path),
        auto_create_topics=False,
    )  # fmt: skip
    # A dataframe needs a topic, and a topic the broker; the check reads only its context's class.
    return app, SimpleNamespace(processing_context=object.__new__(ProcessingContext))


def test_the_pinned_quixstreams_has_what_the_processor_relies_on(tmp_path: Path):
    app, sdf = runtime(tmp_path)
    quix.check(app, sdf)  # type: ignore[arg-type]
    assert len(quix.rebalance_hooks(app)) == 3 and not quix.has_failed(app)


def test_a_quixstreams_without_them_fails_at_start_naming_each(tmp_path: Path):
    app, sdf = runtime(tmp_path)
    del app._failed
    with pytest.raises(quix.RuntimeMismatch, match=r"lacks Application\._failed;.*3\.28\.1"):
        quix.check(app, sdf)  # type: ignore[arg-type]
