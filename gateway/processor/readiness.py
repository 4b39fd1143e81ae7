"""Whether this processor is ready, told by the processor itself over HTTP.

Ready means: the loop owns input partitions (its latest assignment, after
any revoke) and is not restoring a store from its changelog. Only the
process that runs the loop knows both; the consumer
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

from gateway.processor.loop import Loop
from gateway.processor.shutdown import Shutdown


class Readiness:
    """Reads the loop's assignment and restore flag; answers from any thread."""

    def __init__(self, loop: Loop, shutdown: Shutdown) -> None:
        self._loop = loop
        self._shutdown = shutdown

    def owned(self, topic: str) -> list[int]:
        """The partitions of `topic` this run owns now (the ticks go to them)."""
        return [p for t, p in list(self._loop.owned) if t == topic]

    def state(self) -> tuple[bool, dict[str, Any]]:
        if self._shutdown.requested:
            return False, {"status": "starting", "reason": "the processor is stopping"}
        if self._loop.restoring:
            return False, {
                "status": "starting",
                "reason": "the processor is restoring its state from the changelog",
            }
        owned = len(self._loop.owned)
        if not owned:
            return False, {
                "status": "starting",
                "reason": "the processor owns no partitions yet (joining the consumer group)",
            }
        return True, {"status": "ready", "partitions": owned}


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
