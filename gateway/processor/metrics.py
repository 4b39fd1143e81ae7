"""Prometheus metrics of the processor, served on a configurable port."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server


class Metrics:
    """One registry per processor, so several processors can share a process in tests."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.decisions = Counter(
            "gateway_decisions", "Decisions by outcome and dialect", ["outcome", "dialect"],
            registry=r,
        )  # fmt: skip
        self.decision_latency = Histogram(
            "gateway_decision_latency_seconds",
            "From the request record's broker timestamp to the commit of its decision",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=r,
        )
        self.events = Counter(
            "gateway_job_events", "Job-state events by result (applied, ignored, invalid)",
            ["result", "reason"], registry=r,
        )  # fmt: skip
        self.reroutes = Counter(
            "gateway_router_reroutes",
            "Requests whose key was not their fingerprint, sent back through the router",
            registry=r,
        )
        self.replies_dropped = Counter(
            "gateway_replies_dropped",
            "Replies not sent because the reply_to topic does not exist",
            registry=r,
        )
        self.state_keys = Gauge(
            "gateway_state_keys",
            "Fingerprints this process added to its state minus those it deleted",
            registry=r,
        )
        self.consumer_lag = Gauge(
            "gateway_consumer_lag", "Records not yet consumed, per input partition",
            ["topic", "partition"], registry=r,
        )  # fmt: skip

    def serve(self, port: int, addr: str = "127.0.0.1") -> None:
        start_http_server(port, addr=addr, registry=self.registry)
