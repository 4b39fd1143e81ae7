"""Schemathesis over the admin routes only, against a real `gateway serve` and processor:
generated requests, valid and invalid, get no server error and only documented answers.

A few examples per operation keep it short (test_http_openapi.py runs every route at
more); the bulk actions get more, since a filter they misread changes every job it names.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import httpx
import orjson
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from gateway.http.app import OPENAPI
from gateway.http.binding import HttpSettings
from tests.integration.harness import Processor, apply_topics
from tests.integration.test_http import Served
from tests.integration.test_http_openapi import operation

pytestmark = pytest.mark.kafka

EXAMPLES = 15
BULK_EXAMPLES = 60  # enough to find the 500 that a non-string filter queue once gave
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]
ADMIN = ("/ojs/v1/admin/", "/ojs/v1/unique-jobs")
DOCUMENT = schemathesis.openapi.from_dict(orjson.loads(OPENAPI.read_bytes()))
OPERATIONS = [
    op for op in map(operation, DOCUMENT.get_all_operations()) if op.path.startswith(ADMIN)
]
CASES = [(op, GenerationMode.POSITIVE) for op in OPERATIONS] + [
    (op, GenerationMode.NEGATIVE) for op in OPERATIONS if op.body or op.query
]


@pytest.fixture(scope="module")
def url(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    namespace = f"t{uuid.uuid4().hex[:10]}"
    apply_topics(kafka_bootstrap, namespace)
    proc = Processor(
        kafka_bootstrap, namespace, tmp_path_factory.mktemp("admin-fuzz"), "1",
        "--commit-interval", "0.02",
    ).start()  # fmt: skip
    served_settings = HttpSettings(kafka_bootstrap, namespace, decision_timeout=30)
    try:
        with Served(served_settings) as served, httpx.Client(base_url=served.url, timeout=60) as c:
            deadline = time.monotonic() + 90
            while c.get("/ojs/v1/health").status_code != 200:
                assert time.monotonic() < deadline, "the binding never became ready"
                time.sleep(0.2)
            # Jobs for the lists and bulk actions to find: live ones and a dead one.
            jobs = [{"type": "fuzz.job", "args": [n], "queue": "fuzz", "max_attempts": 1}
                    for n in range(3)]  # fmt: skip
            assert c.post("/ojs/v1/jobs/batch", json={"jobs": jobs}).status_code == 201
            [taken] = c.post("/ojs/v1/workers/fetch", json={"queues": ["fuzz"]}).json()["jobs"]
            failure = {"job_id": taken["id"], "error": {"code": "boom", "message": "x"}}
            assert c.post("/ojs/v1/workers/nack", json=failure).json()["state"] == "discarded"
            yield served.url
    finally:
        proc.stop()


def test_the_admin_routes_are_all_fuzzed():
    paths = {op.path for op in OPERATIONS}
    assert "/ojs/v1/admin/jobs/bulk/{action}" in paths and "/ojs/v1/admin/jobs" in paths
    assert len(paths) >= 17


@pytest.mark.parametrize(
    ("operation", "mode"), CASES, ids=lambda x: x.label if hasattr(x, "label") else x.value
)
def test_fuzzed_admin_requests_get_no_server_error(
    operation: schemathesis.schemas.APIOperation, mode: GenerationMode, url: str
):
    sent = []
    examples = BULK_EXAMPLES if operation.path.endswith("/bulk/{action}") else EXAMPLES

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck))
    def each(case: schemathesis.Case) -> None:
        sent.append(case)
        case.call_and_validate(base_url=url, checks=CHECKS, timeout=30)

    each()
    assert sent
