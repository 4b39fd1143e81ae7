"""AsyncClient: the Client's API for asyncio, on the same machinery.

A small call is checked and produced on the event loop; a large one, and whatever
would wait (a full local queue, the first time's metadata), runs in a worker
thread. Answers come from the client's I/O thread and resolve an
asyncio future through `call_soon_threadsafe`, so a waiting call holds no thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from types import TracebackType
from typing import Any, Literal, overload

from gateway.core.actor import Actor
from gateway.core.tenants import for_tenant
from gateway.sdk.client import (
    DEFAULT_MANY_TIMEOUT,
    DEFAULT_TIMEOUT,
    Client,
    Event,
    Idempotency,
    Job,
    naming,
)
from gateway.sdk.errors import ClientError
from gateway.sdk.prepare import Outgoing
from gateway.sdk.result import EnqueueResult, EventAck, Sent
from gateway.sdk.ticket import Ticket

# Calls with more items than this are checked and produced in a worker thread, so a
# large batch does not hold the event loop.
_PREPARED_ON_LOOP = 16


class AsyncClient:
    """`Client` with `async` methods; see Client for the arguments and the semantics."""

    def __init__(
        self, bootstrap: str | None = None, namespace: str | None = None, **kafka_settings: Any
    ) -> None:
        self._client = Client(bootstrap, namespace, **kafka_settings)

    @overload
    async def enqueue(
        self,
        job: Job,
        wait: Literal[False] = ...,
        timeout: float = ...,
        idempotency_key: str | None = ...,
        actor: Actor | None = ...,
        tenant: str | None = ...,
    ) -> Sent: ...
    @overload
    async def enqueue(
        self,
        job: Job,
        wait: Literal[True],
        timeout: float = ...,
        idempotency_key: str | None = ...,
        actor: Actor | None = ...,
        tenant: str | None = ...,
    ) -> EnqueueResult: ...
    @overload
    async def enqueue(
        self,
        job: Job,
        wait: bool,
        timeout: float = ...,
        idempotency_key: str | None = ...,
        actor: Actor | None = ...,
        tenant: str | None = ...,
    ) -> EnqueueResult | Sent: ...

    async def enqueue(
        self, job: Job, wait: bool = False, timeout: float = DEFAULT_TIMEOUT,
        idempotency_key: str | None = None, actor: Actor | None = None,
        tenant: str | None = None,
    ) -> EnqueueResult | Sent:  # fmt: skip
        [answer] = await self._call(
            [for_tenant(job, tenant)],
            wait,
            timeout,
            idempotency=naming(idempotency_key, False),
            actor=actor,
        )
        if isinstance(answer, ClientError):
            raise answer
        return answer  # type: ignore[no-any-return]

    @overload
    async def enqueue_many(
        self,
        jobs: Sequence[Job],
        wait: Literal[False] = ...,
        timeout: float = ...,
        idempotency_key: str | None = ...,
        actor: Actor | None = ...,
        tenant: str | None = ...,
    ) -> list[Sent | ClientError]: ...
    @overload
    async def enqueue_many(
        self,
        jobs: Sequence[Job],
        wait: Literal[True],
        timeout: float = ...,
        idempotency_key: str | None = ...,
        actor: Actor | None = ...,
        tenant: str | None = ...,
    ) -> list[EnqueueResult | ClientError]: ...
    @overload
    async def enqueue_many(
        self,
        jobs: Sequence[Job],
        wait: bool,
        timeout: float = ...,
        idempotency_key: str | None = ...,
        actor: Actor | None = ...,
        tenant: str | None = ...,
    ) -> list[EnqueueResult | Sent | ClientError]: ...

    async def enqueue_many(
        self, jobs: Sequence[Job], wait: bool = False, timeout: float = DEFAULT_MANY_TIMEOUT,
        idempotency_key: str | None = None, actor: Actor | None = None,
        tenant: str | None = None,
    ) -> list[Any]:  # fmt: skip
        return await self._call(
            [for_tenant(job, tenant) for job in jobs],
            wait,
            timeout,
            idempotency=naming(idempotency_key, True),
            actor=actor,
        )

    async def publish_event(
        self, event: Event, wait: bool = True, timeout: float = DEFAULT_TIMEOUT,
        actor: Actor | None = None,
    ) -> EventAck | Sent:  # fmt: skip
        [answer] = await self._call([event], wait, timeout, self._client._events, actor=actor)
        if isinstance(answer, ClientError):
            raise answer
        return answer  # type: ignore[no-any-return]

    async def send_commands(
        self, commands: Sequence[Outgoing], timeout: float = DEFAULT_TIMEOUT,
        actor: Actor | None = None,
    ) -> list[dict[str, Any] | ClientError]:  # fmt: skip
        return await self._call(commands, True, timeout, self._client._commands, actor=actor)

    async def partitions(self, timeout: float = DEFAULT_TIMEOUT) -> int:
        return await asyncio.to_thread(self._client.partitions, timeout)

    async def close(self, timeout: float = 10.0) -> None:
        await asyncio.to_thread(self._client.close, timeout)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:  # fmt: skip
        await self.close()

    async def _call(
        self, items: Sequence[Any], wait: bool, timeout: float, kind: Any = None,
        idempotency: Idempotency | None = None, actor: Actor | None = None,
    ) -> list[Any]:  # fmt: skip
        deadline = time.monotonic() + timeout
        client = self._client
        if len(items) > _PREPARED_ON_LOOP:
            ticket = await asyncio.to_thread(
                client._submit, items, wait, deadline, kind, idempotency, actor
            )
        else:
            # A thread hop costs more CPU than checking and producing a few items (it was
            # about half of `gateway serve`'s CPU per enqueue). Only what would wait (the
            # first topic check, a full local queue) goes to a thread.
            call = client._prepare(items, kind, idempotency, actor)
            if not client._send(call, wait, deadline, block=False):
                await asyncio.to_thread(client._send, call, wait, deadline, True)
            ticket = call.ticket
        try:
            # A timeout scope costs a timer; wait_for adds a waiter and callbacks per call.
            async with asyncio.timeout(deadline - time.monotonic()):
                await _done(ticket)
        except TimeoutError:
            raise self._client._give_up(ticket, wait) from None
        except asyncio.CancelledError:
            self._client._give_up(ticket, wait)
            raise
        return ticket.values()


def _done(ticket: Ticket) -> asyncio.Future[None]:
    """A future of the running loop, resolved when the ticket is done."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[None] = loop.create_future()

    def resolve() -> None:
        if not future.done():
            future.set_result(None)

    def from_any_thread() -> None:
        # A closed loop has nobody waiting any more.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(resolve)

    ticket.add_done_callback(from_any_thread)
    return future
