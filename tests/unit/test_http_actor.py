"""Who asked, at the edge: every record the binding sends for a request names the caller
(http/caller.py) as the SDK's `actor`, from the connection and the principal authentication
found, never from what the caller sends; a privileged or refused request leaves one JSON
line in the security log, without a job's args or keys."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import orjson
import pytest
from starlette.types import Receive, Scope, Send

from gateway.auth import credentials, keys
from gateway.auth.keyring import Watcher
from gateway.core.actor import Actor
from gateway.http.caller import PRINCIPAL
from gateway.logs import JsonFormatter
from gateway.sdk import EventAck
from tests.unit.test_http_admin import JOB_IDS, JOBS, Admin, Processor

LIVE = {JOB_IDS[0], JOB_IDS[1], JOB_IDS[2]}
UNKNOWN = "01900000-0000-7000-8000-0000000000ff"


class Recording(Processor):
    """The fake processor, keeping who each event was sent for."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.actors: list[Actor | None] = []

    async def publish_event(self, event: dict[str, Any], **options: Any) -> EventAck:
        self.actors.append(options.get("actor"))
        return await super().publish_event(event)


class Authenticated:
    """What authentication does for the seam: names the principal in the scope."""

    def __init__(self, app: Any, principal: tuple[str, str | None] | None) -> None:
        self.app, self.principal = app, principal

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.principal is not None and scope["type"] == "http":
            scope[PRINCIPAL] = self.principal
        await self.app(scope, receive, send)


def served(tmp_path: Path, principal: tuple[str, str | None] | None) -> Admin:
    admin = Admin(tmp_path, JOBS)
    admin.processor = recording = Recording(admin.view)
    admin.app.state.binding.client = recording
    admin.app = Authenticated(admin.app, principal)  # type: ignore[assignment]
    return admin


@pytest.mark.parametrize(
    ("principal", "named"),
    [(("alice", "admin"), ("alice", "admin")), (("bob", None), ("bob", None)),
     (None, (None, None))],
)  # fmt: skip
def test_a_bulk_cancel_names_its_caller_on_every_event(
    tmp_path: Path, principal: Any, named: tuple[str | None, str | None]
):
    admin = served(tmp_path, principal)
    try:
        answer = admin.bulk(
            "cancel", {"filter": {"queue": "mail"}, "confirm": True},
            # What a caller sends cannot name anyone: neither a header named as the wire's,
            # nor a proxy's header (serve reads none).
            headers={"X-Request-Id": "bulk-1", "actor": '{"principal":"mallory"}',
                     "X-Forwarded-For": "10.6.6.6"},
        )  # fmt: skip
    finally:
        admin.view.close()
    assert answer.status_code == 200, answer.text
    sent = admin.processor.sent
    assert {e["job_id"] for e in sent} == LIVE
    expected = Actor(*named, "127.0.0.1", "bulk-1")  # httpx's ASGI transport's peer
    assert admin.processor.actors == [expected] * len(sent)  # type: ignore[attr-defined]


def test_a_privileged_request_leaves_one_security_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    admin = served(tmp_path, ("alice", "admin"))
    caplog.set_level(logging.INFO, "gateway.security")
    try:
        admin.bulk("cancel", {"filter": {"queue": "mail"}, "confirm": True},
                   headers={"X-Request-Id": "bulk-2"})  # fmt: skip
        admin.call("GET", "/ojs/v1/admin/jobs")  # not privileged: no line
        admin.call("POST", f"/ojs/v1/admin/jobs/{UNKNOWN}/cancel",
                   headers={"X-Request-Id": "one"})  # fmt: skip
    finally:
        admin.view.close()
    lines = [orjson.loads(JsonFormatter().format(r)) for r in caplog.records
             if r.name == "gateway.security"]  # fmt: skip
    assert len(lines) == 2
    bulk, cancel = lines
    assert {k: bulk[k] for k in ("principal", "role", "source", "request_id", "route",
                                 "status", "outcome", "msg")} == {
        "principal": "alice", "role": "admin", "source": "127.0.0.1", "request_id": "bulk-2",
        "route": "POST /ojs/v1/admin/jobs/bulk/{action}", "status": 200, "outcome": "done",
        "msg": "privileged request",
    }  # fmt: skip
    # A job nobody knows: a failed privileged request, its job id unnamed.
    assert (cancel["route"], cancel["status"], cancel["outcome"]) == (
        "POST /ojs/v1/admin/jobs/{job_id}/cancel", 404, "failed",
    )  # fmt: skip
    assert UNKNOWN not in orjson.dumps(cancel).decode()


def test_a_refused_request_leaves_a_warning_line(tmp_path: Path, caplog: pytest.LogCaptureFixture):
    admin = served(tmp_path, None)
    binding = admin.app.app.state.binding  # type: ignore[attr-defined]
    path = tmp_path / "credentials.toml"
    ops = credentials.principal("ops", "admin", None, ["*"])
    credentials.save(path, credentials.with_key((), "ops", keys.new_key(), 0, new=ops))
    binding.watcher = Watcher(path)  # a request without a key is refused
    caplog.set_level(logging.INFO, "gateway.security")
    try:
        answer = admin.call("GET", "/ojs/v1/admin/jobs", headers={"X-Request-Id": "nope"})
    finally:
        admin.view.close()
    assert answer.status_code == 401
    [line] = [r for r in caplog.records if r.name == "gateway.security"]
    assert line.levelno == logging.WARNING and line.msg == "refused request"
    assert (line.request_id, line.outcome, line.principal) == ("nope", "refused", None)  # type: ignore[attr-defined]
