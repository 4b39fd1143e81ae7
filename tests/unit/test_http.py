"""The HTTP binding's pure parts: decision -> answer, SDK error -> error, the read model."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.core import GatewayError
from gateway.http.answers import Answer, batch_item, for_client_error, for_result
from gateway.http.errors import ApiError
from gateway.sdk import ClientError, EnqueueResult, EnqueueTimeout, InvalidJob

KEY = "a" * 64
JOB_ID = "01900000-0000-7000-8000-000000000001"


def result(outcome: str, **fields: Any) -> EnqueueResult:
    return EnqueueResult.from_record(
        {"outcome": outcome, "request_id": "r1", "unique_key": KEY, **fields}
    )


def a_job(state: str = "available", job_id: str = JOB_ID) -> dict[str, Any]:
    return {
        "id": job_id, "type": "t", "queue": "default", "state": state,
        "attempt": 0, "max_attempts": 3, "unique_key": KEY,
    }  # fmt: skip


@pytest.mark.parametrize("outcome", ["accepted", "replaced"])
def test_a_new_job_is_201_with_its_location(outcome: str):
    answer = for_result(result(outcome, job_id=JOB_ID, job=a_job()))
    assert answer == Answer(201, {"job": a_job()}, {"Location": f"/ojs/v1/jobs/{JOB_ID}"})


def test_ignored_is_200_deduplicated_with_the_existing_job():
    answer = for_result(result("ignored", job_id=JOB_ID, job=a_job("active")))
    assert answer == Answer(200, {"job": a_job("active"), "deduplicated": True})


def test_rejected_is_409_duplicate_with_the_details():
    error = {"code": "duplicate", "message": "A job matching the uniqueness key already exists"}
    answer = for_result(
        result(
            "rejected", job_id=JOB_ID, existing_job_id=JOB_ID, existing_job_state="retryable",
            error=error,
        )
    )  # fmt: skip
    assert isinstance(answer, ApiError) and answer.status == 409
    assert answer.envelope("r9") == {
        "error": {
            "code": "duplicate",
            "message": error["message"],
            "retryable": False,
            "details": {
                "existing_job_id": JOB_ID,
                "existing_job_state": "retryable",
                "unique_key": KEY,
            },
            "request_id": "r9",
        }
    }


@pytest.mark.parametrize(
    ("code", "status"),
    [("invalid_request", 400), ("invalid_payload", 400), ("payload_too_large", 413)],
)
def test_decided_invalid_keeps_the_processors_code(code: str, status: int):
    answer = for_result(result("invalid", error={"code": code, "message": "why"}))
    assert answer == ApiError(status, code, "why")


def test_a_record_the_processor_failed_on_is_a_500_internal_error():
    answer = for_result(result("invalid", error={"code": "internal", "message": "kept"}))
    assert answer == ApiError(500, "internal_error", "kept")


def test_sdk_errors_map_to_400_504_and_503():
    invalid = for_client_error(InvalidJob(GatewayError("invalid_request", "type is required")))
    assert invalid == ApiError(400, "invalid_request", "type is required")
    large = for_client_error(InvalidJob(GatewayError("payload_too_large", "the limit is 1")))
    assert large.status == 413 and large.code == "payload_too_large"
    timeout = for_client_error(EnqueueTimeout(1, 1, "replies", [None]))
    assert (timeout.status, timeout.code, timeout.retryable) == (504, "timeout", True)
    down = for_client_error(ClientError("kafka", "Kafka at x: down"))
    assert (down.status, down.code, down.retryable) == (503, "unavailable", True)


def test_a_batch_item_is_the_job_with_its_dedup_outcome():
    new = batch_item(result("accepted", job={"id": "n", "route": "n", "partition": 3}), "r.0")
    assert new == {"id": "n", "deduplicated": False}
    ignored = batch_item(result("ignored", job={"id": "e"}), "r.1")
    assert ignored == {"id": "e", "deduplicated": True}
    timed_out = batch_item(None, "r.2")
    assert timed_out["error"]["code"] == "timeout"
