"""The HTTP binding's pure parts: decision -> answer, SDK error -> error, the read model."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.core import GatewayError
from gateway.http.answers import Answer, batch_item, for_client_error, for_result
from gateway.http.errors import ApiError
from gateway.http.read_model import ReadModel
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


def test_sdk_errors_map_to_400_504_and_503():
    invalid = for_client_error(InvalidJob(GatewayError("invalid_request", "type is required")))
    assert invalid == ApiError(400, "invalid_request", "type is required")
    timeout = for_client_error(EnqueueTimeout(1, 1, "replies", [None]))
    assert (timeout.status, timeout.code, timeout.retryable) == (504, "timeout", True)
    down = for_client_error(ClientError("kafka", "Kafka at x: down"))
    assert (down.status, down.code, down.retryable) == (503, "unavailable", True)


def test_a_batch_item_carries_its_status_and_its_body_or_envelope():
    assert batch_item(Answer(200, {"job": {}, "deduplicated": True}), "r") == {
        "status": 200, "job": {}, "deduplicated": True,
    }  # fmt: skip
    item = batch_item(ApiError(400, "invalid_request", "no"), "r.2")
    assert item["status"] == 400 and item["error"]["request_id"] == "r.2"


def test_the_read_model_follows_decisions_cancellations_and_events():
    model = ReadModel()
    model.apply_record("decisions", {"outcome": "accepted", "job": a_job()}, 1000)
    assert model.get(JOB_ID.upper()) == a_job()
    event = {"job_id": JOB_ID, "unique_key": KEY, "type": "job.started"}
    model.apply_record("job_events", event, 2000)
    assert model.get(JOB_ID)["state"] == "active"  # type: ignore[index]
    # A later copy of the job (the jobs topic) never moves it back.
    model.apply_record("jobs", a_job(), 3000)
    assert model.get(JOB_ID)["state"] == "active"  # type: ignore[index]
    model.apply_record("cancellations", {"job_id": JOB_ID, "reason": "replaced"}, 4000)
    assert model.get(JOB_ID)["state"] == "cancelled"  # type: ignore[index]
    # No event brings a terminal job back (the core's rule).
    model.apply_record("job_events", {**event, "type": "job.enqueued"}, 5000)
    assert model.get(JOB_ID)["state"] == "cancelled"  # type: ignore[index]


def test_invalid_events_and_unknown_jobs_change_nothing():
    model = ReadModel()
    model.add(a_job())
    assert model.apply_event({"job_id": JOB_ID, "type": "job.bogus"}, 1) is None
    assert model.apply_event({"job_id": "other", "unique_key": KEY, "state": "active"}, 1) is None
    assert model.get(JOB_ID) == a_job()
    assert model.get("other") is None


def test_a_replaced_decision_cancels_the_job_it_replaced():
    model = ReadModel()
    model.add(a_job())
    new_id = "01900000-0000-7000-8000-000000000002"
    decision = {"outcome": "replaced", "job": a_job(job_id=new_id), "cancelled_job_id": JOB_ID}
    model.apply_record("decisions", decision, 1000)
    assert model.get(JOB_ID)["state"] == "cancelled"  # type: ignore[index]
    assert model.get(new_id)["state"] == "available"  # type: ignore[index]
