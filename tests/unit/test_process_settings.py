"""`gateway process` settings that reach the processor loop's clients."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from gateway.cli import process
from gateway.cli.common import CommandError
from gateway.config import (
    COMMITTED_LINGER_MS,
    DEFAULT_FETCH_WAIT_MS,
    DEFAULT_LINGER_MS,
    FETCH_MIN_BYTES,
    MAX_FETCH_WAIT_MS,
    MAX_LINGER_MS,
)
from gateway.processor.app import runtime_settings


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    process.add_arguments(parser)
    return parser.parse_args(list(argv))


def _producer(
    client_linger_ms: int | None = None, linger_ms: int | None = None
) -> dict[str, object]:
    """The transactional producer's settings (None: the setting is left out)."""
    client: dict[str, object] = {"bootstrap.servers": "127.0.0.1:9"}
    if client_linger_ms is not None:
        client["linger.ms"] = client_linger_ms
    own: dict[str, Any] = {} if linger_ms is None else {"linger_ms": linger_ms}
    _consumer, producer = runtime_settings(client, "g", "1", **own)
    # The loop's one producer is the transactional one.
    assert producer["transactional.id"] == "g-1"
    return producer


def test_linger_defaults_by_answer_mode_and_reaches_the_transactional_producer() -> None:
    # Early answers leave no caller waiting for the commit: outputs wait a commit interval.
    assert process.linger_ms_of(_args()) == DEFAULT_LINGER_MS == 100
    # Committed answers wait for what the commit sends: librdkafka's own 5 ms.
    assert process.linger_ms_of(_args("--answers", "committed")) == COMMITTED_LINGER_MS == 5
    assert process.linger_ms_of(_args("--answers", "committed", "--linger-ms", "0")) == 0
    assert _producer()["linger.ms"] == DEFAULT_LINGER_MS
    assert _producer(linger_ms=50)["linger.ms"] == 50


@pytest.mark.parametrize("value", ["-1", str(MAX_LINGER_MS + 1)])
def test_linger_out_of_range_is_refused_before_kafka_is_asked(value: str) -> None:
    with pytest.raises(CommandError, match="--linger-ms must be from 0 to 1000"):
        process.settings_from(_args("--linger-ms", value))


def test_linger_overrides_the_clients_shared_setting() -> None:
    # GATEWAY_KAFKA_LINGER_MS sets every client's linger; the processor's own flag wins.
    assert _producer(client_linger_ms=200, linger_ms=20)["linger.ms"] == 20


def _consumer(*argv: str) -> dict[str, object]:
    wait = _args(*argv).fetch_wait_ms
    consumer, _producer = runtime_settings(
        {"bootstrap.servers": "127.0.0.1:9"}, "g", "1", fetch_wait_ms=wait
    )
    return consumer


def test_the_fetch_wait_reaches_the_loops_consumer() -> None:
    # By default librdkafka's own: a fetch answered as soon as a record is there.
    assert DEFAULT_FETCH_WAIT_MS == 0
    assert "fetch.wait.max.ms" not in _consumer() and "fetch.min.bytes" not in _consumer()
    # A wait: a fetch below full load is held up to it, never filled by the minimum.
    assert _consumer("--fetch-wait-ms", "20")["fetch.wait.max.ms"] == 20
    assert _consumer("--fetch-wait-ms", "5")["fetch.min.bytes"] == FETCH_MIN_BYTES


@pytest.mark.parametrize("value", ["-1", str(MAX_FETCH_WAIT_MS + 1)])
def test_a_fetch_wait_out_of_range_is_refused_before_kafka_is_asked(value: str) -> None:
    with pytest.raises(CommandError, match="--fetch-wait-ms must be from 0 to 500"):
        process.settings_from(_args("--fetch-wait-ms", value))
