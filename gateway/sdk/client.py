"""The producer SDK: validate and fingerprint locally, produce to `requests`, await decisions.

Items are checked here and produced by the client's transport (transport.py), whose
one background thread serves the producer's delivery reports and reads the replies,
and hands each answer to the call waiting for it, so any number of threads may
enqueue at once.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal, overload

from gateway.core import GatewayError
from gateway.core.actor import Actor
from gateway.core.idempotency import key_problem
from gateway.core.tenants import for_tenant
from gateway.sdk.errors import (
    ClientError,
    EnqueueTimeout,
    Invalid,
    InvalidEvent,
    InvalidJob,
)
from gateway.sdk.prepare import Outgoing, acting, idempotent, prepare, prepare_event
from gateway.sdk.result import EnqueueResult, EventAck, Sent
from gateway.sdk.ticket import Ticket
from gateway.sdk.transport import Transport

DEFAULT_TIMEOUT = 30.0
DEFAULT_MANY_TIMEOUT = 120.0

Job = Any  # an OJS job as a mapping: the envelope or the HTTP form
Event = Any  # a job-state event as a mapping: job_id, unique_key, state or type


@dataclass(frozen=True)
class _Kind:
    """What the client sends: how to check it, where it goes, what its reply becomes."""

    prepare: Callable[[Any], Outgoing | GatewayError]
    invalid: Callable[[GatewayError], Invalid]
    parse_reply: Callable[[Any], Any]
    headers: tuple[tuple[str, bytes], ...] = ()


@dataclass
class _Call:
    """One call's items on their way: the ticket, and the prepared items not yet produced."""

    kind: _Kind
    ticket: Ticket
    unsent: deque[tuple[int, Outgoing]]


class Client:
    """Enqueue jobs through the gateway. Thread-safe; close it, or use it as a context manager.

    `bootstrap` and `namespace` default as for the `gateway` command (see
    gateway.config); `kafka_settings` are librdkafka settings for the
    client's producer and reply consumer (`linger_ms=10` or
    `**{"linger.ms": 10}`; the producer's linger is 1 ms unless set).
    """

    def __init__(
        self, bootstrap: str | None = None, namespace: str | None = None, **kafka_settings: Any
    ) -> None:
        self._jobs = _Kind(prepare, InvalidJob, EnqueueResult.from_record)
        # Events go on `requests` beside the key's requests, marked as events (prepare_event),
        # so the processor applies them in the order this client sent them.
        self._events = _Kind(prepare_event, InvalidEvent, EventAck.from_record)
        # Commands (sdk/commands.py) come prepared, and their replies stay records.
        self._commands = _Kind(lambda out: out, Invalid, dict)
        self._transport = Transport(bootstrap, namespace, kafka_settings)

    # -- public API -----------------------------------------------------------

    @overload
    def enqueue(
        self,
        job: Job,
        wait: Literal[False] = ...,
        timeout: float = ...,
        idempotency_key: str | None = ...,
        actor: Actor | None = ...,
        tenant: str | None = ...,
    ) -> Sent: ...
    @overload
    def enqueue(
        self,
        job: Job,
        wait: Literal[True],
        timeout: float = ...,
        idempotency_key: str | None = ...,
        actor: Actor | None = ...,
        tenant: str | None = ...,
    ) -> EnqueueResult: ...
    @overload
    def enqueue(
        self,
        job: Job,
        wait: bool,
        timeout: float = ...,
        idempotency_key: str | None = ...,
        actor: Actor | None = ...,
        tenant: str | None = ...,
    ) -> EnqueueResult | Sent: ...

    def enqueue(
        self, job: Job, wait: bool = False, timeout: float = DEFAULT_TIMEOUT,
        idempotency_key: str | None = None, actor: Actor | None = None,
        tenant: str | None = None,
    ) -> EnqueueResult | Sent:  # fmt: skip
        """Send one job. Raises InvalidJob before sending anything if the job is invalid.

        With `wait`, return the committed decision; else return once Kafka has
        acknowledged the request. Raises EnqueueTimeout after `timeout` seconds.

        `idempotency_key` (1 to 256 printable characters): a retry with the same key and
        the same job, within the processor's window (24 hours by default), gets the first
        one's decision again, the same record, and makes no new job; the same key with
        another job is decided `invalid` with `idempotency_key_reused`.

        `tenant`: the job's tenant (OJS multi-tenancy), written into its `meta.tenant_id`; a
        job whose meta names another is invalid. A tenant's job passes its tenant's limits
        (core/tenant_limits.py): over one, it is decided `invalid` with
        `tenant_limit_exceeded`, and `record["details"]` says which and when to retry.

        `actor`: who the job is sent for, when this client is an edge that serves callers
        (core/actor.py): the processor writes it into the audit record as `by`. It is as
        trusted as this producer: whoever may write to `requests` may name anyone.
        """
        deadline = time.monotonic() + timeout
        ticket = self._submit(
            [for_tenant(job, tenant)],
            wait,
            deadline,
            idempotency=naming(idempotency_key, False),
            actor=actor,
        )
        [answer] = self._wait_for(ticket, wait, deadline)
        if isinstance(answer, ClientError):
            raise answer
        return answer  # type: ignore[no-any-return]

    @overload
    def enqueue_many(
        self,
        jobs: Sequence[Job],
        wait: Literal[False] = ...,
        timeout: float = ...,
        idempotency_key: str | None = ...,
        actor: Actor | None = ...,
        tenant: str | None = ...,
    ) -> list[Sent | ClientError]: ...
    @overload
    def enqueue_many(
        self,
        jobs: Sequence[Job],
        wait: Literal[True],
        timeout: float = ...,
        idempotency_key: str | None = ...,
        actor: Actor | None = ...,
        tenant: str | None = ...,
    ) -> list[EnqueueResult | ClientError]: ...
    @overload
    def enqueue_many(
        self,
        jobs: Sequence[Job],
        wait: bool,
        timeout: float = ...,
        idempotency_key: str | None = ...,
        actor: Actor | None = ...,
        tenant: str | None = ...,
    ) -> list[EnqueueResult | Sent | ClientError]: ...

    def enqueue_many(
        self, jobs: Sequence[Job], wait: bool = False, timeout: float = DEFAULT_MANY_TIMEOUT,
        idempotency_key: str | None = None, actor: Actor | None = None,
        tenant: str | None = None,
    ) -> list[Any]:  # fmt: skip
        """Send many jobs at once; one answer per job, in input order.

        An invalid job is not sent: its answer is the InvalidJob that `enqueue`
        would raise, and the other jobs go ahead. A job Kafka refused gets a
        DeliveryFailed. Raises EnqueueTimeout (with the answers that did
        arrive) if some are still missing after `timeout` seconds.

        `idempotency_key` names the whole call: retried with the same key and the same
        jobs, in the same order, it gets every job's first decision again; with other jobs,
        or another number of them, each job it had named before is decided `invalid` with
        `idempotency_key_reused` (see `enqueue`); `actor` and `tenant` as for `enqueue`.
        """
        deadline = time.monotonic() + timeout
        ticket = self._submit(
            [for_tenant(job, tenant) for job in jobs],
            wait,
            deadline,
            idempotency=naming(idempotency_key, True),
            actor=actor,
        )
        return self._wait_for(ticket, wait, deadline)

    def publish_event(
        self, event: Event, wait: bool = True, timeout: float = DEFAULT_TIMEOUT,
        actor: Actor | None = None,
    ) -> EventAck | Sent:  # fmt: skip
        """Send one job-state event, keyed by its unique_key, onto the key's log.

        With `wait` (the default), return once the processor has applied it and
        committed, so the next decision on the key sees it. Raises InvalidEvent,
        before sending anything, if the core refuses the event. `actor` as for `enqueue`.
        """
        deadline = time.monotonic() + timeout
        ticket = self._submit([event], wait, deadline, self._events, actor=actor)
        [answer] = self._wait_for(ticket, wait, deadline)
        if isinstance(answer, ClientError):
            raise answer
        return answer  # type: ignore[no-any-return]

    def send_commands(
        self, commands: Sequence[Outgoing], timeout: float = DEFAULT_TIMEOUT,
        actor: Actor | None = None,
    ) -> list[dict[str, Any] | ClientError]:  # fmt: skip
        """Send prepared queue or cron commands (sdk/commands.py) and wait for the
        processor's answer to each: a record whose `outcome` says what became of it.
        `actor` as for `enqueue`."""
        deadline = time.monotonic() + timeout
        ticket = self._submit(commands, True, deadline, self._commands, actor=actor)
        return self._wait_for(ticket, True, deadline)

    def partitions(self, timeout: float = DEFAULT_TIMEOUT) -> int:
        """How many partitions `requests` has: a queue command goes to each."""
        return self._transport.partitions(timeout)

    def close(self, timeout: float = 10.0) -> None:
        """Deliver what is still queued, stop the background thread, release the clients."""
        self._transport.close(timeout)

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:  # fmt: skip
        self.close()

    # -- the two halves of a call, shared with AsyncClient ------------------------

    def _submit(
        self, items: Sequence[Any], wait: bool, deadline: float, kind: _Kind | None = None,
        idempotency: Idempotency | None = None, actor: Actor | None = None,
    ) -> Ticket:  # fmt: skip
        """Validate every item, then produce the valid ones; answers fill the ticket."""
        call = self._prepare(items, kind, idempotency, actor)
        self._send(call, wait, deadline, block=True)
        return call.ticket

    def _prepare(
        self, items: Sequence[Any], kind: _Kind | None, idempotency: Idempotency | None = None,
        actor: Actor | None = None,
    ) -> _Call:  # fmt: skip
        """Check every item (jobs unless `kind` says otherwise); an invalid one's answer is
        filled in at once. Jobs under an idempotency key (its key, and whether they are a
        batch) are keyed by the key's home; a bad key raises InvalidJob, nothing sent.
        Each carries `actor`'s header, and no other (prepare.acting)."""
        kind = kind or self._jobs
        call = _Call(kind, Ticket(len(items)), deque())
        if idempotency is not None:
            problem = key_problem(idempotency.key, "idempotency_key")
            if problem is not None:
                raise InvalidJob(problem)
        for index, item in enumerate(items):
            if isinstance(item, GatewayError):  # refused before (for_tenant)
                verdict: Outgoing | GatewayError = item
            elif idempotency is None:
                verdict = kind.prepare(item)
            else:
                verdict = prepare(item, mint_id=False)
                if not isinstance(verdict, GatewayError):
                    of = f"{index}/{len(items)}" if idempotency.batch else None
                    verdict = idempotent(verdict, idempotency.key, of)
            if isinstance(verdict, GatewayError):
                call.ticket.fill(index, kind.invalid(verdict))
            else:
                call.unsent.append((index, acting(verdict, actor)))
        return call

    def _send(self, call: _Call, wait: bool, deadline: float, block: bool) -> bool:
        """Produce the call's unsent items in order. Without `block`, stop instead of
        waiting (topics not checked yet, the local queue full) and return False; the
        rest stays in `call.unsent` for a blocking send to finish."""
        transport = self._transport
        topics = {transport.topics[out.role] for _, out in call.unsent}
        if not transport.is_ready(topics, wait):
            if not block:
                return False
            for topic in topics:
                transport.get_ready(topic, wait, deadline)
        kind = call.kind
        while call.unsent:
            index, out = call.unsent[0]
            if not transport.produce(
                call.ticket, index, out, wait, kind.headers, kind.parse_reply, block
            ):
                return False
            call.unsent.popleft()
        return True

    def _wait_for(self, ticket: Ticket, wait: bool, deadline: float) -> list[Any]:
        if not ticket.wait(deadline - time.monotonic()):
            raise self._give_up(ticket, wait)
        return ticket.values()

    def _give_up(self, ticket: Ticket, wait: bool) -> EnqueueTimeout:
        """Forget a call's outstanding replies; the error says how many are missing."""
        self._transport.forget_replies(ticket)
        results = ticket.values()
        missing = sum(r is None for r in results)
        waiting_for = "replies" if wait else "delivery acknowledgements"
        return EnqueueTimeout(missing, len(results), waiting_for, results)


@dataclass(frozen=True)
class Idempotency:
    """What an enqueue call is named by: the caller's key, for one job or a batch."""

    key: str
    batch: bool


def naming(key: str | None, batch: bool) -> Idempotency | None:
    """What a call under `key` (None: no key) is named by."""
    return None if key is None else Idempotency(key, batch)
