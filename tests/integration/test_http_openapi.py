"""The binding's OpenAPI document, held to the app: every route served is described, and
schemathesis finds no server error and no answer the document does not allow.

Also the edges a fuzzer does not reach: a caller gone mid-body.
"""

from __future__ import annotations

import logging
import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import orjson
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.errors import InvalidSchema
from schemathesis.core.result import Ok, Result
from schemathesis.schemas import APIOperation
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from starlette.routing import Route

from gateway.http.app import OPENAPI
from gateway.http.binding import HttpSettings
from tests.integration.harness import Processor, apply_topics
from tests.integration.test_http import Served

pytestmark = pytest.mark.kafka

EXAMPLES = 25
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


@dataclass
class Live:
    url: str
    served: Served


@pytest.fixture(scope="module")
def live(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    namespace = f"t{uuid.uuid4().hex[:10]}"
    apply_topics(kafka_bootstrap, namespace)
    proc = Processor(
        kafka_bootstrap, namespace, tmp_path_factory.mktemp("openapi"), "1",
        "--commit-interval", "0.02",
    ).start()  # fmt: skip
    # A short decision timeout: a fuzzed job the processor is slow on answers 504, documented.
    settings_ = HttpSettings(kafka_bootstrap, namespace, decision_timeout=10, max_body_bytes=4096)
    try:
        with Served(settings_) as served:
            # Ready first (the processor's group owns the partitions), as a client would wait:
            # the warm-up's short decision timeout must not cover the group's first join.
            deadline = time.monotonic() + 90
            while httpx.get(f"{served.url}/ojs/v1/health").status_code != 200:
                assert time.monotonic() < deadline, "the binding never became ready"
                time.sleep(0.2)
            warm = httpx.post(
                f"{served.url}/ojs/v1/jobs", json={"type": "warm.up", "args": []}, timeout=60
            )
            assert warm.status_code == 201, warm.text
            yield Live(served.url, served)
    finally:
        proc.stop()


def test_the_document_is_served_and_describes_every_route_the_app_serves(live: Live):
    answer = httpx.get(f"{live.url}/openapi.json")
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "application/json"
    doc = answer.json()
    assert doc == orjson.loads(OPENAPI.read_bytes())
    served = {
        (route.path, method.lower())
        for route in live.served.app.routes
        if isinstance(route, Route)
        for method in route.methods or ()
        if method != "HEAD"
    }
    described = {
        (path, method)
        for path, item in doc["paths"].items()
        for method in item
        if method != "parameters"
    }
    assert described == served


DOCUMENT = schemathesis.openapi.from_dict(orjson.loads(OPENAPI.read_bytes()))


def operation(result: Result[APIOperation, InvalidSchema]) -> APIOperation:
    """An operation of the document (one it could not read fails the module)."""
    assert isinstance(result, Ok), result
    return result.ok()


OPERATIONS = [operation(result) for result in DOCUMENT.get_all_operations()]
# Negative cases (what the document forbids) exist where a request has a body or query
# parameters with rules; the rest have nothing to break.
CASES = [(op, GenerationMode.POSITIVE) for op in OPERATIONS] + [
    (op, GenerationMode.NEGATIVE) for op in OPERATIONS if op.body or op.query
]


@pytest.mark.parametrize(
    ("operation", "mode"), CASES, ids=lambda x: x.label if hasattr(x, "label") else x.value
)
def test_fuzzed_requests_get_no_server_error_and_only_documented_answers(
    operation: APIOperation, mode: GenerationMode, live: Live
):
    sent = []

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
    def each(case: schemathesis.Case) -> None:
        sent.append(case)
        case.call_and_validate(base_url=live.url, checks=CHECKS, timeout=30)

    each()
    print(f"{operation.label} {mode.value}: {len(sent)} requests")
    assert sent


def test_a_client_gone_mid_body_is_no_error(live: Live, monkeypatch: pytest.MonkeyPatch):
    host, port = live.url.removeprefix("http://").split(":")
    caught = _Records()
    monkeypatch.setattr(logging.getLogger("gateway.http"), "level", logging.INFO)
    watched = [logging.getLogger(name) for name in ("", "uvicorn", "uvicorn.error", "gateway")]
    for logger in watched:
        logger.addHandler(caught)
    try:
        with socket.create_connection((host, int(port))) as conn:
            conn.sendall(
                b"POST /ojs/v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: 1000\r\n\r\n" + b'{"type": "'
            )  # and gone: whether the handler has begun reading or not, it reads a disconnect
        deadline = time.monotonic() + 30
        while not any("disconnected" in r.getMessage() for r in caught.records):
            assert time.monotonic() < deadline, [r.getMessage() for r in caught.records]
            time.sleep(0.05)
        # The server still answers, and nothing was logged above INFO.
        assert httpx.get(f"{live.url}/ojs/v1/health/live").status_code == 200
    finally:
        for logger in watched:
            logger.removeHandler(caught)
    loud = [r for r in caught.records if r.levelno >= logging.WARNING]
    assert not loud, [(r.levelname, r.getMessage(), r.exc_info) for r in loud]


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_a_method_a_route_lacks_answers_405_naming_the_ones_it_has(live: Live):
    answer = httpx.patch(f"{live.url}/ojs/v1/jobs")
    assert answer.status_code == 405
    assert answer.json()["error"]["code"] == "method_not_allowed"
    assert answer.headers["allow"] == "POST"
