"""The routes answered without Starlette's router answer as they would through it."""

from __future__ import annotations

import asyncio
import logging

import httpx
import pytest

from gateway.http.app import HttpSettings, create_app


def call(method: str, path: str) -> httpx.Response:
    # No lifespan: the app has no binding, so an endpoint that reaches for it fails.
    app = create_app(HttpSettings(bootstrap="127.0.0.1:1", namespace="unit"))

    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
            return await client.request(method, path, json={"type": "t", "args": []})

    return asyncio.run(go())


def test_a_direct_route_that_fails_answers_500_internal_error_and_logs_it(
    caplog: pytest.LogCaptureFixture,
):
    with caplog.at_level(logging.ERROR, logger="gateway.http"):
        answer = call("POST", "/ojs/v1/jobs")
    assert answer.status_code == 500
    error = answer.json()["error"]
    assert error["code"] == "internal_error" and error["retryable"] is True
    assert answer.headers["content-type"] == "application/openjobspec+json"
    assert answer.headers["x-request-id"] == error["request_id"]
    assert any(r.exc_info for r in caplog.records), "the traceback is logged"


@pytest.mark.parametrize("path", ["/ojs/v1/jobs", "/ojs/v1/workers/fetch"])
def test_another_method_on_a_direct_path_is_405_naming_the_allowed_one(path: str):
    answer = call("GET", path)
    assert answer.status_code == 405
    assert answer.headers["allow"] == "POST"
    assert answer.json()["error"]["code"] == "method_not_allowed"


def test_a_path_nobody_serves_is_404():
    assert call("POST", "/ojs/v1/nothing").json()["error"]["code"] == "not_found"
