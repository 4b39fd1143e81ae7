"""Idempotency keys in the dedup stage: core/idempotency.py's two records, kept in state.

A request with an `idempotency_key` header is keyed by the key's home
(`wire.idempotency_home`) by whoever produces it (the SDK, the router). There, under that
key's state, the stage admits it (`core.idempotency.admit`): the digest of its body is
checked against what the key admitted before, and a request the key was not given for is
answered `idempotency_key_reused` at once. An admitted one goes on to its route, marked
`idempotency_checked` with its digest; a job without key or id is given its id here, the
same one on every attempt, so every attempt travels the same way. At the route, an
admitted request whose item the route already answered gets that decision record again,
byte for byte, with no new decision; else it is decided, and its decision record kept.
A keyed request with a client id reaches the id's home before its route (core/ids.py): the
answer is kept there too (a refusal of the claim where it is made, a route's decision by the
route's report), so a retry is answered there, whoever claims the id by then.
Both records expire `Limits.idempotency_ms` after they were written, in event time.
"""

from __future__ import annotations

from datetime import timedelta

import orjson

from gateway import wire
from gateway.core import GatewayError, Outcome, Request, uuid7
from gateway.core.idempotency import (
    Admission,
    Admitted,
    Answer,
    Item,
    admit,
    answered,
    key_problem,
    value_digest,
    with_job_id,
)
from gateway.partitioner import partition_for
from gateway.stage.context import Staged
from gateway.stage.parsing import dialect_of
from gateway.stage.records import Output, Source, refused_request
from gateway.stage.shared import Shared

ADMISSION = "idempotency"
ANSWER = "idem/"  # + item + "/" + key: an answer kept at the route


class Idempotency:
    def __init__(self, shared: Shared) -> None:
        self._shared = shared

    @staticmethod
    def key_of(source: Source) -> str | None:
        """The request's idempotency key, if it has one."""
        return source.header(wire.IDEMPOTENCY_KEY_HEADER)

    @staticmethod
    def unchecked(source: Source) -> bool:
        return wire.IDEMPOTENCY_CHECKED_HEADER not in source.headers

    def at_home(
        self, request: Request, value: bytes | None, key: bytes | None, source: Source,
        state: Staged, idem: str,
    ) -> None:  # fmt: skip
        """Admit the request under its key, at the key's home (sent there first if this is
        not it), or refuse it."""
        shared = self._shared
        home = wire.idempotency_home(idem)
        if key != home or partition_for(home, shared.partitions) != source.partition:
            shared.emit(Output(value or b"", home, "requests",
                              headers=list(source.headers.items())), source)  # fmt: skip
            return
        item = Item.parse(source.header(wire.IDEMPOTENCY_ITEM_HEADER))
        problem = key_problem(idem, "the idempotency_key header")
        if isinstance(item, GatewayError) or problem is not None:
            self._refuse(source, problem or item, request, value)  # type: ignore[arg-type]
            return
        digest = value_digest(value)
        before = Admission.load(state.get_bytes(ADMISSION))
        now = source.timestamp_ms
        verdict = admit(idem, before, item, digest, now, shared.limits.idempotency_ms)
        if not isinstance(verdict, Admitted):
            self._refuse(source, verdict, request, value)
            shared.metrics.idempotent.labels("reused").inc()
            return
        shared.metrics.idempotent.labels("admitted").inc()
        admission, job_id = verdict.admission, verdict.job_id
        route = request.envelope.id or wire.route(request)
        if route is None:  # neither key nor id: the same id on every attempt
            if job_id is None:
                job_id = uuid7(now, None, source.seed)
                admission = with_job_id(admission, item, job_id)
            value = orjson.dumps({**orjson.loads(value or b"{}"), "id": job_id})
            route = job_id
        if admission != before:
            ttl = timedelta(milliseconds=max(admission.until_ms - now, 1))
            state.set_bytes(ADMISSION, admission.dump(), ttl=ttl)
            # For its audit record (`kind: forwarded`): what the key admitted, sent where.
            shared.what = {"idempotency_key": idem, "item": item.dump() or None, "route": route}
        checked = wire.IDEMPOTENCY_CHECKED_HEADER
        headers = [(k, v) for k, v in source.headers.items() if k != checked]
        headers.append((checked, digest.encode()))
        shared.emit(Output(value or b"", route.encode(), "requests", headers=headers), source)

    def replayed(self, source: Source, key: bytes | None, state: Staged, idem: str) -> bool:
        """At the route: a request whose item was answered here within the window gets that
        answer again (True), with no new decision; its audit record shows the answer read."""
        name = _answer_name(source, idem)
        held = Answer.load(state.get_bytes(name))
        digest = source.header(wire.IDEMPOTENCY_CHECKED_HEADER) or ""
        got = answered(held, digest, source.timestamp_ms)
        if got is None:
            return False
        self._shared.metrics.idempotent.labels("answered_again").inc()
        again = Answer(got.digest, got.until_ms, got.record, got.replays + 1)
        state.set_bytes(name, again.dump(), ttl=self._ttl(got.until_ms, source))
        first = orjson.loads(got.record).get("request_id")
        self._shared.what = {
            "idempotency_key": idem, "answered_again": got.replays + 1, "answer_of": first,
        }  # fmt: skip
        reply_to = source.header(wire.REPLY_TO_HEADER)
        if reply_to:
            correlation = source.headers.get(wire.CORRELATION_ID_HEADER, b"")
            self._shared.emit(Output(
                got.record, key or source.seed, topic=reply_to,
                headers=[(wire.CORRELATION_ID_HEADER, correlation)],
            ), source)  # fmt: skip
        return True

    def replayed_at_home(self, source: Source, key: bytes | None, state: Staged, idem: str) -> bool:
        """`replayed` at the id's home, where a held answer is the exception (see `peek`)."""
        held = state.peek(_answer_name(source, idem)) is not None
        return held and self.replayed(source, key, state, idem)

    def keep(self, source: Source, state: Staged, idem: str, record: bytes) -> None:
        """Where it was decided (its route, or its id's home for a claim it refused): the
        decision record an admitted request got, for its retries."""
        digest = source.header(wire.IDEMPOTENCY_CHECKED_HEADER) or ""
        until = source.timestamp_ms + self._shared.limits.idempotency_ms
        answer = Answer(digest, until, record)
        state.set_bytes(_answer_name(source, idem), answer.dump(), ttl=self._ttl(until, source))

    def kept(self, source: Source, state: Staged) -> tuple[str, bytes] | None:
        """At the route, after a claimed request's decision: the answer its key holds here
        (name, bytes), for the report to the id's home."""
        idem = self.key_of(source)
        if idem is None:
            return None
        name = _answer_name(source, idem)
        raw = state.get_bytes(name)
        return None if raw is None else (name, raw)

    def keep_reported(self, source: Source, state: Staged, name: str, raw: bytes) -> None:
        """At the id's home: the answer a route reported, so a retry, which reaches the home
        first, gets it there, whoever claims the id by then."""
        try:
            answer = Answer.load(raw)
        except (ValueError, KeyError, TypeError):  # no route wrote it: nothing to keep
            return
        if answer is not None and name.startswith(ANSWER) and answer.until_ms > source.timestamp_ms:
            state.set_bytes(name, raw, ttl=self._ttl(answer.until_ms, source))

    @staticmethod
    def _ttl(until_ms: int, source: Source) -> timedelta:
        return timedelta(milliseconds=max(until_ms - source.timestamp_ms, 1))

    def _refuse(
        self, source: Source, error: GatewayError, request: Request, value: bytes | None
    ) -> None:
        dialect = dialect_of(request, value)
        for output in refused_request(source, error, dialect, request.envelope.raw):
            self._shared.emit(output, source)
        self._shared.metrics.decided(Outcome.INVALID, dialect, source.timestamp_ms)


def _answer_name(source: Source, idem: str) -> str:
    item = source.header(wire.IDEMPOTENCY_ITEM_HEADER) or "-"
    return f"{ANSWER}{item}/{idem}"
