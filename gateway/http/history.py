"""`GET /ojs/v1/admin/unique-jobs/{key}/history`: a key's audit records, each with its reason.

Each serve process keeps an audit index of `decisions` beside its job view
(audit/index.py), followed as records come, and reads exactly the key's
records by their positions (audit/follow.py); what each says is the record's
own (audit/explain.py). Each is also checked (audit/verify.py): its seal, with the keys
of `serve --audit-key-file`, its partition, and its place in the chain as the index
found it. The key is a unique key or a job id (a job with a unique
key answers its key's history). A page holds `limit` records in log order;
`next_cursor`, when there are more, is where the next page starts. `index`
says whether the index had read all of `decisions` (`complete`) and, if not, how
many offsets it was behind: a request waits up to SETTLE_S for it to catch up
with the records committed when it came, so a caller sees its own decisions.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from starlette.requests import Request

from gateway.audit import follow, history
from gateway.audit.index import AuditIndex, Position, open_index
from gateway.audit.verify import PLAIN, Verifier
from gateway.core import INVALID_REQUEST
from gateway.http import errors
from gateway.http.answers import Answer
from gateway.http.errors import ApiError
from gateway.http.plumbing import int_param
from gateway.processor.state_identity import Identity

if TYPE_CHECKING:
    from gateway.http.binding import Binding

QUERY = ("limit", "cursor")
SETTLE_S = 2.0
_SETTLE_POLL_S = 0.02


def audit_dir(view_dir: Path) -> Path:
    """Beside the view, one per serve process as the view is (so `kafka down --purge`,
    which deletes the views of its cluster, finds it too)."""
    return view_dir.parent / f"{view_dir.name}-audit"


class KeyHistory:
    """A serve process's audit index, what follows `decisions` into it, and a reader.

    `read` reads records by position (one reader: calls are serialised) and `ends`
    gives each partition's committed end now."""

    def __init__(
        self,
        index: AuditIndex,
        topic: str,
        read: history.Read,
        ends: Callable[[], Mapping[int, int]],
        follower: follow.Follower | None = None,
        verifier: Verifier = PLAIN,
    ) -> None:
        self.index, self.topic, self._read, self._ends = index, topic, read, ends
        self._follower = follower
        self.verifier = verifier
        self._lock = threading.Lock()

    @staticmethod
    def open(
        directory: Path, identity: Identity, topic: str, settings: Mapping[str, Any],
        admin: AdminClient, verifier: Verifier,
    ) -> KeyHistory:  # fmt: skip
        index = open_index(directory, identity)
        reader = follow.consumer(settings, seeking=True)

        def ends() -> Mapping[int, int]:
            listed = admin.list_topics(topic, timeout=follow.TIMEOUT_S).topics[topic].partitions
            return follow.committed_ends(admin, topic, listed)

        follower = follow.Follower(index, topic, follow.consumer(settings))
        read: history.Read = lambda p: follow.read_at(reader, topic, p)  # noqa: E731
        return KeyHistory(index, topic, read, ends, follower, verifier)

    def start(self) -> None:
        if self._follower is not None:
            self._follower.start()

    def close(self) -> None:
        if self._follower is not None:
            self._follower.stop()
        self.index.close()

    def settle(self) -> int:
        """Wait (up to SETTLE_S) for the index to reach the committed ends as they are now;
        how many offsets it is behind them then."""
        ends = self._ends()
        deadline = time.monotonic() + SETTLE_S
        while True:
            held = self.index.offsets()
            behind = sum(max(0, end - held.get(p, 0)) for p, end in ends.items())
            if behind == 0 or time.monotonic() >= deadline:
                return behind
            time.sleep(_SETTLE_POLL_S)

    def page(self, key: str, start: Position, limit: int) -> history.Page | None:
        with self._lock:
            return history.page(self.index, key, start, limit, self._read, self.verifier)


async def key_history(request: Request, binding: Binding, _: str) -> Answer | ApiError:
    key = request.path_params["key"]
    problem = history.key_problem(key)
    if problem is not None:
        return ApiError(400, INVALID_REQUEST, f"the key {problem}")
    limit = int_param(
        request.query_params.get("limit"), "limit", history.DEFAULT_LIMIT, 1, history.MAX_LIMIT
    )
    if isinstance(limit, ApiError):
        return limit
    cursor = request.query_params.get("cursor")
    start = history.parse_cursor(cursor) if cursor else (0, 0)
    if isinstance(start, str):
        return ApiError(400, INVALID_REQUEST, f"cursor {start}")
    audit = binding.audit
    if audit is None:
        return ApiError(503, errors.UNAVAILABLE, "this process keeps no audit index")
    try:
        behind = await asyncio.to_thread(audit.settle)
        page = await asyncio.to_thread(audit.page, key, start, limit)
    except KafkaException as exc:
        problem = f"the decisions topic could not be read: {exc.args[0].str()}"
        return ApiError(503, errors.UNAVAILABLE, problem, retryable=True)
    index = {"complete": behind == 0, "behind": behind}
    if page is None:
        unread = f" (the index has {behind} offsets of decisions still to read)" if behind else ""
        message = f"no audit record mentions this key or job id{unread}"
        return ApiError(404, errors.NOT_FOUND, message, details={"index": index})
    return Answer(200, {
        "key": key, "unique_key": page.unique_key,
        "items": [history.as_json(item, audit.topic) for item in page.items],
        "next_cursor": None if page.next is None else history.format_cursor(page.next),
        "index": index,
    })  # fmt: skip
