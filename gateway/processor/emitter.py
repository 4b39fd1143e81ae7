"""Where the processor's outputs go: the transaction, or an early reply.

Every output of every record passes here, so it is compiled with the per-record path
(gateway/compiled.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from gateway.processor.metrics import Metrics
from gateway.processor.replies import ReplyTopics
from gateway.stage.context import Emit
from gateway.stage.records import Output, Source

log = logging.getLogger("gateway.processor")

# topic, key, value, headers[, partition]
Produce = Callable[..., None]


def emitter(
    names: dict[str, str],
    replies: ReplyTopics,
    metrics: Metrics,
    transactional: Produce,
    early: Produce | None,
    partitions: Mapping[str, int] | None = None,
) -> Emit:
    """Where each output goes: a reply to an allowed topic through `early` when answers are
    early, everything else through the transaction; an output that names its partition
    (an audit record) to that partition of its role's topic (`partitions`: their counts)."""

    def emit(output: Output, source: Source) -> None:
        if output.topic is not None:
            refusal = replies.refusal(output.topic)
            if refusal is not None:
                metrics.replies_dropped.labels(refusal).inc()
                log.warning(
                    "reply not sent",
                    extra={"reply_to": output.topic[:255], "reason": refusal,
                           "source": source.as_dict()},
                )  # fmt: skip
                return
            if early is not None:
                # The guard hands over a record's outputs only once its handling has
                # succeeded (or its `internal` answer): no reply leaves for a handling undone.
                early(output.topic, output.key, output.value, output.headers)
                return
        role = output.role or ""
        partition = -1
        if output.partition is not None and partitions:
            partition = output.partition % partitions[role]
        transactional(
            output.topic or names[role], output.key, output.value, output.headers, partition
        )

    return emit
