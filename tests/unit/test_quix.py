"""The adapter to quixstreams' private parts finds them in the pinned version, and names
what is missing in another."""

from __future__ import annotations

from pathlib import Path
from types import MethodType, SimpleNamespace

import pytest
from quixstreams import Application
from quixstreams.processing import ProcessingContext
from quixstreams.state.recovery import RecoveryManager

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


def test_a_quixstreams_whose_recovery_loop_moved_fails_at_start(tmp_path: Path, monkeypatch):
    app, sdf = runtime(tmp_path)
    monkeypatch.delattr(RecoveryManager, "_rewind_data_partition")
    recovery = app._state_manager._recovery_manager
    assert recovery is not None
    del recovery._topic_manager
    with pytest.raises(
        quix.RuntimeMismatch,
        match=r"lacks RecoveryManager\._rewind_data_partition, RecoveryManager\._topic_manager;",
    ):
        quix.check(app, sdf)  # type: ignore[arg-type]


def test_the_runtime_restores_through_the_chunked_loop(tmp_path: Path):
    app, _ = runtime(tmp_path)
    quix.restore_in_chunks(app)
    recovery = app._state_manager._recovery_manager
    assert recovery is not None
    loop = recovery._recovery_loop
    assert isinstance(loop, MethodType)  # a bound method, as the adapter sets it
    assert loop.__func__ is quix._recovery_loop
