"""What-if (`gateway replay --policy`): only what the unique policy decides is decided again.

Logs here are written by the processor's own stages (tests/unit/test_ids.py's Gateway, an
id's home and idempotency keys over four partitions; the tenant and rate stories), each
partition of `requests` kept as the stage read it, beside the audit records it wrote; and
the recorded differential log (tests/data/differential).
"""

from __future__ import annotations

from collections import deque
from typing import Any

import orjson
import pytest

from gateway import wire
from gateway.audit import FlipReport, LogRecord, replay_under_policy
from gateway.audit.whatif import Decided, paired
from gateway.cli import main
from gateway.cli.common import EXIT_INVALID, CommandError
from gateway.cli.replay import _policy, print_flips
from gateway.core import UniquePolicy, parse_policy
from gateway.core.idempotency import IDEMPOTENCY_KEY_REUSED
from gateway.core.queues import queue_command
from gateway.core.tenant_limits import TENANT_LIMIT_EXCEEDED
from gateway.partitioner import partition_for
from gateway.stage.parsing import Limits
from gateway.stage.records import Output
from tests import differential_log as recorded
from tests.unit.test_differential import DATA, decide_log
from tests.unit.test_ids import JOB_ID, PARTITIONS, Gateway
from tests.unit.test_rate_stories import Story as RateStory
from tests.unit.test_tenant_limits import Story as TenantStory
from tests.unit.test_tenant_limits import unique
from tests.unit.test_trail_replay import _decisions, _inputs

IGNORE_BY_ARGS = {"keys": ["type", "args"], "on_conflict": "ignore"}


def policy(raw: dict[str, Any]) -> UniquePolicy:
    parsed = parse_policy(raw)
    assert isinstance(parsed, UniquePolicy)
    return parsed


class Recording(Gateway):
    """The gateway's stages over a log, read back for a what-if (Gateway.read keeps each
    partition of `requests` as read)."""

    def put(self, partition: int, value: bytes, key: bytes | None, **headers: bytes) -> None:
        """A record written straight onto a partition of `requests`."""
        where = ("requests", partition)
        self.logs.setdefault(where, deque()).append(Output(value, key, headers=[*headers.items()]))

    def audit_trail(self) -> dict[int, list[LogRecord]]:
        out: dict[int, list[LogRecord]] = {}
        for o in self.sent:
            if o.role == "decisions" and o.partition is not None:
                part = out.setdefault(o.partition, [])
                part.append(LogRecord("decisions", o.partition, len(part), 0, o.key, o.value))
        return out

    def partitions(self) -> list[list[Decided]]:
        trail = self.audit_trail()
        return [list(paired(records, trail.get(p, []))) for p, records in sorted(self.read.items())]

    def what_if(self, raw: dict[str, Any]) -> FlipReport:
        return replay_under_policy(self.partitions(), policy(raw), Limits())

    def audits(self) -> list[dict[str, Any]]:
        return [orjson.loads(o.value or b"") for o in self.sent if o.role == "decisions"]


class TenantLog(Recording, TenantStory):
    pass


class RateLog(Recording, RateStory):
    def keyed_claim(self, job_id: str) -> None:
        """A claim as fetch sends it, to its rate key's home, of a job under a unique key."""
        job = self.job(job_id)
        body = {"job_id": job_id, "unique_key": job["unique_key"], "type": "job.started",
                "rate_limit": job["rate_limit"]}  # fmt: skip
        home = wire.rate_home(job["rate_limit"]["key"])
        self.put(partition_for(home, PARTITIONS), orjson.dumps(body), home,
                 **{wire.KIND_HEADER: wire.RATE})  # fmt: skip


def ask(gateway: Gateway, job: dict[str, Any], key: str) -> None:
    gateway.send(job, **{wire.IDEMPOTENCY_KEY_HEADER: key.encode()})


def keyed(arg: int, **unique: Any) -> dict[str, Any]:
    return {"type": "email.send", "args": [arg], "unique": {"keys": ["type", "args"], **unique}}


def request_ids(report: FlipReport) -> list[str]:
    return [f.request_id for f in report.flips]


# -- what no policy decides, and the jobs a flip names ------------------------------------


def test_requests_refused_as_idempotency_key_reused_are_kept_as_recorded() -> None:
    log = Recording()
    ask(log, keyed(3), "reused")
    log.run()
    for arg in (4, 5):  # the same key with other bodies: refused, whatever the policy
        ask(log, keyed(arg), "reused")
        log.run()
    refused = [a for a in log.audits() if (a.get("error") or {}).get("code")
               == IDEMPOTENCY_KEY_REUSED]  # fmt: skip
    assert len(refused) == 2
    report = log.what_if(IGNORE_BY_ARGS)
    assert report.flips == []
    assert report.kept == {f"invalid: {IDEMPOTENCY_KEY_REUSED}": 2}
    assert report.replayed == 1


def test_a_flip_names_the_recorded_job_that_holds_the_key() -> None:
    log = Recording()
    for _ in range(3):
        log.send(keyed(1))
    log.run()
    decided = [a for a in log.audits() if a["kind"] == "request"]
    assert [a["outcome"] for a in decided] == ["accepted", "rejected", "rejected"]
    holder = decided[0]["job_id"]
    report = log.what_if(IGNORE_BY_ARGS)
    assert report.transitions == {("rejected", "ignored"): 2}
    assert {(f.recorded_job_id, f.replayed_job_id) for f in report.flips} == {(holder, holder)}
    # The same policy changes nothing, and names the same jobs.
    same = log.what_if({"keys": ["type", "args"]})
    assert (same.flips, same.other_jobs, same.replayed) == ([], [], 3)


def by_type(arg: int) -> dict[str, Any]:
    return {"type": "email.send", "args": [arg], "unique": {"keys": ["type"]}}


def finish(log: Recording, decision: dict[str, Any]) -> None:
    for kind in ("job.started", "job.completed"):
        log.logs.setdefault(("job_events", 0), deque()).append(Output(orjson.dumps(
            {"job_id": decision["job_id"], "unique_key": decision["unique_key"], "type": kind}
        ), decision["unique_key"].encode()))  # fmt: skip
        log.run()


def test_events_follow_the_job_the_same_request_made_not_the_one_a_rejection_named() -> None:
    """Recorded under keys [type]: the second request meets the first job, which completes
    before the third. Under [type, args] the second is a job of its own, and the first job's
    completion still frees the key the third asks for."""
    log = Recording()
    log.send(by_type(1))
    log.send(by_type(2))
    log.run()
    first, second = (a for a in log.audits() if a["kind"] == "request")
    assert (first["outcome"], second["outcome"]) == ("accepted", "rejected")
    finish(log, first)
    log.send(by_type(1))
    log.run()
    report = log.what_if({"keys": ["type", "args"]})
    assert report.transitions == {("rejected", "accepted"): 1}
    [flip] = report.flips
    assert flip.recorded_job_id == first["job_id"] != flip.replayed_job_id
    assert report.other_jobs == []


def test_the_report_says_what_it_kept_and_names_the_recorded_jobs(capsys) -> None:
    log = Recording()
    log.send(keyed(1))
    log.send(keyed(1))
    ask(log, keyed(3), "reused")
    log.run()
    ask(log, keyed(4), "reused")
    log.run()
    holder = next(a["job_id"] for a in log.audits() if a.get("outcome") == "accepted")
    print_flips(log.what_if(IGNORE_BY_ARGS), 10)
    out = capsys.readouterr().out
    assert out.startswith("replayed 3 requests under the policy: 1 decisions would flip")
    assert "  rejected -> ignored: 1\n" in out and "invalid ->" not in out
    assert "kept as recorded 1 (decided before or beside the unique policy):\n" in out
    assert f"  1: invalid: {IDEMPOTENCY_KEY_REUSED}\n" in out
    assert f": rejected -> ignored (job {holder} -> {holder})" in out


def test_the_policy_is_given_as_json_or_in_a_file(tmp_path) -> None:
    text = '{"keys":["type","args"],"on_conflict":"ignore"}'
    (tmp_path / "p.json").write_text(text)
    assert _policy(text) == _policy(str(tmp_path / "p.json")) == policy(IGNORE_BY_ARGS)
    for bad in ('{"keys": 1}', "{not json", str(tmp_path / "absent.json")):
        with pytest.raises(CommandError) as refused:
            _policy(bad)
        assert refused.value.exit_code == EXIT_INVALID and "--policy" in str(refused.value)


@pytest.mark.parametrize("flag", [["--partition", "0"], ["--processes", "2"]])
def test_what_if_refuses_the_options_it_cannot_take(flag, capsys) -> None:
    assert main(["replay", "--policy", '{"keys": ["type"]}', *flag]) == EXIT_INVALID
    assert f"{flag[0]} is not taken with --policy" in capsys.readouterr().err


# -- a log with every kind of record -------------------------------------------------------


def every_kind() -> Recording:
    log = Recording()
    log.send(keyed(1))
    log.send(keyed(1))  # rejected
    log.send(keyed(2, on_conflict="ignore"))
    log.send(keyed(2, on_conflict="ignore"))  # ignored
    log.send(keyed(3, on_conflict="replace"))
    log.send(keyed(3, on_conflict="replace"))  # replaced
    log.send({"type": "report", "args": [1]})  # no policy: routed by its id
    log.send({**keyed(4), "id": JOB_ID})
    log.send({**keyed(5), "id": JOB_ID})  # its id taken at the id's home
    ask(log, keyed(6), "k")
    ask(log, keyed(6), "k")  # answered again
    ask(log, keyed(7), "k")  # idempotency_key_reused
    log.run()
    log.put(0, b"{not json", b"x")  # invalid
    bad_headers = {wire.ACTOR_HEADER: b"\xff"}
    log.put(0, orjson.dumps(keyed(8)), b"y", **bad_headers)  # refused before it is read
    tick = {wire.KIND_HEADER: wire.TICK}
    pause = {wire.KIND_HEADER: wire.QUEUE_COMMAND}
    for p in range(PARTITIONS):
        log.put(p, b"", wire.TICK_KEY, **tick)
        log.put(p, queue_command("default", True, (1, "a")), b"default", **pause)
    log.run()
    finish(log, next(a for a in log.audits() if a.get("outcome") == "accepted"))
    log.send(keyed(1))  # the key is free again
    log.run()
    return log


def non_policy(audits: list[dict[str, Any]]) -> set[str]:
    """The request ids whose recorded decision no unique policy made: refused invalid, or
    refused because their job id was taken."""
    found = set()
    for a in audits:
        message = (a.get("error") or {}).get("message", "")
        if a.get("kind") == "request" and (a["outcome"] == "invalid" or "already taken" in message):
            found.add(a["request_id"])
    return found


def test_the_log_has_every_kind_of_record() -> None:
    log = every_kind()
    audits = log.audits()
    assert {a["kind"] for a in audits} >= {"request", "forwarded", "event", "command"}
    outcomes = {a.get("outcome") for a in audits if a["kind"] == "request"}
    assert outcomes >= {"accepted", "rejected", "ignored", "replaced", "invalid"}
    codes = {(a.get("error") or {}).get("code") for a in audits}
    assert {IDEMPOTENCY_KEY_REUSED, "invalid_request", "duplicate"} <= codes
    assert any("answered_again" in (a.get("what") or {}) for a in audits)


@pytest.mark.parametrize(
    "raw", [IGNORE_BY_ARGS, {"keys": ["type"]}, {"keys": ["type"], "on_conflict": "replace"},
            {"keys": ["args"], "on_conflict": "replace_except_schedule"}, {"keys": []}],
)  # fmt: skip
def test_what_if_over_every_kind_of_record_flips_only_policy_decisions(raw) -> None:
    log = every_kind()
    report = log.what_if(raw)
    kept = non_policy(log.audits())
    assert set(request_ids(report)).isdisjoint(kept)
    assert sum(report.kept.values()) == len(kept) + 1  # and the retry answered again
    assert report.kept["answered again under its idempotency key"] == 1
    decided = sum(1 for a in log.audits() if a["kind"] == "request")
    assert report.replayed + sum(report.kept.values()) == decided + 1


def test_a_request_over_its_tenant_s_limit_is_kept_as_recorded() -> None:
    story = TenantLog()
    story.limits(max_queue_depth=1)
    for i in (1, 2, 2):
        story.enqueue(unique(i), sdk=True)
    story.run()
    assert len(story.refused()) == 2
    report = story.what_if({"keys": ["type"], "on_conflict": "ignore"})
    assert report.kept == {f"invalid: {TENANT_LIMIT_EXCEEDED}": 2}
    assert report.flips == []


def test_rate_keys_decide_claims_as_recorded() -> None:
    """The claim its rate key's home granted starts its job in the replay too, and the one
    it refused drops its job (on_limit drop), as in the log: both keys are free again."""
    story = RateLog()
    limit = {"key": "k", "rate": 1, "period": "second", "on_limit": "drop"}

    def send(arg: int) -> None:
        story.send({"type": "rl.job", "args": [arg], "queue": "rl", "options": {
            "rate_limit": limit}, "unique": {"keys": ["type", "args"]}})  # fmt: skip
        story.run()

    send(1)
    send(2)
    first, second = (a["job_id"] for a in story.accepted())
    story.keyed_claim(first)
    story.run()
    story.keyed_claim(second)
    story.run()
    assert story.job(first)["state"] == "active" and story.job(second)["state"] == "discarded"
    done = {"job_id": first, "unique_key": story.job(first)["unique_key"], "type": "job.completed"}
    story.logs.setdefault(("job_events", 0), deque()).append(
        Output(orjson.dumps(done), done["unique_key"].encode())
    )
    story.run()
    send(1)
    send(2)
    assert len(story.accepted()) == 4
    assert any(a["kind"] == "rate" for a in story.audits())
    report = story.what_if({"keys": ["type", "args"], "on_conflict": "ignore"})
    assert (report.flips, report.other_jobs, report.replayed) == ([], [], 4)


# -- the recorded differential log -----------------------------------------------------------


@pytest.fixture(scope="module")
def differential() -> tuple[list[list[Decided]], list[dict[str, Any]]]:
    log = recorded.load(DATA)
    outputs = decide_log(log, Limits(**log.limits))
    requests, decisions = _inputs(log, "requests"), _decisions(log, outputs)
    parts = [list(paired(requests[p], decisions.get(p, []))) for p in sorted(requests)]
    audits = [orjson.loads(d.value or b"") for part in decisions.values() for d in part]
    return parts, audits


@pytest.mark.parametrize(
    "raw",
    [IGNORE_BY_ARGS, {"keys": ["type"]}, {"keys": ["type", "queue"], "on_conflict": "replace"}],
)
def test_what_if_over_the_differential_log_changes_no_outcome_the_policy_does_not_decide(
    differential: tuple[list[list[Decided]], list[dict[str, Any]]], raw: dict[str, Any]
) -> None:
    parts, audits = differential
    report = replay_under_policy(parts, policy(raw), Limits(**recorded.load(DATA).limits))
    decided = [a for a in audits if a.get("kind") == "request"]
    fixed = non_policy(decided)
    assert fixed and report.flips
    assert set(request_ids(report)).isdisjoint(fixed)  # 0 non-policy outcomes changed
    assert not [f for f in report.flips if f.recorded == "invalid"]
    assert sum(report.kept.values()) >= len(fixed)
    assert report.replayed + sum(report.kept.values()) == len(decided) + sum(
        1 for a in audits if "answered_again" in (a.get("what") or {})
    )
