"""GET /ojs/v1/admin/unique-jobs/{key}/history as served: pages, cursors, refusals."""

from __future__ import annotations

import asyncio
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any, cast

import httpx
import orjson
import pytest

from gateway.audit import explain_record, key_history
from gateway.audit.index import AuditIndex
from gateway.http import history
from gateway.http.app import OPENAPI, HttpSettings, create_app
from gateway.http.binding import Binding
from gateway.view.store import JobView

KEY = "c" * 64
JOB = "0199cccc-0000-7000-8000-000000000001"
PATH = "/ojs/v1/admin/unique-jobs/{}/history"


def decision(n: int) -> dict[str, Any]:
    outcome = "accepted" if n == 0 else "rejected"
    return {
        "kind": "request", "outcome": outcome, "request_id": f"r{n}", "unique_key": KEY,
        "job_id": JOB, "existing_job_id": None if n == 0 else JOB,
        "existing_job_state": None if n == 0 else "available", "policy": None,
        "decided_at": "2026-01-01T00:00:00Z", "source": {"topic": "req", "partition": 1,
                                                        "offset": n},
        "state": {"routes": [KEY], "before": [[KEY, "entries", None, None]],
                  "jobs": [[JOB, None, "available"]] if n == 0 else [], "after": "0"},
    }  # fmt: skip


class Served:
    def __init__(self, tmp_path: Path, records: int, end: int) -> None:
        self.records = {(1, 10 * n): orjson.dumps(decision(n)) for n in range(records)}
        self.index = AuditIndex(tmp_path / "audit")
        self.index.add([(p, o, v) for (p, o), v in self.records.items()], {1: 10 * records})
        self.view = JobView(tmp_path / "view")
        self.end = end
        audit = key_history.KeyHistory(self.index, "ns.decisions", self.read, lambda: {1: self.end})
        settings = HttpSettings(bootstrap="127.0.0.1:1", namespace="unit")
        self.app = create_app(settings)  # its lifespan is not run: the binding is this one
        self.app.state.binding = Binding(
            settings, cast(Any, None), self.view, cast(Any, None), "requests", audit=audit
        )

    def read(self, positions: Any) -> tuple[dict, dict]:
        return {p: self.records.get(p) for p in positions}, {1: 0}

    def raw(self, path: str) -> tuple[int, dict[str, Any]]:
        """A request whatever its length (httpx refuses a URL over 64 KiB)."""
        sent: list[MutableMapping[str, Any]] = []

        async def receive() -> MutableMapping[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: MutableMapping[str, Any]) -> None:
            sent.append(message)

        scope = {"type": "http", "method": "GET", "path": path, "raw_path": path.encode(),
                 "query_string": b"", "headers": [], "http_version": "1.1"}  # fmt: skip
        asyncio.run(self.app(scope, receive, send))
        return sent[0]["status"], orjson.loads(sent[1]["body"])

    def get(self, path: str, **params: Any) -> httpx.Response:
        async def go() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
                return await client.get(path, params=params)

        return asyncio.run(go())

    def close(self) -> None:
        self.index.close()
        self.view.close()


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(key_history, "SETTLE_S", 0.0)  # an index behind answers at once
    made = Served(tmp_path, records=5, end=50)
    yield made
    made.close()


def test_a_key_s_history_is_answered_a_page_at_a_time(served: Served):
    first = served.get(PATH.format(JOB), limit="3")
    assert first.status_code == 200, first.text
    body = first.json()
    assert body["key"] == JOB and body["unique_key"] == KEY
    assert body["index"] == {"complete": True, "behind": 0}
    assert [i["position"]["offset"] for i in body["items"]] == [0, 10, 20]
    item = body["items"][1]
    assert item["position"] == {"topic": "ns.decisions", "partition": 1, "offset": 10}
    assert item["source"] == {"topic": "req", "partition": 1, "offset": 1}
    assert item["kind"] == "request" and item["outcome"] == "rejected"
    assert item["reason"] == "\n".join(explain_record(decision(1)).reason)
    assert item["record"] == decision(1) and item["at"] == "2026-01-01T00:00:00Z"
    assert body["next_cursor"] == "1:30"
    rest = served.get(PATH.format(KEY), cursor=body["next_cursor"]).json()
    assert [i["position"]["offset"] for i in rest["items"]] == [30, 40]
    assert rest["next_cursor"] is None and rest["key"] == KEY


def test_an_item_says_who_asked_for_its_record(tmp_path: Path):
    made = Served(tmp_path, records=2, end=20)
    by = {"principal": "alice", "role": "admin", "source": "10.0.0.5", "request_id": "r1"}
    told = {**decision(1), "by": by}
    made.records[(1, 10)] = orjson.dumps(told)
    try:
        first, second = made.get(PATH.format(KEY)).json()["items"]
    finally:
        made.close()
    assert first["by"] is None
    assert second["by"] == "admin:alice from 10.0.0.5" and second["record"]["by"] == by
    assert second["reason"].endswith("asked by admin:alice from 10.0.0.5")


def test_an_index_behind_the_log_says_how_far(served: Served):
    served.end = 57
    body = served.get(PATH.format(KEY)).json()
    assert body["index"] == {"complete": False, "behind": 7}


def test_a_key_nothing_mentions_is_404_in_the_ojs_envelope(served: Served):
    answer = served.get(PATH.format("0199dddd-0000-7000-8000-000000000009"))
    assert answer.status_code == 404
    error = answer.json()["error"]
    assert error["code"] == "not_found" and error["retryable"] is False and error["request_id"]
    assert error["details"] == {"index": {"complete": True, "behind": 0}}
    served.end = 57  # records it has not read yet may name it
    error = served.get(PATH.format("0199dddd-0000-7000-8000-000000000009")).json()["error"]
    assert error["message"].endswith("(the index has 7 offsets of decisions still to read)")


@pytest.mark.parametrize(
    ("key", "params", "named"),
    [
        (KEY, {"page": "1"}, "unknown query parameter 'page'"),
        (KEY, {"cursor": "1:2:3"}, "cursor is not partition:offset"),
        (KEY, {"cursor": "x" * 60_000}, "cursor is not partition:offset"),
        (KEY, {"cursor": f"{2**31}:0"}, "beyond"),
        (KEY, {"limit": "0"}, "limit must be an integer from 1 to 1000"),
        (KEY, {"limit": "1001"}, "limit must be an integer from 1 to 1000"),
        ("a%00b", {}, "control character"),
        ("%FF%FE", {}, "is not UTF-8 text"),
    ],
)
def test_bad_input_is_400_with_a_code_and_message(
    served: Served, key: str, params: dict[str, str], named: str
):
    answer = served.get(PATH.format(key), **params)
    error = answer.json()["error"]
    assert answer.status_code == 400, answer.text
    assert error["code"] == "invalid_request" and named in error["message"]


def test_a_key_of_ten_megabytes_is_refused_unread(served: Served):
    status, body = served.raw(PATH.format("k" * 10_000_000))
    assert status == 400 and "longer than 255 bytes" in body["error"]["message"]


def test_the_query_parameters_served_are_those_the_document_describes(served: Served):
    doc = orjson.loads(OPENAPI.read_bytes())
    listed = [p["name"] for p in doc["paths"][PATH.format("{key}")]["get"]["parameters"]
              if p.get("in") == "query"]  # fmt: skip
    assert sorted(listed) == sorted(history.QUERY)
    for name, value in (("limit", "2"), ("cursor", "1:10")):
        assert served.get(PATH.format(KEY), **{name: value}).status_code == 200
