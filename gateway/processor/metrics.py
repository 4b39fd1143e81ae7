"""Prometheus metrics of the processor (served with its readiness, see readiness.py)."""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Iterator
from typing import Any

import orjson
from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

# Decisions noted before they are counted anyway, whoever forgets to flush.
FLUSH_AT = 10_000


class Metrics:
    """One registry per processor, so several processors can share a process in tests."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        # (name, type, help, label names) of every metric, in the order defined.
        self.described: list[tuple[str, str, str, tuple[str, ...]]] = []
        self._positions: dict[tuple[str, int], int] = {}
        # Record times of the decisions whose latency the next flush observes.
        self._stamps: list[int] = []
        self._events: dict[tuple[str, str], Any] = {}
        self.decisions = LabelledCounts(
            "gateway_decisions", "Decisions by outcome and dialect", ("outcome", "dialect")
        )
        self._own(self.decisions, "counter", self.decisions.labels)
        self.decision_latency = LatencyHistogram(
            "gateway_decision_latency_seconds",
            "From the request record's broker timestamp to its decision being written; "
            "the commit follows within the commit interval",
            (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
        )
        self._own(self.decision_latency, "histogram")
        self.events = self._define(
            Counter,
            "gateway_job_events",
            "Job-state events by result (applied, ignored, invalid)",
            ["result", "reason"],
        )
        self.reroutes = self._define(
            Counter,
            "gateway_router_reroutes",
            "Requests on the wrong key or partition, sent on to their route (or to the router "
            "when they have no route yet)",
        )
        self.replies_dropped = self._define(
            Counter,
            "gateway_replies_dropped",
            "Replies not sent, by reason: a reply_to the deployment does not allow, "
            "a topic that does not exist, or an early reply the broker did not take",
            ["reason"],
        )
        self.dead_letters = self._define(
            Counter,
            "gateway_dead_letters",
            "Records whose handling failed, answered `internal` and kept on dead_letters, "
            "by stage and exception",
            ["stage", "error"],
        )
        self.id_conflicts = self._define(
            Counter,
            "gateway_id_conflicts",
            "Reports of a job under one id from a route other than the one holding its claim "
            "(two routes holding one id: only records forged past its home can do this)",
        )
        self.idempotent = self._define(
            Counter,
            "gateway_idempotent_requests",
            "Requests with an idempotency key, by what became of them: admitted at the key's "
            "home, answered_again at their route (no new decision), or reused (refused: the "
            "key named another request)",
            ["result"],
        )
        self.tenant_requests = self._define(
            Counter,
            "gateway_tenant_requests",
            "A tenant's requests at its home: admitted, returned (a place given back), "
            "unsupported, or the limit that refused one",
            ["tenant_id", "result"],
        )
        self.refused_inputs = self._define(
            Counter,
            "gateway_refused_inputs",
            "Input records refused before they were handled, by stage and error code",
            ["stage", "code"],
        )
        self.state_keys = self._define(
            Gauge,
            "gateway_state_keys",
            "Fingerprints held in the state of this process's partitions, as the stores "
            "count them at each commit",
        )
        self.consumer_lag = self._define(
            Gauge,
            "gateway_consumer_lag",
            "Input records not yet handled, per assigned partition",
            ["topic", "partition"],
        )
        self.restore_remaining = self._define(
            Gauge,
            "gateway_restore_remaining",
            "Changelog records still to read to restore state, per changelog partition read "
            "since the start (a restored partition shows 0, or 1 for the transaction marker)",
            ["topic", "partition"],
        )

    def _define(self, kind: Any, name: str, documentation: str, *labels: Any, **kw: Any) -> Any:
        """A metric of this registry, noted in `described` (its labels too: the docs'
        metrics table is made from it, see gateway/docs.py)."""
        names = tuple(labels[0]) if labels else ()
        self.described.append((name, kind.__name__.lower(), documentation, names))
        return kind(name, documentation, list(names), registry=self.registry, **kw)

    def _own(
        self, collector: LabelledCounts | LatencyHistogram, kind: str, labels: tuple[str, ...] = ()
    ) -> None:
        """A metric of the processor's own collector class, registered and noted in
        `described` as `_define` notes the others."""
        self.registry.register(collector)
        self.described.append((collector.name, kind, collector.documentation, labels))

    def decided(self, outcome: str, dialect: str, record_timestamp_ms: int) -> None:
        """Count a decision; `flush` observes its latency (once per batch: one clock read)."""
        counts = self.decisions.counts
        key = (outcome, dialect)
        counts[key] = counts.get(key, 0) + 1
        self._stamps.append(record_timestamp_ms)
        if len(self._stamps) >= FLUSH_AT:  # a caller that never flushes (replay) keeps little
            self.flush()

    def flush(self) -> None:
        """Observe the latency of the decisions noted since the last flush."""
        if not self._stamps:
            return
        now = time.time()
        for stamp in self._stamps:
            self.decision_latency.observe(max(0.0, now - stamp / 1000))
        self._stamps.clear()

    def event(self, result: str, reason: str) -> None:
        """Count a job event by its result (once per event: its child is looked up once)."""
        child = self._events.get((result, reason))
        if child is None:
            child = self._events[(result, reason)] = self.events.labels(result, reason)
        child.inc()

    def processed(self, topic: str, partition: int, offset: int) -> None:
        """Note the last input record handled, for the lag computation."""
        self._positions[(topic, partition)] = offset + 1

    def observe_consumer_stats(self, stats_json: str) -> None:
        """librdkafka's statistics callback: the lag of every assigned input partition, and
        how much of each changelog partition being read is still to restore.

        Lag is the last stable offset (what read_committed can see) minus the
        position after the last record handled here; before any record, the
        committed offset or the log start stands in. Transaction markers count
        as records, so a caught-up partition of a transactional topic shows 1.
        A changelog partition is read only to restore state, so its remaining
        records are the same difference, once the restore has read a record.
        """
        stats = orjson.loads(stats_json)
        for topic, detail in stats.get("topics", {}).items():
            if topic.startswith("changelog__"):
                self._observe_restore(topic, detail)
                continue
            for name, p in detail.get("partitions", {}).items():
                end = p.get("ls_offset", -1)
                if name == "-1" or p.get("fetch_state") != "active" or end < 0:
                    continue
                position = self._positions.get((topic, int(name)))
                if position is None:
                    position = max(p.get("committed_offset", -1), p.get("lo_offset", -1), 0)
                self.consumer_lag.labels(topic, name).set(max(0, end - position))

    def _observe_restore(self, topic: str, detail: dict[str, Any]) -> None:
        for name, p in detail.get("partitions", {}).items():
            end, read = p.get("ls_offset", -1), p.get("app_offset", -1)
            if name != "-1" and end >= 0 and read >= 0:
                self.restore_remaining.labels(topic, name).set(max(0, end - read))


class LabelledCounts(Collector):
    """A counter by label values, shown through the registry's collector interface:
    prometheus_client's Counter takes a lock and runs Python for every increment, which
    at a few decisions a batch cost more than the decisions' own counting. Counted from
    the loop's thread only; a scrape copies the counts in one step."""

    def __init__(self, name: str, documentation: str, labels: tuple[str, ...]) -> None:
        self.name = name
        self.documentation = documentation
        self.labels = labels
        self.counts: dict[tuple[str, ...], int] = {}

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(self.name, self.documentation, labels=list(self.labels))
        for values, count in list(self.counts.items()):
            family.add_metric(list(values), float(count))
        yield family


class LatencyHistogram(Collector):
    """A histogram observed once per decision, shown through the registry's collector
    interface: prometheus_client's Histogram takes a lock and walks its buckets in Python
    for every observation (0.6 µs), this a bisection in compiled code (compiled.py).
    Observed from the loop's thread only; a scrape reads it between two observations."""

    def __init__(self, name: str, documentation: str, bounds: tuple[float, ...]) -> None:
        self.name = name
        self.documentation = documentation
        self.bounds = [float(b) for b in bounds]
        self.counts = [0] * (len(bounds) + 1)  # the last: above every bound
        self.sum = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(self.bounds, seconds)] += 1
        self.sum += seconds

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(self.name, self.documentation)
        buckets, total = [], 0
        for bound, count in zip([*self.bounds, float("inf")], self.counts, strict=True):
            total += count
            buckets.append(("+Inf" if bound == float("inf") else repr(bound), float(total)))
        family.add_metric([], buckets, self.sum)
        yield family
