"""A view's crons under concurrent commands: an answer that comes after its own record
(and a later one) was read is no news, and never hides the later state."""

from __future__ import annotations

from pathlib import Path

import orjson

from gateway import wire
from gateway.view.store import JobView

KEY = wire.cron_key("nightly")
OFF = {"name": "nightly", "enabled": False, "updated_at": "2026-01-01T00:00:00.000Z"}
ON = {"name": "nightly", "enabled": True, "updated_at": "2026-01-01T00:00:01.000Z"}


def test_an_answer_read_before_it_came_does_not_hide_the_later_state(tmp_path: Path):
    view = JobView(tmp_path)
    try:
        # This process's PATCH (off) and another's (on) were both committed and read
        # before this process's route got round to its own answer.
        view.apply([(0, 0, KEY, orjson.dumps(OFF)), (0, 1, KEY, orjson.dumps(ON))], 0)
        view.control_answered(KEY, OFF)
        assert view.controls(KEY)[""] == ON
    finally:
        view.close()


def test_an_answer_not_read_yet_is_shown_until_its_record_is(tmp_path: Path):
    view = JobView(tmp_path)
    try:
        view.apply([(0, 0, KEY, orjson.dumps(ON))], 0)
        view.control_answered(KEY, OFF)  # answered before its commit: read your own write
        assert view.controls(KEY)[""] == OFF
        view.apply([(0, 1, KEY, orjson.dumps(OFF)), (0, 2, KEY, orjson.dumps(ON))], 0)
        assert view.controls(KEY)[""] == ON
        view.control_answered(KEY, None)  # a delete answered; its tombstone not read yet
        assert "" not in view.controls(KEY)
    finally:
        view.close()
