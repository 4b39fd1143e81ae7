"""Whether this processor is ready, told by the processor itself over HTTP.

Ready means: the loop owns input partitions (its latest assignment, after
any revoke) and is not restoring a store from its changelog. Only the
process that runs the loop knows both; the consumer
group seen from outside cannot tell this run from the previous one, whose
static member stays listed until its session times out. So the processor
answers on its status port (with --metrics-port), and `gateway serve
--processor-url` asks it: a processor that is gone does not answer at all.

GET /metrics    Prometheus metrics; with a credentials file, to a principal's key holding
                `inspect` only (status_access.py)
GET /ready      200 {"status": "ready", "partitions": n}, else 503 {"status": "starting", "reason"}
GET /live       200 while the process runs
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from gateway.http.errors import ApiError
from gateway.processor.loop import Loop
from gateway.processor.shutdown import Shutdown
from gateway.processor.status_access import CHALLENGE, Guard
from gateway.randomness import random_uuid4

JSON = "application/json"


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


def serve(
    port: int, registry: CollectorRegistry, readiness: Readiness, guard: Guard | None = None
) -> ThreadingHTTPServer:
    """Serve this runtime's /metrics, /ready and /live on 127.0.0.1:`port`."""
    return serve_status(port, lambda _: generate_latest(registry), readiness.state, guard)


def serve_status(
    port: int,
    metrics: Callable[[Sequence[str]], bytes],
    ready: Callable[[], tuple[bool, dict[str, Any]]],
    guard: Guard | None = None,
) -> ThreadingHTTPServer:
    """Serve /metrics, /ready and /live on 127.0.0.1:`port` from a daemon thread; /metrics
    only to whom `guard` lets in (None: anyone). `metrics` is given the request's
    Authorization headers, for a port that asks other ports on its caller's behalf."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the handler's API)
            path = self.path.split("?")[0]
            if path == "/metrics":
                authorization = self.headers.get_all("Authorization") or []
                refused = self._refusal(f"GET {path}", authorization)
                if refused is None:
                    self._send(200, metrics(authorization), CONTENT_TYPE_LATEST)
            elif path == "/ready":
                is_ready, body = ready()
                self._send(200 if is_ready else 503, orjson.dumps(body), JSON)
            elif path == "/live":
                self._send(200, b'{"status": "ok"}', JSON)
            else:
                self._send(404, b'{"status": "not found"}', JSON)

        def _refusal(self, route: str, authorization: list[str]) -> ApiError | None:
            """None if the caller may; else its refusal, answered."""
            if guard is None:
                return None
            request_id = self.headers.get("X-Request-Id") or random_uuid4()
            refused = guard.refusal(route, authorization, self.client_address[0], request_id)
            if refused is not None:
                headers = {"X-Request-Id": request_id}
                if refused.status == 401:
                    headers["WWW-Authenticate"] = CHALLENGE
                body = orjson.dumps(refused.envelope(request_id))
                self._send(refused.status, body, JSON, headers)
            return refused

        def _send(
            self, status: int, body: bytes, content_type: str, headers: dict[str, str] | None = None
        ) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: Any) -> None:
            pass  # probes every few seconds are not news

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="status-http", daemon=True).start()
    return server
