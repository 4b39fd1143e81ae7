"""The processor's queue and cron commands, through Dedup's own per-record path: crons
fire on their partition's records, a cron that can no longer fire is stopped (never a
failed record), a command on the wrong partition goes to its own, the newest queue
command wins in any order."""

from __future__ import annotations

from typing import Any

import orjson

from gateway import wire
from gateway.core.crons import CronCommand, command_record, definition
from gateway.core.queues import queue_command
from gateway.partitioner import partition_for
from gateway.stage.commands import CRON
from gateway.stage.records import Output
from tests.support import without_trail
from tests.unit.test_total import PARTITIONS, T0, Harness

CRON_HEADERS = {wire.KIND_HEADER: wire.CRON_COMMAND}
QUEUE_HEADERS = {wire.KIND_HEADER: wire.QUEUE_COMMAND}
TICK_HEADERS = {wire.KIND_HEADER: wire.TICK}


def register(harness: Harness, expression: str = "* * * * * *") -> tuple[bytes, int]:
    cron = definition({"name": "every", "expression": expression, "overlap_policy": "allow",
                       "job_template": {"type": "a.b", "args": [1]}})  # fmt: skip
    assert isinstance(cron, dict)
    key = wire.cron_key("every")
    partition = partition_for(key, PARTITIONS)
    value = command_record(CronCommand("register", "every", cron))
    outputs = harness.to_requests(value, key, CRON_HEADERS, partition)
    assert [o.role for o in without_trail(outputs)] == ["job_states"]
    return key, partition


def tick(harness: Harness, partition: int, at_ms: int) -> list[Output]:
    harness.offset = at_ms - T0 - 1  # the next record's time
    return harness.to_requests(b"", wire.TICK_KEY, TICK_HEADERS, partition)


def stored(harness: Harness, key: bytes, partition: int) -> dict[str, Any]:
    raw = harness.store(partition).state(key).get_bytes(CRON)
    assert raw is not None
    return dict(orjson.loads(raw))


def test_a_cron_fires_each_slot_once_on_its_partition():
    harness = Harness()
    key, partition = register(harness)
    fired = []
    for at in range(T0 + 1_000, T0 + 5_000, 500):  # ticks twice a second
        for out in tick(harness, partition, at):
            if out.role == "requests":
                fired.append(out)
    slots = [orjson.loads(out.value or b"")["meta"]["cron_slot"] for out in fired]
    assert len(slots) == len(set(slots)) >= 3
    [request_id] = {dict(out.headers or [])[wire.REQUEST_ID_HEADER] for out in fired[:1]}
    assert request_id.startswith(b"cron/every/")
    assert stored(harness, key, partition)["run_count"] == len(slots)


def test_a_cron_the_rules_no_longer_take_is_stopped_and_the_partition_goes_on():
    harness = Harness()
    key, partition = register(harness)
    broken = {**stored(harness, key, partition), "timezone": "Mars/Olympus"}
    harness.store(partition).state(key).set_bytes(CRON, orjson.dumps(broken))
    outputs = without_trail(tick(harness, partition, T0 + 2_000))
    assert [o.role for o in outputs] == ["job_states"]  # no firing, no dead letter
    shown = orjson.loads(outputs[0].value or b"")
    assert shown["enabled"] is False and "Mars/Olympus" in shown["error"]
    assert tick(harness, partition, T0 + 4_000) == []
    deleted = harness.to_requests(command_record(CronCommand("delete", "every")), key,
                                  CRON_HEADERS, partition)  # fmt: skip
    assert [(o.role, o.value) for o in without_trail(deleted)] == [("job_states", None)]


def test_a_cron_command_on_another_partition_goes_to_its_own():
    harness = Harness()
    key = wire.cron_key("every")
    elsewhere = (partition_for(key, PARTITIONS) + 1) % PARTITIONS
    value = command_record(CronCommand("delete", "every"))
    [sent] = harness.to_requests(value, key, CRON_HEADERS, elsewhere)
    assert (sent.role, sent.key, sent.value) == ("requests", key, value)


def test_the_newest_queue_command_wins_whatever_the_order():
    harness = Harness()
    key = wire.queue_key("mail")
    newer = queue_command("mail", True, (T0 + 2, "b"))
    older = queue_command("mail", False, (T0 + 1, "a"))
    for partition, order in ((0, (newer, older)), (1, (older, newer))):
        for command in order:
            harness.to_requests(command, key, QUEUE_HEADERS, partition)
    sources = [harness.source("requests", p, {}) for p in (0, 1)]
    assert [harness.dedup.commands.paused(s, "mail") for s in sources] == [True, True]
