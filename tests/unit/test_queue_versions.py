"""Queue command versions: a command sent after another's answer is newer than it, and a
version past any clock is none (it could neither be passed nor printed)."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.core.errors import GatewayError
from gateway.core.limits import MAX_INSTANT_MS
from gateway.core.queues import newer_state, parse_queue_command, version_after, version_of


# Clocks before the year 9000: a version there is none (see the test below).
@given(
    now=st.integers(min_value=0, max_value=MAX_INSTANT_MS - 2),
    held=st.one_of(
        st.none(), st.tuples(st.integers(0, MAX_INSTANT_MS - 2), st.text(min_size=1, max_size=8))
    ),
    command_id=st.text(min_size=1, max_size=8),
)
def test_a_new_version_is_past_the_state_its_sender_saw_and_never_behind_its_clock(
    now: int, held: tuple[int, str] | None, command_id: str
) -> None:
    seen = None if held is None else {"version": list(held)}
    version = version_after(now, command_id, seen)
    assert version[0] >= now and version[1] == command_id
    assert held is None or version > held
    assert newer_state({"version": list(version)}, seen)


@pytest.mark.parametrize("at", [MAX_INSTANT_MS, 2**64 - 1, -1])
def test_a_version_past_any_clock_is_no_version(at: int) -> None:
    assert version_of({"version": [at, "x"]}) is None
    refused = parse_queue_command(
        orjson.dumps({"queue": "q", "paused": True, "version": [at, "x"]})
    )
    assert isinstance(refused, GatewayError)
