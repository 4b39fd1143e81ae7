"""The events cursor: its text form, and what a reader at a cursor is given back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.view.event_cursor import (
    MAX_CHARS,
    MAX_INDEX,
    MAX_OFFSET,
    MAX_PARTITION,
    Cursor,
    format_cursor,
    parse,
    passed,
)
from gateway.view.event_feed import EVENT_PREFIX, WINDOW_PREFIX, EventFeed
from gateway.view.store import JobView

positions = st.tuples(st.integers(0, MAX_OFFSET), st.integers(0, MAX_INDEX))
cursors = st.dictionaries(st.integers(0, MAX_PARTITION), positions, min_size=1, max_size=40)


@given(st.text())
def test_any_text_is_a_cursor_or_says_what_is_wrong(text: str):
    parsed = parse(text)
    assert isinstance(parsed, dict | str)
    if isinstance(parsed, dict):  # and then its canonical form means the same
        assert parse(format_cursor(parsed)) == parsed


@given(cursors)
def test_a_cursor_reads_back_as_itself(cursor: Cursor):
    text = format_cursor(cursor)
    assert parse(text) == cursor
    assert format_cursor(cursor) == text and "\n" not in text and text


def test_the_empty_cursor_is_written_as_the_start_not_as_nothing():
    assert format_cursor({}) == "0:0" and parse("0:0") == {0: (0, 0)}


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "is not a cursor"),
        ("42", "is not a cursor"),  # an id of the version that numbered events per process
        ("-1:5", "is not a cursor"),
        ("0:-5", "is not a cursor"),
        ("0:5.-1", "is not a cursor"),
        ("0:05", "is not a cursor"),
        ("0: 5", "is not a cursor"),
        ("0:5,", "is not a cursor"),
        ("0:1_000", "is not a cursor"),
        ("0:١٢", "is not a cursor"),  # digits, but not ASCII ones
        ("0:5\n1:2", "is not a cursor"),
        ("1:5,0:2", "out of order or twice"),
        ("0:5,0:6", "out of order or twice"),
        (f"{MAX_PARTITION + 1}:0", "beyond"),
        (f"0:{MAX_OFFSET + 1}", "beyond"),
        (f"0:0.{MAX_INDEX + 1}", "beyond"),
        ("0:" + "9" * 30, "is not a cursor"),
        ("0:0," * 2000, f"a cursor is at most {MAX_CHARS}"),
    ],
)
def test_malformed_cursors_say_what_is_wrong(text: str, problem: str):
    parsed = parse(text)
    assert isinstance(parsed, str) and problem in parsed


def test_index_zero_may_be_written_and_is_left_out():
    assert parse("0:5.0,3:7.2") == {0: (5, 0), 3: (7, 2)}
    assert format_cursor({0: (5, 0), 3: (7, 2)}) == "0:5,3:7.2"


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 50), st.integers(0, 2))))
def test_passing_an_event_never_moves_a_cursor_back(events: list[tuple[int, int, int]]):
    cursor: Cursor = {}
    for partition, offset, index in events:
        before = dict(cursor)
        passed(cursor, partition, offset, index)
        assert cursor[partition] >= (offset, index + 1)
        assert all(cursor[p] >= at for p, at in before.items())


# -- the feed: what a reader at a cursor gets --------------------------------------------


def job(job_id: str, state: str) -> dict[str, Any]:
    return {"id": job_id, "type": "t", "queue": "q", "state": state, "attempt": 1}


def record(
    partition: int, offset: int, job_id: str, state: str
) -> tuple[int, int, bytes, bytes | None]:
    return (partition, offset, job_id.encode(), orjson.dumps(job(job_id, state)))


def opened(path: Path, size: int = 10_000) -> tuple[JobView, EventFeed]:
    """A view and its feed as the app opens them."""
    feed = EventFeed(size)
    view = JobView(path, also_write=feed.stage)
    view.write(feed.load(view.scan(EVENT_PREFIX), view.scan(WINDOW_PREFIX), view.offsets()))
    return view, feed


# A job per partition moving through its life: available, active, retryable (two
# events: job.failed, job.retrying), available, active, completed.
LIFE = ["available", "active", "retryable", "available", "active", "completed"]


def applied(view: JobView, batches: list[list[tuple[int, int, bytes, bytes | None]]]) -> None:
    for batch in batches:
        view.apply(batch, 0)


@given(st.lists(st.integers(0, 2), min_size=1, max_size=18), st.data())
def test_a_reader_resumes_exactly_after_any_event(order: list[int], data: st.DataObject):
    """Three partitions' records read in any interleaving (each partition's in order),
    a reader that saw any prefix of the events: it gets back exactly the rest."""
    feed = EventFeed()
    reached = {0: 0, 1: 0, 2: 0}
    for partition in order:
        offset = reached[partition]
        if offset < len(LIFE):
            before = job(f"j{partition}", LIFE[offset - 1]) if offset else None
            after = job(f"j{partition}", LIFE[offset])
            feed.stage([(partition, offset, before, after)], {partition: offset + 1})
            reached[partition] += 1
    kept, _ = feed.kept()
    cut = data.draw(st.integers(0, len(kept)))
    cursor: Cursor = {}
    for event in kept[:cut]:
        passed(cursor, event.partition, event.offset, event.index)
    text = parse(format_cursor(cursor))
    assert isinstance(text, dict)
    resumed = feed.resume(text)
    assert resumed.events == kept[cut:] and not resumed.missed


def test_a_restarted_process_has_its_window_back_and_resumes_exactly(tmp_path: Path):
    view, feed = opened(tmp_path)
    applied(
        view, [[record(0, o, "a", LIFE[o]) for o in range(3)], [record(1, 0, "b", "available")]]
    )
    kept, end = feed.kept()
    assert [k.event["type"] for k in kept] == [
        "job.enqueued", "job.started", "job.failed", "job.retrying", "job.enqueued",
    ]  # fmt: skip
    assert [k.event["id"] for k in kept[2:4]] == ["evt_0-2-0", "evt_0-2-1"]
    cursor: Cursor = {}
    for k in kept[:3]:  # a reader saw up to job.failed, not job.retrying
        passed(cursor, k.partition, k.offset, k.index)
    view.close()

    view, feed = opened(tmp_path)
    assert feed.kept() == (kept, end)
    applied(view, [[record(0, 3, "a", "available")]])
    resumed = feed.resume(cursor)
    assert [k.event["id"] for k in resumed.events] == [
        "evt_0-2-1", "evt_1-0-0", "evt_0-3-0",
    ]  # fmt: skip
    assert not resumed.missed
    view.close()


def test_a_cursor_older_than_the_window_starts_at_its_oldest_and_says_so(tmp_path: Path):
    view, feed = opened(tmp_path, size=2)
    # 300 events on partition 0: the window keeps the last 2 (evicting in runs of 256).
    applied(view, [[record(0, o, f"j{o}", "available")] for o in range(300)])
    kept, _ = feed.kept()
    assert len(kept) < 300 and kept[-1].offset == 299
    window = (kept[0].offset - 1, 1)  # just past the last event evicted
    resumed = feed.resume({0: (0, 0)})
    assert resumed.missed == {0: window} and resumed.start[0] == window
    assert resumed.events == kept
    assert not feed.resume({0: (kept[0].offset, 0)}).missed  # just at the window: complete
    view.close()
    view, feed = opened(tmp_path, size=2)  # the window's start survives a restart
    assert feed.resume({0: (0, 0)}).missed == {0: window}
    view.close()


def test_a_reader_slower_than_the_window_is_told(tmp_path: Path):
    view, feed = opened(tmp_path, size=2)
    applied(view, [[record(0, 0, "a", "available")]])
    seq = feed.resume({}).seq
    assert feed.since(seq) == []
    applied(view, [[record(0, o, f"j{o}", "available")] for o in range(1, 300)])
    assert feed.since(seq) is None  # events after it were evicted: resume from the cursor
    view.close()


def test_a_view_from_before_windows_were_kept_holds_nothing_before_its_offsets(tmp_path: Path):
    old = JobView(tmp_path)  # no feed: as a version that kept no window wrote it
    old.apply([record(0, 0, "a", "available"), record(1, 0, "b", "available")], 0)
    old.close()
    view, feed = opened(tmp_path)
    assert feed.kept() == ([], {0: (1, 0), 1: (1, 0)})
    assert feed.resume({}).missed == {0: (1, 0), 1: (1, 0)}
    view.close()
    view, feed = opened(tmp_path)  # and says so after a restart too
    assert feed.resume({}).missed == {0: (1, 0), 1: (1, 0)}
    view.close()
