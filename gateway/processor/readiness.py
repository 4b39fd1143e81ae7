"""Whether this processor is ready, told by the processor itself over HTTP.

Ready means: the runtime owns input partitions (its latest assignment, after
any revoke) and no state partition is still being restored from the
changelog. Only the process that runs the runtime knows both; the consumer
group seen from outside cannot tell this run from the previous one, whose
static member stays listed until its session times out. So the processor
answers on its status port (with --metrics-port), and `gateway serve
--processor-url` asks it: a processor that is gone does not answer at all.

GET /metrics    Prometheus metrics
GET /ready      200 {"status": "ready", "partitions": n}, else 503 {"status": "starting", "reason"}
GET /live       200 while the process runs
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from quixstreams import Application

from gateway.processor import quix
from gateway.processor.shutdown import Shutdown


class Readiness:
    """Follows the runtime's rebalances; answers from any thread."""

    def __init__(self, app: Application, shutdown: Shutdown) -> None:
        self._app = app
        self._shutdown = shutdown
        self._owned: set[tuple[str, int]] = set()
        self._inputs: set[str] = set()
        # The runtime hands these to the consumer when it subscribes, in run();
        # wrapping them here sees each rebalance after the runtime has handled it.
        on_assign, on_revoke, on_lost = quix.rebalance_hooks(app)

        def assigned(consumer: Any, partitions: list[Any]) -> None:
            on_assign(consumer, partitions)
            self._owned |= {(tp.topic, tp.partition) for tp in partitions}

        def revoked(consumer: Any, partitions: list[Any]) -> None:
            self._owned -= {(tp.topic, tp.partition) for tp in partitions}
            on_revoke(consumer, partitions)

        def lost(consumer: Any, partitions: list[Any]) -> None:
            self._owned -= {(tp.topic, tp.partition) for tp in partitions}
            on_lost(consumer, partitions)

        quix.set_rebalance_hooks(app, assigned, revoked, lost)

    def owned(self, topic: str) -> list[int]:
        """The partitions of `topic` this run owns now (the ticks go to them)."""
        return [p for t, p in list(self._owned) if t == topic]

    def state(self) -> tuple[bool, dict[str, Any]]:
        inputs = {tp for tp in self._owned if not tp[0].startswith("changelog__")}
        if self._shutdown.requested:
            return False, {"status": "starting", "reason": "the processor is stopping"}
        if not inputs:
            return False, {
                "status": "starting",
                "reason": "the processor owns no partitions yet (joining the consumer group)",
            }
        if quix.recovery_required(self._app):
            return False, {
                "status": "starting",
                "reason": "the processor is restoring its state from the changelog",
            }
        return True, {"status": "ready", "partitions": len(inputs)}


def serve(port: int, registry: CollectorRegistry, readiness: Readiness) -> ThreadingHTTPServer:
    """Serve this runtime's /metrics, /ready and /live on 127.0.0.1:`port`."""
    return serve_status(port, lambda: generate_latest(registry), readiness.state)


def serve_status(
    port: int, metrics: Callable[[], bytes], ready: Callable[[], tuple[bool, dict[str, Any]]]
) -> ThreadingHTTPServer:
    """Serve /metrics, /ready and /live on 127.0.0.1:`port` from a daemon thread."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the handler's API)
            path = self.path.split("?")[0]
            if path == "/metrics":
                self._send(200, metrics(), CONTENT_TYPE_LATEST)
            elif path == "/ready":
                is_ready, body = ready()
                self._send(200 if is_ready else 503, orjson.dumps(body), "application/json")
            elif path == "/live":
                self._send(200, b'{"status": "ok"}', "application/json")
            else:
                self._send(404, b'{"status": "not found"}', "application/json")

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: Any) -> None:
            pass  # probes every few seconds are not news

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="status-http", daemon=True).start()
    return server
