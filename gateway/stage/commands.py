"""What the processor does with queue and cron commands, and with crons that fall due.

Wiring only: the rules live in core/queues.py and core/crons.py. A queue's state
(paused or not, and the version of the command that set it) lives in each
partition's state under wire.queue_key, set by a command written to every
partition; a cron lives in the state of its wire.cron_key on the one partition
that key belongs to, with its next slot on the CRONS schedule. Every change is
published on `job_states` under the same key, in the same transaction, for the
views; a command that asked (reply_to) gets an answer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import orjson

from gateway import wire
from gateway.core import EventOutcome, GatewayError
from gateway.core.crons import enabled, fire, next_run_ms, parse_cron_command, registered, shown
from gateway.core.queue_rates import (
    newer_rate,
    parse_queue_rate_command,
    policy_in,
    queue_rate_state,
)
from gateway.core.queues import newer, parse_queue_command, queue_state
from gateway.core.rate_policy import RateLimit
from gateway.partitioner import partition_for
from gateway.stage.context import Staged, StateOf
from gateway.stage.records import Output, Source, refused_command
from gateway.stage.schedule import CRONS
from gateway.stage.shared import Shared

log = logging.getLogger("gateway.processor")

APPLIED, IGNORED = str(EventOutcome.APPLIED), str(EventOutcome.IGNORED)
QUEUE = "queue"
QUEUE_RATE = "queue_rate"
CRON = "cron"


class Commands:
    """Handles commands and fires crons, through the record's emit and state."""

    def __init__(self, shared: Shared) -> None:
        self._shared = shared

    def paused(self, source: Source, queue: object) -> bool:
        """Whether `queue` is paused on the record's partition, as of the record."""
        if not isinstance(queue, str):
            return False
        raw = self._shared.state_of(source, wire.queue_key(queue)).get_bytes(QUEUE)
        return raw is not None and bool(orjson.loads(raw).get("paused"))

    def queue_limits(self, source: Source, queue: object) -> RateLimit | None:
        """`queue`'s rate limit on the record's partition, as of the record; None for none."""
        if not isinstance(queue, str):
            return None
        # Peeked: a queue without one leaves its claims' audit records as they were.
        raw = self._shared.state_of(source, wire.queue_key(queue)).peek(QUEUE_RATE)
        return None if raw is None else policy_in(orjson.loads(raw))

    def handle(
        self, value: bytes | None, key: bytes | None, source: Source, _state: Staged
    ) -> bool:
        """A queue or cron command (the handler of its kind: see dedup.py)."""
        kind = source.headers.get(wire.KIND_HEADER)
        if kind == wire.QUEUE_COMMAND:
            self._on_queue(value, key, source)
        elif kind == wire.QUEUE_RATE_COMMAND:
            self._on_queue_rate(value, key, source)
        else:
            self._on_cron(value, key, source)
        return True

    def refused(self, source: Source, error: GatewayError, key: bytes | None) -> list[Output]:
        return refused_command(source, error, key)

    def _publish(self, source: Source, key: bytes, record: dict[str, Any] | None) -> None:
        value = None if record is None else orjson.dumps(record)
        self._shared.emit(Output(value, key, role="job_states"), source)

    # -- queues ---------------------------------------------------------------

    def _on_queue(self, value: bytes | None, key: bytes | None, source: Source) -> None:
        command = parse_queue_command(value or b"")
        if isinstance(command, GatewayError):
            self._shared.refuse_command(source, command, key)
            return
        self._keep_newest(
            source, command.queue, QUEUE, wire.queue_key(command.queue),
            lambda held: newer(command, held),
            lambda: queue_state(command, source.timestamp_ms),
        )  # fmt: skip

    def _on_queue_rate(self, value: bytes | None, key: bytes | None, source: Source) -> None:
        """A queue's rate limit set or cleared on this partition (core/queue_rates.py), the
        newest command winning as a pause's does; published under wire.queue_rate_key."""
        command = parse_queue_rate_command(value or b"")
        if isinstance(command, GatewayError):
            self._shared.refuse_command(source, command, key)
            return
        self._keep_newest(
            source, command.queue, QUEUE_RATE, wire.queue_rate_key(command.queue),
            lambda held: newer_rate(command, held),
            lambda: queue_rate_state(command, source.timestamp_ms),
        )  # fmt: skip

    def _keep_newest(
        self, source: Source, queue: str, name: str, published: bytes,
        newer_than_held: Callable[[Any], bool], made: Callable[[], dict[str, Any]],
    ) -> None:  # fmt: skip
        """A queue's state `name` on this partition replaced by the command's if it is newer
        than the one held (published under `published`); answered with the state held then:
        an older command changes nothing."""
        queue_key = wire.queue_key(queue)
        state = self._shared.state_of(source, queue_key)
        raw = state.get_bytes(name)
        held = None if raw is None else orjson.loads(raw)
        if newer_than_held(held):
            held = made()
            state.set_bytes(name, orjson.dumps(held))
            self._publish(source, published, held)
        self._shared.answer_command(source, queue_key, {"outcome": APPLIED, name: held})

    # -- crons ----------------------------------------------------------------

    def _on_cron(self, value: bytes | None, key: bytes | None, source: Source) -> None:
        command = parse_cron_command(value or b"")
        if isinstance(command, GatewayError):
            self._shared.refuse_command(source, command, key)
            return
        cron_key = wire.cron_key(command.name)
        if key != cron_key or partition_for(cron_key, self._shared.partitions) != source.partition:
            # Its cron lives on another partition: the command goes there, keyed as it must be.
            headers = list(source.headers.items())
            self._shared.emit(Output(value, cron_key, role="requests", headers=headers), source)
            return
        state = self._shared.state_of(source, cron_key)
        raw = state.get_bytes(CRON)
        before = None if raw is None else orjson.loads(raw)
        now = source.timestamp_ms
        if command.op == "register":
            assert command.definition is not None
            after = registered(command.definition, before, now)
        elif before is None:
            self._shared.answer_command(
                source, cron_key, {"outcome": IGNORED, "reason": "unknown_cron"}
            )
            return
        elif command.op == "enable":
            assert command.enabled is not None
            after = enabled(before, command.enabled, now)
        else:
            state.delete(CRON)
            self._publish(source, cron_key, None)
            told = {"outcome": APPLIED, "cron": shown(before), "deleted": True}
            self._shared.answer_command(source, cron_key, told)
            return
        self._store(source, cron_key, after)
        told = {"outcome": APPLIED, "cron": shown(after), "created": before is None}
        self._shared.answer_command(source, cron_key, told)

    def _store(self, source: Source, cron_key: bytes, cron: dict[str, Any]) -> None:
        """Keep and publish the cron; its next slot goes on the schedule."""
        self._shared.state_of(source, cron_key).set_bytes(CRON, orjson.dumps(cron))
        self._publish(source, cron_key, shown(cron))
        self.schedule_cron(source, cron)

    def schedule_cron(
        self, source: Source, cron: dict[str, Any], state_of: StateOf | None = None
    ) -> None:
        """The cron's next slot on the CRONS schedule (in `state_of`'s, else the record's)."""
        due = next_run_ms(cron)
        if due is not None:
            cron_key = wire.cron_key(cron["name"]).decode()
            self._shared.schedule(CRONS, source, cron_key, cron["name"], due, state_of)

    def fire_due(self, source: Source) -> None:
        """Every cron of the partition whose slot the record's time has reached fires."""
        for cron_route, name in self._shared.take_due(CRONS, source):
            cron_key = cron_route.encode()
            raw = self._shared.state_of(source, cron_key).get_bytes(CRON)
            fired = None if raw is None else fire(orjson.loads(raw), source.timestamp_ms)
            if fired is None:
                continue  # deleted, disabled, or moved since: a later entry has it
            request, after = fired
            route = None if request is None else wire.route(request)
            if request is not None and route is not None:  # a keyed request: always a route
                slot = request.envelope.raw["meta"]["cron_slot"]
                headers = [(wire.REQUEST_ID_HEADER, f"cron/{name}/{slot}".encode())]
                value = orjson.dumps(request.envelope.raw)
                self._shared.emit(Output(value, route.encode(), role="requests", headers=headers),
                                 source)  # fmt: skip
                log.info("cron fired", extra={"cron": name, "slot": slot})
            else:
                log.warning("cron stopped", extra={"cron": name, "error": after.get("error")})
            self._store(source, cron_key, after)
