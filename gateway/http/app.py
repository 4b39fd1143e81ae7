"""The ASGI app: routes and lifespan (SDK client, job view and its follower).

Every response but the OpenAPI document (`/openapi.json`, this binding
described; its one source is the file beside this module) is
`application/openjobspec+json` with `OJS-Version` and `X-Request-Id`; the
request id is the caller's X-Request-Id, else a new one, and becomes the job's
`request_id`, so the decision record names it.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from contextlib import asynccontextmanager
from pathlib import Path

import orjson
from confluent_kafka.admin import AdminClient
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from gateway import catalogue, config
from gateway.audit import index as audit_index
from gateway.audit.key_history import KeyHistory, audit_dir
from gateway.audit.verify import Layout, Verifier
from gateway.auth.keyring import Watcher
from gateway.core import INVALID_REQUEST
from gateway.http import (
    access,
    admin,
    admin_jobs,
    cron,
    dead_letter,
    errors,
    events_route,
    health,
    history,
    jobs,
    queues,
    rate_limits,
    tenants,
    workers,
)
from gateway.http.access import (
    ADMIN,
    ADMIN_ALL,
    CANCEL,
    DEQUEUE,
    ENQUEUE,
    INSPECT,
    INSPECT_ALL,
    INSPECT_EVERY,
    OPEN,
    Need,
)
from gateway.http.binding import Binding, Handler, HttpSettings
from gateway.http.client_limit import ClientLimit, host_of
from gateway.http.enqueue_rate import EnqueueRate
from gateway.http.errors import ApiError
from gateway.http.plumbing import endpoint, media_type_of, request_id_of
from gateway.http.responses import error_response, ojs_response
from gateway.http.shared import PAGE_PARAMS, PAGING
from gateway.processor import state_identity
from gateway.sdk import AsyncClient
from gateway.view.event_feed import EVENT_PREFIX, WINDOW_PREFIX, EventFeed
from gateway.view.follower import Follower
from gateway.view.store import JobView, default_view_dir, source_identity

__all__ = ["HttpSettings", "create_app"]

log = logging.getLogger("gateway.http")

Endpoint = Callable[[Request], Awaitable[Response]]

OPENAPI = Path(__file__).with_name("openapi.json")
_LIVE_POLL_S = 0.05


def create_app(settings: HttpSettings) -> Direct:
    """The app; a credentials file that cannot be used raises CredentialsError here."""
    watcher = None if settings.credentials is None else Watcher(settings.credentials)
    if watcher is None:
        log.warning(
            "no credentials file (--credentials, $GATEWAY_CREDENTIALS): every request may "
            "do anything; see docs/security.md"
        )

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        cat = catalogue.load(namespace=settings.namespace)
        kafka = config.client_config(settings.bootstrap) | settings.kafka_settings
        view_dir = settings.view_dir or default_view_dir(settings.namespace)
        admin = AdminClient(kafka)
        identity = await asyncio.to_thread(source_identity, admin, cat.name("job_states"))
        # A view built from another cluster or topic holds jobs this one never had.
        state_identity.reconcile(view_dir, identity)
        feed = EventFeed()
        view = JobView(view_dir, settings.retention_ms, also_write=feed.stage)
        view.write(feed.load(view.scan(EVENT_PREFIX), view.scan(WINDOW_PREFIX), view.offsets()))
        board = settings.board
        if board is not None:
            board.mark(False)  # a worker started again is not live until its view is
        follower = Follower(
            view, cat, kafka,
            on_live=None if board is None else lambda: board.mark(True),
        )  # fmt: skip
        decisions = cat.name("decisions")
        audit_identity = await asyncio.to_thread(
            state_identity.current, admin, [decisions], audit_index.LAYOUT
        )
        layout = Layout(
            cat.name("requests"), cat.name("intake"), cat.by_role("decisions").partitions
        )
        audit = KeyHistory.open(
            audit_dir(view_dir), audit_identity, decisions, kafka, admin,
            Verifier(layout, settings.audit_keys),
        )  # fmt: skip
        audit.start()
        client = AsyncClient(settings.bootstrap, settings.namespace, **settings.kafka_settings)
        # Serving starts at once; health says 503 (and every route waits, then 503) until
        # the view follows every partition and has read what was there.
        follower.start()
        while board is not None and board.others_live() and not follower.live.is_set():
            # A worker started again beside live ones accepts nothing until its view is live
            # too (uvicorn accepts once this returns): the others take every connection.
            await asyncio.sleep(_LIVE_POLL_S)
        app.state.binding = Binding(
            settings, client, view, admin, cat.name("requests"), follower, feed,
            job_states_topic=cat.name("job_states"), audit=audit, watcher=watcher,
            enqueue_rate=EnqueueRate(settings.max_enqueue_rate),
        )  # fmt: skip
        if watcher is not None and threading.current_thread() is threading.main_thread():
            # SIGHUP: read the credentials file now, not at the next look (keyring.POLL_S).
            # (An app served from another thread, as in tests, has the look only.)
            asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, watcher.reload)
        try:
            yield
        finally:
            await client.close()
            await asyncio.to_thread(follower.stop)
            await asyncio.to_thread(audit.close)
            view.close()

    # Paths without parameters, answered without Starlette's router and middleware
    # (a sizeable share of each enqueue's CPU): see Direct. Their bodies say everything:
    # no query parameter is understood.
    direct = [
        Route("/ojs/v1/jobs", endpoint(jobs.enqueue, ENQUEUE, query=()), methods=["POST"]),
        Route(
            "/ojs/v1/jobs/batch", endpoint(jobs.enqueue_batch, ENQUEUE, query=()), methods=["POST"]
        ),
        Route(
            "/ojs/v1/workers/fetch", endpoint(workers.fetch, DEQUEUE, query=()), methods=["POST"]
        ),
        Route("/ojs/v1/workers/ack", endpoint(workers.ack, DEQUEUE, query=()), methods=["POST"]),
        Route("/ojs/v1/workers/nack", endpoint(workers.nack, DEQUEUE, query=()), methods=["POST"]),
        Route(
            "/ojs/v1/workers/heartbeat",
            endpoint(workers.heartbeat, DEQUEUE, query=()),
            methods=["POST"],
        ),
    ]
    routes = [
        *direct,
        Route("/openapi.json", public(_openapi), methods=["GET"]),
        Route("/ojs/manifest", public(_manifest), methods=["GET"]),
        Route("/ojs/v1/health", public(health.health), methods=["GET"]),
        Route("/ojs/v1/health/live", public(health.live), methods=["GET"]),
        Route("/ojs/v1/jobs/{job_id}", ops(jobs.get_job, INSPECT), methods=["GET"]),
        Route("/ojs/v1/jobs/{job_id}", ops(jobs.cancel_job, CANCEL), methods=["DELETE"]),
        # The ops routes (`ops`) refuse a query parameter, or a body, they do not take.
        Route("/ojs/v1/queues", ops(queues.list_queues, INSPECT_ALL, PAGE_PARAMS), methods=["GET"]),
        Route("/ojs/v1/queues/{name}", ops(queues.stats, INSPECT), methods=["GET"]),
        Route("/ojs/v1/queues/{name}/stats", ops(queues.stats, INSPECT), methods=["GET"]),
        Route("/ojs/v1/queues/{name}/pause", ops(queues.pause, ADMIN), methods=["POST"]),
        Route("/ojs/v1/queues/{name}/resume", ops(queues.resume, ADMIN), methods=["POST"]),
        Route("/ojs/v1/cron", ops(cron.list_crons, INSPECT_ALL, PAGE_PARAMS), methods=["GET"]),
        Route("/ojs/v1/cron", ops(cron.register, ADMIN_ALL, body=True), methods=["POST"]),
        Route("/ojs/v1/cron/{name}", ops(cron.get_cron, INSPECT_ALL), methods=["GET"]),
        Route("/ojs/v1/cron/{name}", ops(cron.toggle, ADMIN_ALL, body=True), methods=["PATCH"]),
        Route("/ojs/v1/cron/{name}", ops(cron.delete, ADMIN_ALL), methods=["DELETE"]),
        Route(
            "/ojs/v1/dead-letter",
            ops(dead_letter.list_dead, INSPECT_ALL, dead_letter.LIST_QUERY),
            methods=["GET"],
        ),
        Route(
            "/ojs/v1/dead-letter/{job_id}/retry", ops(dead_letter.retry, ADMIN), methods=["POST"]
        ),
        Route("/ojs/v1/dead-letter/{job_id}", ops(dead_letter.delete, ADMIN), methods=["DELETE"]),
        Route(
            "/ojs/v1/events",
            endpoint(events_route.events, INSPECT_ALL, query=events_route.PARAMETERS),
            methods=["GET"],
        ),
        # The admin API the official OJS Admin UI reads (admin.py, admin_jobs.py).
        Route("/ojs/v1/admin/stats", ops(admin.stats, INSPECT_ALL), methods=["GET"]),
        Route(
            "/ojs/v1/admin/stats/history",
            ops(admin.stats_history, INSPECT_ALL, ("period", *admin.HISTORY_FILTER)),
            methods=["GET"],
        ),
        Route("/ojs/v1/admin/queues", ops(admin.queues, INSPECT_ALL, PAGING), methods=["GET"]),
        Route("/ojs/v1/admin/queues/{name}", ops(admin.queue, INSPECT), methods=["GET"]),
        Route("/ojs/v1/admin/queues/{name}/pause", ops(queues.pause, ADMIN), methods=["POST"]),
        Route("/ojs/v1/admin/queues/{name}/resume", ops(queues.resume, ADMIN), methods=["POST"]),
        Route(
            "/ojs/v1/admin/queues/{name}/rate-limit",
            ops(queues.set_rate_limit, ADMIN, body=True),
            methods=["PUT"],
        ),  # fmt: skip
        Route(
            "/ojs/v1/admin/queues/{name}/rate-limit",
            ops(queues.clear_rate_limit, ADMIN),
            methods=["DELETE"],
        ),  # fmt: skip
        Route(
            "/ojs/v1/admin/jobs",
            ops(admin_jobs.list_jobs, INSPECT_ALL, admin_jobs.JOBS_QUERY),
            methods=["GET"],
        ),
        Route(
            "/ojs/v1/admin/jobs/bulk/{action}",
            ops(admin_jobs.bulk, ADMIN_ALL, (), body=True),
            methods=["POST"],
        ),
        Route("/ojs/v1/admin/jobs/{job_id}", ops(admin_jobs.job_detail, INSPECT), methods=["GET"]),
        Route("/ojs/v1/admin/jobs/{job_id}/retry", ops(dead_letter.retry, ADMIN), methods=["POST"]),
        Route("/ojs/v1/admin/jobs/{job_id}/cancel", ops(jobs.cancel_job, CANCEL), methods=["POST"]),
        Route(
            "/ojs/v1/admin/dead-letter",
            ops(admin_jobs.list_dead, INSPECT_ALL, admin_jobs.DEAD_QUERY),
            methods=["GET"],
        ),
        Route(
            "/ojs/v1/admin/dead-letter/stats", ops(admin.dead_stats, INSPECT_ALL), methods=["GET"]
        ),
        Route(
            "/ojs/v1/admin/dead-letter/retry",
            ops(admin_jobs.retry_dead, ADMIN_ALL, body=True),
            methods=["POST"],
        ),
        Route(
            "/ojs/v1/admin/dead-letter/{job_id}/retry",
            ops(dead_letter.retry, ADMIN),
            methods=["POST"],
        ),
        Route(
            "/ojs/v1/admin/dead-letter/{job_id}", ops(dead_letter.delete, ADMIN), methods=["DELETE"]
        ),
        Route("/ojs/v1/admin/workers", ops(admin.workers, INSPECT_ALL, PAGING), methods=["GET"]),
        Route("/ojs/v1/unique-jobs", ops(admin.unique_jobs, INSPECT_ALL, PAGING), methods=["GET"]),
        Route(
            "/ojs/v1/admin/unique-jobs/{key}/history",
            ops(history.key_history, INSPECT_ALL, history.QUERY),
            methods=["GET"],
        ),
        Route("/ojs/v1/crons", ops(admin.crons, INSPECT_ALL, PAGING), methods=["GET"]),
        Route("/ojs/v1/rate-limits", ops(rate_limits.keys, INSPECT_EVERY, PAGING), methods=["GET"]),
        Route("/ojs/v1/rate-limits/{key}", ops(rate_limits.get, INSPECT_EVERY), methods=["GET"]),
        Route(
            "/ojs/v1/rate-limits/{key}", ops(rate_limits.put, ADMIN_ALL, body=True), methods=["PUT"]
        ),
        Route(
            "/ojs/v1/rate-limits/{key}/override",
            ops(rate_limits.clear, ADMIN_ALL),
            methods=["DELETE"],
        ),
        # Tenants (tenants.py): known by their jobs, each of those the caller sees.
        Route(
            "/ojs/v1/admin/tenants", ops(tenants.list_tenants, INSPECT_ALL, PAGING), methods=["GET"]
        ),
        Route(
            "/ojs/v1/admin/tenants/{tenant_id}", ops(tenants.tenant, INSPECT_ALL), methods=["GET"]
        ),
        Route(
            "/ojs/v1/admin/tenants/{tenant_id}/stats",
            ops(tenants.stats, INSPECT_ALL),
            methods=["GET"],
        ),  # fmt: skip
        Route(
            "/ojs/v1/admin/tenants/{tenant_id}/jobs",
            ops(tenants.jobs, INSPECT_ALL, PAGING),
            methods=["GET"],
        ),  # fmt: skip
        Route(
            "/ojs/v1/admin/tenants/{tenant_id}/limits",
            ops(tenants.put_limits, ADMIN_ALL, body=True),
            methods=["PUT"],
        ),  # fmt: skip
        Route("/ojs/v1/crons/{name}", ops(admin.cron_detail, INSPECT_ALL), methods=["GET"]),
        Route("/ojs/v1/crons/{name}", ops(cron.toggle, ADMIN_ALL, body=True), methods=["PATCH"]),
        Route("/ojs/v1/crons/{name}", ops(cron.delete, ADMIN_ALL), methods=["DELETE"]),
    ]
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={HTTPException: _http_exception, Exception: _internal_error},
    )
    return Direct(app, direct, ClientLimit(settings.max_client_connections))


def ops(
    handler: Handler, need: Need, query: Collection[str] = (), *, body: bool = False
) -> Callable[[Request], Awaitable[Response]]:
    """An admin or ops route: only the query parameters `query` names; a body only if `body`."""
    return endpoint(handler, need, query=query, body=body)


def public(route_endpoint: Endpoint) -> Endpoint:
    """A route anyone may call, with or without a key (access.OPEN)."""
    access.mark(route_endpoint, OPEN)
    return route_endpoint


class Direct:
    """The ASGI app: a request for one of the `direct` routes' method and path straight to
    its endpoint, everything else to Starlette; either counted against its client's limit
    first (client_limit.py).

    The direct routes are Starlette's too, which answers them for another method (405,
    naming the allowed one) and for their path with a trailing slash (a redirect). A
    direct route answers exactly as through Starlette: its exceptions become the same
    500 `internal_error`, logged with the traceback."""

    def __init__(self, app: Starlette, direct: list[Route], limit: ClientLimit) -> None:
        self.app = app
        self.limit = limit
        self.state = app.state
        self.routes = app.routes  # every route served, the direct ones among them
        self._routes: dict[tuple[str, str], Endpoint] = {
            (method, route.path): route.endpoint
            for route in direct
            for method in route.methods or ()
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)  # the lifespan
            return
        scope["app"] = self.app
        host = host_of(scope)
        if not self.limit.enter(host):
            await self.limit.refuse(scope, receive, send)
            return
        try:
            await self._answer(scope, receive, send)
        finally:  # answered, failed, or the client went away (cancelled)
            self.limit.leave(host)

    async def _answer(self, scope: Scope, receive: Receive, send: Send) -> None:
        handle = self._routes.get((scope["method"], scope["path"]))
        if handle is None:
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive, send)
        try:
            response = await handle(request)
        except Exception as exc:
            log.exception("the gateway failed answering %s %s", scope["method"], scope["path"])
            response = await _internal_error(request, exc)
        await response(scope, receive, send)


async def _openapi(request: Request) -> Response:
    headers = {"X-Request-Id": request_id_of(request)}
    return Response(OPENAPI.read_bytes(), media_type="application/json", headers=headers)


async def _manifest(request: Request) -> Response:
    binding: Binding = request.app.state.binding
    manifest = orjson.loads(binding.settings.manifest.read_bytes())
    return ojs_response(200, manifest, request_id_of(request), None, media_type_of(request))


async def _http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = {404: errors.NOT_FOUND, 405: errors.METHOD_NOT_ALLOWED}.get(
        exc.status_code, INVALID_REQUEST
    )
    response = error_response(
        ApiError(exc.status_code, code, str(exc.detail)), request_id_of(request),
        media_type_of(request),
    )  # fmt: skip
    response.headers.update(exc.headers or {})  # a 405 names the methods allowed (Allow)
    return response


async def _internal_error(request: Request, exc: Exception) -> Response:
    error = ApiError(
        500, errors.INTERNAL_ERROR, f"the gateway failed: {type(exc).__name__}", retryable=True
    )
    return error_response(error, request_id_of(request), media_type_of(request))
