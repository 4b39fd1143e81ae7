"""The processor's metrics read from librdkafka's statistics, its latency histogram and its
count of decisions."""

from __future__ import annotations

import orjson
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from gateway.processor.metrics import Metrics

CHANGELOG = "changelog__gateway-dedup--gateway.requests--default"


def _stats(partitions: dict[str, dict[str, object]]) -> str:
    return orjson.dumps({"topics": {CHANGELOG: {"partitions": partitions}}}).decode()


def _remaining(metrics: Metrics, partition: str) -> float | None:
    return metrics.registry.get_sample_value(
        "gateway_restore_remaining", {"topic": CHANGELOG, "partition": partition}
    )


def test_a_changelog_partition_being_read_shows_what_is_left_to_restore() -> None:
    metrics = Metrics()
    metrics.observe_consumer_stats(_stats({
        "0": {"ls_offset": 1000, "app_offset": 250, "fetch_state": "active"},
        "1": {"ls_offset": 800, "app_offset": -1001, "fetch_state": "active"},  # none read yet
        "-1": {"ls_offset": -1, "app_offset": -1},  # librdkafka's unassigned partition
    }))  # fmt: skip
    assert _remaining(metrics, "0") == 750
    assert _remaining(metrics, "1") is None
    assert _remaining(metrics, "-1") is None
    # No input lag is taken from a changelog.
    assert (
        metrics.registry.get_sample_value(
            "gateway_consumer_lag", {"topic": CHANGELOG, "partition": "0"}
        )
        is None
    )


def test_a_restored_partition_shows_nothing_left_but_its_marker() -> None:
    metrics = Metrics()
    metrics.observe_consumer_stats(_stats({"0": {"ls_offset": 1000, "app_offset": 999}}))
    assert _remaining(metrics, "0") == 1


@given(st.lists(st.floats(min_value=0, max_value=100, allow_nan=False), max_size=50))
def test_the_latency_histogram_shows_what_prometheus_clients_would(seconds: list[float]):
    ours = Metrics()
    theirs = CollectorRegistry()
    reference = Histogram(
        "gateway_decision_latency_seconds", "x", registry=theirs,
        buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
    )  # fmt: skip
    for value in seconds:
        ours.decision_latency.observe(value)
        reference.observe(value)

    def samples(registry: CollectorRegistry) -> list[str]:
        text = generate_latest(registry).decode()
        return [
            line for line in text.splitlines()
            if line.startswith("gateway_decision_latency_seconds_") and "_created" not in line
        ]  # fmt: skip

    assert samples(ours.registry) == samples(theirs)


OUTCOMES = st.sampled_from(["accepted", "rejected", "invalid", "replaced"])
DIALECTS = st.sampled_from(["ojs", "oban", "faktory", "sidekiq"])


@given(st.lists(st.tuples(OUTCOMES, DIALECTS), max_size=60), st.integers(1, 7))
def test_the_decisions_count_shows_what_prometheus_clients_would(
    decided: list[tuple[str, str]], batch: int
):
    ours = Metrics()
    theirs = CollectorRegistry()
    reference = Counter("gateway_decisions", "x", ["outcome", "dialect"], registry=theirs)

    def samples(registry: CollectorRegistry) -> list[str]:
        text = generate_latest(registry).decode()
        return sorted(
            line for line in text.splitlines() if line.startswith("gateway_decisions_total")
        )

    for index, (outcome, dialect) in enumerate(decided):
        ours.decided(outcome, dialect, 1_770_000_000_000)
        reference.labels(outcome, dialect).inc()
        if index % batch == 0:  # scraped between two batches, and at the end
            ours.flush()
            assert samples(ours.registry) == samples(theirs)
    assert samples(ours.registry) == samples(theirs)
