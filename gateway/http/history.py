"""`GET /ojs/v1/admin/unique-jobs/{key}/history`: a key's audit records, each with its reason.

Each serve process keeps an audit index of `decisions` beside its job view
(audit/key_history.py), followed as records come, and reads exactly the key's
records by their positions (audit/follow.py); what each says is the record's
own (audit/explain.py). Each is also checked (audit/verify.py): its seal, with the keys
of `serve --audit-key-file`, its partition, and its place in the chain as the index
found it. The key is a unique key or a job id (a job with a unique
key answers its key's history). A page holds `limit` records in log order;
`next_cursor`, when there are more, is where the next page starts; the first page
(no cursor) also says how many records the history holds (`count`). `index`
says whether the index had read all of `decisions` (`complete`) and, if not, how
many offsets it was behind: a request waits up to key_history.SETTLE_S for it to catch up
with the records committed when it came, so a caller sees its own decisions. A caller
whose scope is limited (access.scope) gets a page only when the jobs its records carry
are all of queues it sees, and some are: else the 404 of a key no record mentions.
"""

from __future__ import annotations

import asyncio

from confluent_kafka import KafkaException
from starlette.requests import Request

from gateway.audit import history
from gateway.core import INVALID_REQUEST
from gateway.http import access, errors
from gateway.http.answers import Answer
from gateway.http.binding import Binding
from gateway.http.errors import ApiError
from gateway.http.plumbing import int_param

QUERY = ("limit", "cursor")


async def key_history(request: Request, binding: Binding, _: str) -> Answer:
    key = request.path_params["key"]
    problem = history.key_problem(key)
    if problem is not None:
        raise ApiError(400, INVALID_REQUEST, f"the key {problem}")
    limit = int_param(
        request.query_params.get("limit"), "limit", history.DEFAULT_LIMIT, 1, history.MAX_LIMIT
    )
    cursor = request.query_params.get("cursor")
    start = history.parse_cursor(cursor) if cursor else (0, 0)
    if isinstance(start, str):
        raise ApiError(400, INVALID_REQUEST, f"cursor {start}")
    audit = binding.audit
    if audit is None:
        raise ApiError(503, errors.UNAVAILABLE, "this process keeps no audit index")
    try:
        behind = await asyncio.to_thread(audit.settle)
        page = await asyncio.to_thread(audit.page, key, start, limit)
        total = None if cursor or page is None else await asyncio.to_thread(audit.count, key)
    except KafkaException as exc:
        problem = f"the decisions topic could not be read: {exc.args[0].str()}"
        raise ApiError(503, errors.UNAVAILABLE, problem, retryable=True) from None
    index = {"complete": behind == 0, "behind": behind}
    if page is not None and not _seen(access.scope(), page):
        page = None
    if page is None:
        unread = f" (the index has {behind} offsets of decisions still to read)" if behind else ""
        message = f"no audit record mentions this key or job id{unread}"
        raise ApiError(404, errors.NOT_FOUND, message, details={"index": index})
    return Answer(200, {
        "key": key, "unique_key": page.unique_key,
        "items": [history.as_json(item, audit.topic) for item in page.items],
        "next_cursor": None if page.next is None else history.format_cursor(page.next),
        "index": index, **({} if total is None else {"count": total}),
    })  # fmt: skip


def _seen(scope: access.Scope, page: history.Page) -> bool:
    if scope.everything:
        return True
    jobs = history.jobs_named(page)
    return bool(jobs) and all(map(scope.sees_job, jobs))
