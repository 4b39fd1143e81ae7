"""One key explained from a log a real processor wrote: by `gateway explain` through its
index, and by the history route of a serve process through its own."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from tests.integration.cli import gateway
from tests.integration.test_http import running

pytestmark = pytest.mark.kafka


def test_one_key_is_explained_by_the_cli_and_by_http_alike(kafka_bootstrap: str, tmp_path: Path):
    queue = f"q{uuid.uuid4().hex[:10]}"
    body = {"type": "traced.job", "queue": queue, "args": {"n": uuid.uuid4().hex},
            "unique": {"keys": ["type", "args"], "on_conflict": "reject"}}  # fmt: skip
    with running(kafka_bootstrap, tmp_path) as (namespace, _, _, _, http):
        first = http.post("/ojs/v1/jobs", json=body).json()["job"]
        assert http.post("/ojs/v1/jobs", json=body).status_code == 409
        fetched = http.post("/ojs/v1/workers/fetch", json={"queues": [queue], "count": 1})
        assert [j["id"] for j in fetched.json()["jobs"]] == [first["id"]], fetched.text
        done = http.post("/ojs/v1/workers/ack", json={"job_id": first["id"]})
        assert done.status_code == 200, done.text
        again = http.post("/ojs/v1/jobs", json=body)
        assert again.status_code == 201, again.text  # completed released the key
        for _ in range(20):  # other keys: the log holds more than this one's records
            other = {**body, "args": {"n": uuid.uuid4().hex}}
            assert http.post("/ojs/v1/jobs", json=other).status_code == 201

        answer = http.get(f"/ojs/v1/admin/unique-jobs/{first['id']}/history")
        assert answer.status_code == 200, answer.text
        told = answer.json()
        key = told["unique_key"]
        assert key == first["unique_key"] and told["index"] == {"complete": True, "behind": 0}
        items = told["items"]
        requests = [i for i in items if i["kind"] == "request"]
        assert [i["outcome"] for i in requests] == ["accepted", "rejected", "accepted"]
        assert requests[1]["reason"].startswith(f"rejected: job {first['id']} is `available`")
        reasons = "\n".join(i["reason"] for i in items)
        assert f"job {first['id']}: available → active" in reasons
        assert f"job {first['id']}: active → completed" in reasons
        assert f"job {first['id']} is `completed`, not one of the states" in reasons
        assert all(i["record"]["state"]["routes"] for i in items)
        offsets = [i["position"]["offset"] for i in items]
        assert offsets == sorted(offsets) and len({i["position"]["partition"] for i in items}) == 1

        paged: list[dict[str, Any]] = []
        cursor = None
        while True:
            params = {"limit": "2", **({"cursor": cursor} if cursor else {})}
            page = http.get(f"/ojs/v1/admin/unique-jobs/{key}/history", params=params).json()
            paged += page["items"]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert paged == items
        missing = http.get(f"/ojs/v1/admin/unique-jobs/{uuid.uuid4()}/history")
        assert missing.status_code == 404
        # The CLI asks this serve's index: nothing of the topic is read here.
        url = str(http.base_url).rstrip("/")
        asked = gateway("explain", first["id"], "--url", url, "--namespace", namespace,
                        "--bootstrap", kafka_bootstrap)  # fmt: skip
        assert asked.returncode == 0, asked.stdout + asked.stderr
        assert f"asking the audit index of the gateway at {url}" in asked.stderr
        assert "indexing" not in asked.stderr
        unknown = gateway("explain", str(uuid.uuid4()), "--url", url, "--namespace", namespace)
        assert unknown.returncode == 1 and "no audit record mentions" in unknown.stderr

    where = [
        "--bootstrap",
        kafka_bootstrap,
        "--namespace",
        namespace,
        "--index",
        str(tmp_path / "i"),
    ]
    by_job = gateway("explain", first["id"], *where)
    assert by_job.returncode == 0, by_job.stdout + by_job.stderr
    assert by_job.stdout == asked.stdout  # read here or asked, told alike
    # A gateway named and not answering is an error, never a silent read of the log.
    down = gateway("explain", key, "--url", url, "--namespace", namespace)
    assert down.returncode == 3 and "no answer from" in down.stderr, down.stderr
    lines = by_job.stdout.splitlines()
    assert lines[0] == f"unique_key {key}: {len(items)} audit records"
    heads = [line for line in lines[1:] if not line.startswith(" ")]
    assert len(heads) == len(items)
    for head, item in zip(heads, items, strict=True):
        place = "{topic}[{partition}]@{offset}".format(**item["position"])
        assert head.startswith(f"{item['at']}  ") and f"({place} from " in head
    text = by_job.stdout
    for item in items:
        assert all(f"    {line}" in text for line in item["reason"].splitlines())
    # A second run reads only what is new (nothing here), and says the same.
    by_key = gateway("explain", key, *where)
    assert by_key.stdout == by_job.stdout
    missing_cli = gateway("explain", str(uuid.uuid4()), *where)
    assert missing_cli.returncode == 1
    assert missing_cli.stderr.startswith("gateway: no audit record mentions")

    # The topic's retention deletes the key's first records: they are said to be gone.
    first_kept = items[2]["position"]
    cut = TopicPartition(first_kept["topic"], first_kept["partition"], first_kept["offset"])
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for future in admin.delete_records([cut]).values():
        future.result()
    after = gateway("explain", key, *where)
    assert after.returncode == 0, after.stdout + after.stderr
    gone = [line for line in after.stdout.splitlines() if "is gone" in line]
    assert len(gone) == 2 and all(
        f"the partition now starts at offset {cut.offset})" in line for line in gone
    )
    assert after.stdout.splitlines()[-1] == by_key.stdout.splitlines()[-1]
