"""The per-record path is total: whatever a record holds, it gets its answer and the
partition moves on.

Exactly-once plus determinism means a record that makes the processor raise is
read again after every restart, so one bad record would stop its partition for
good. The guard runs each record's handling against a scope of its own: its
outputs and its state writes wait there until the handling has returned and
every output is known to fit its topic. Then they are applied together. If the
handling raises, or an output would not fit, none of them is: the record gets
an `internal` answer instead (a rejection and its decision record for a
request, a reply for an event that asked for one) and a copy of it goes to
`dead_letters`, all in the same transaction as everything else.

The guard sits inside `Dedup` and `Router`, so replay and the tests run the
same path as the live processor.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from gateway.core import INTERNAL, GatewayError
from gateway.core.limits import MAX_RECORD_BYTES
from gateway.stage.context import Emit, KeyState, Staged, StageMetrics, StateOf
from gateway.stage.records import Output, Source, dead_letter, record_size

log = logging.getLogger("gateway.processor")

# What a failed record is answered with: its outputs, built from the source alone.
Answer = Callable[[Source, GatewayError], list[Output]]


class OutputTooLarge(Exception):
    """An output would exceed its topic's record size: a limit of the core let it through."""


class Guard:
    """Runs one record's handling at a time, all or nothing."""

    def __init__(self, emit: Emit, state_of: StateOf | None, metrics: StageMetrics) -> None:
        self._emit = emit
        self._state_of = state_of
        self._metrics = metrics
        self._outputs: list[Output] = []
        self._states: dict[bytes, Staged] = {}

    # What the handling is given in place of the real emit and state.

    def emit(self, output: Output, _source: Source) -> None:
        self._outputs.append(output)

    def state_of(self, source: Source, key: bytes) -> Staged:
        staged = self._states.get(key)
        if staged is None:
            assert self._state_of is not None, "this stage keeps no state"
            staged = self._states[key] = Staged(self._state_of(source, key))
        return staged

    @property
    def staged(self) -> dict[bytes, Staged]:
        """Every key the record's handling has touched so far, by key."""
        return self._states

    @property
    def outputs(self) -> list[Output]:
        """The record's outputs so far."""
        return self._outputs

    def stage(self, key: bytes | None, state: KeyState) -> Staged:
        """The record's own key's state, as the stages handed it over."""
        staged = self._states.get(key or b"")
        if staged is None:
            staged = self._states[key or b""] = Staged(state)
        return staged

    def run(
        self,
        stage: str,
        source: Source,
        value: bytes | None,
        key: bytes | None,
        handle: Callable[[], None],
        answer: Answer,
    ) -> bool:
        """Handle a record; never raise. `answer` says what a failed record gets (it may read
        state: what the failed handling wrote is gone by then). False: the handling failed."""
        try:
            try:
                handle()
                for output in self._outputs:
                    _check_fits(output)
            except Exception as exc:  # the point of the guard: nothing escapes the record
                self._outputs.clear()
                self._states.clear()
                self._failed(stage, source, value, key, exc, answer)
                return False
            for staged in self._states.values():
                staged.apply()
            for output in self._outputs:
                self._emit(output, source)
            return True
        finally:
            self._outputs.clear()
            self._states.clear()

    def _failed(
        self,
        stage: str,
        source: Source,
        value: bytes | None,
        key: bytes | None,
        exc: Exception,
        answer: Answer,
    ) -> None:
        cause = f"{type(exc).__name__}: {exc}"[:1000]
        self._metrics.dead_letters.labels(stage, type(exc).__name__).inc()
        log.error(
            "record failed; answered `internal` and kept on dead_letters",
            exc_info=exc,
            extra={"stage": stage, "source": source.as_dict()},
        )
        error = GatewayError(
            INTERNAL,
            f"the gateway could not handle this record ({type(exc).__name__}); it is kept on "
            f"dead_letters as {source.topic}/{source.partition}/{source.offset}",
        )
        outputs = [dead_letter(stage, source, value, key, cause)]
        try:
            outputs = [*answer(source, error), *outputs]
            for output in outputs:
                _check_fits(output)
            # What the answer wrote (the audit trail's head), and nothing the handling did.
            for staged in self._states.values():
                staged.apply()
        except Exception:  # an answer that cannot be built: the dead letter alone
            log.exception("answer to a failed record could not be built", extra=source.as_dict())
            outputs = outputs[-1:]
        for output in outputs:
            self._emit(output, source)


def _check_fits(output: Output) -> None:
    size = record_size(output)
    if size > MAX_RECORD_BYTES:
        where = output.topic or output.role
        raise OutputTooLarge(
            f"a record for {where} would be {size} bytes; the limit is {MAX_RECORD_BYTES}"
        )
