"""Forged audit records are reported (issue 46): a record appended to `decisions` that its
input does not justify, whether copied onto another partition, chained onto a partition's
head with its digest made again, past the last input, or with its outcome changed, with
and without a key sealing the chain."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from hashlib import blake2b
from itertools import count
from pathlib import Path
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.audit.account import Span, Trail, strays
from gateway.audit.findings import KEY_NOT_HELD, ReplayReport
from gateway.audit.log import LogRecord
from gateway.audit.replay import PartitionReplay
from gateway.audit.trail_store import TrailStore
from gateway.audit.verify import Layout
from gateway.core import Request, parse_request
from gateway.partitioner import partition_for
from gateway.processor.metrics import Metrics
from gateway.stage.audit_keys import AuditKeys
from gateway.stage.dedup import Dedup
from gateway.stage.parsing import Limits
from gateway.stage.records import Output
from gateway.stage.trail import UNKEYED, Sealer
from gateway.wire import JOB_EVENT, KIND_HEADER
from tests.memory_store import Store

REQ, INTAKE = "ns.requests", "ns.intake"
PARTITIONS = 2
LAYOUT = Layout(REQ, INTAKE, PARTITIONS)
T0 = 1_760_000_000_000
SECRET = bytes(range(32))
KEYS = AuditKeys({"k1": SECRET}, "k1")


def job(n: int) -> dict[str, Any]:
    return {"type": "email.send", "args": {"user_id": n}, "unique": {"keys": ["type", "args"]}}


def route(n: int) -> str:
    request = parse_request(job(n))
    assert isinstance(request, Request) and request.unique_key
    return request.unique_key


def homed(partition: int, wanted: int) -> list[int]:
    """Jobs whose unique key is decided on `partition`."""
    found = (n for n in count() if partition_for(route(n).encode(), PARTITIONS) == partition)
    return [next(found) for _ in range(wanted)]


@dataclass
class Log:
    requests: dict[int, list[LogRecord]]
    decisions: dict[int, list[LogRecord]]

    def audit(self, partition: int, index: int) -> dict[str, Any]:
        return orjson.loads(self.decisions[partition][index].value or b"")

    def append(self, partition: int, value: bytes, at: int | None = None) -> tuple[str, int, int]:
        """A record written onto decisions `partition` (before its record `at`, as if
        appended then, the later ones written after it): its position."""
        records = self.decisions[partition]
        at = len(records) if at is None else at
        values = [r.value for r in records]
        values.insert(at, value)
        self.decisions[partition] = [
            LogRecord("decisions", partition, n, 0, None, v) for n, v in enumerate(values)
        ]
        return ("decisions", partition, at)


def decided(sealer: Sealer = UNKEYED) -> Log:
    """Each partition's requests (three jobs asked twice, the first started and completed
    between) and the audit records the processor's own code writes for them."""
    log = Log({}, {})
    for partition in range(PARTITIONS):
        log.requests[partition], trail = _decided(partition, sealer)
        log.decisions[partition] = [LogRecord("decisions", partition, n, 0, None, v)
                                    for n, v in enumerate(trail)]  # fmt: skip
    return log


def _decided(partition: int, sealer: Sealer) -> tuple[list[LogRecord], list[bytes | None]]:
    store, out = Store(), list[Output]()
    dedup = Dedup(PARTITIONS, lambda o, _: out.append(o), Metrics(), Limits(),
                  lambda _, key: store.state(key), sealer=sealer)  # fmt: skip

    def run(records: list[LogRecord]) -> None:
        for record in records:
            store.at(record.timestamp_ms)
            dedup.on_record(record.value, record.key, record.source, store.state(record.key or b""))

    records = [LogRecord(REQ, partition, i, T0 + i, route(n).encode(), orjson.dumps(job(n)))
               for i, n in enumerate(homed(partition, 3))]  # fmt: skip
    run(records)
    first = next(orjson.loads(o.value or b"") for o in out if o.role == "decisions")
    ids = {"job_id": first["job_id"], "unique_key": first["unique_key"]}
    for kind in ("job.started", "job.completed"):
        records.append(LogRecord(REQ, partition, len(records), T0 + len(records),
                                 first["unique_key"].encode(), orjson.dumps({**ids, "type": kind}),
                                 {KIND_HEADER: JOB_EVENT}))  # fmt: skip
    records += [replace(r, offset=len(records) + i, timestamp_ms=T0 + 10 + i)
                for i, r in enumerate(records[:3])]  # fmt: skip
    run(records[3:])
    return records, [o.value for o in out if o.role == "decisions"]


def replayed(log: Log, keys: AuditKeys | None = None, only: set[int] | None = None) -> ReplayReport:
    """`gateway replay` over the log in memory (`only`: --partition, the rest read for
    strays)."""
    report = ReplayReport()
    for partition in range(PARTITIONS):
        decisions = log.decisions[partition]
        if only is not None and partition not in only:
            strays(decisions, partition, LAYOUT, frozenset(only), report, 1_000)
            continue
        records = log.requests[partition]
        with _store() as store:
            PartitionReplay(PARTITIONS, Limits(), store, report).run(
                records, Trail(partition, LAYOUT, report, keys=keys), decisions,
                Span(0, len(records)),
            )  # fmt: skip
    return report


@contextmanager
def _store() -> Iterator[TrailStore]:
    with tempfile.TemporaryDirectory() as root:
        store = TrailStore(Path(root) / "state")
        try:
            yield store
        finally:
            store.close()


def sealed(value: dict[str, Any], prev: str | None, key: bytes = b"") -> bytes:
    """The record with `prev`, and a digest made again (keyed with `key`): what anyone who
    can write to the topic can make without the processor's key."""
    body = orjson.dumps({**{k: v for k, v in value.items() if k != "digest"}, "prev": prev})
    made = blake2b(body, digest_size=16, key=key) if key else blake2b(body, digest_size=16)
    return body[:-1] + b',"digest":"' + made.hexdigest().encode() + b'"}'


def head(log: Log, partition: int) -> str:
    return str(log.audit(partition, len(log.decisions[partition]) - 1)["digest"])


def named(report: ReplayReport) -> set[tuple[str, tuple[str, int, int]]]:
    return {(f.kind, f.position) for f in report.findings}


LOG = decided()
KEYED = decided(KEYS.sealer())


def test_the_logs_replay_identically_every_record_accounted_for() -> None:
    for log, keys in ((LOG, None), (KEYED, KEYS)):
        report = replayed(log, keys)
        assert (report.findings, report.differences, report.unverifiable) == ([], [], {})
        assert report.verified == sum(len(d) for d in log.decisions.values()) == 16
    # Without the key, what each keyed record says is verified, its digest counted unchecked.
    report = replayed(KEYED)
    assert (report.findings, report.differences) == ([], [])
    assert report.verified == 16 and report.unverifiable == {KEY_NOT_HELD: 16}


def _copied_to_the_other_partition(log: Log) -> tuple[str, int, int]:
    """(a): partition 0's first accepted decision, its outcome changed, onto partition 1."""
    accepted = log.audit(0, 0)
    assert accepted["outcome"] == "accepted"
    forged = orjson.dumps({**accepted, "outcome": "rejected"})
    return log.append(1, forged, at=2)


def test_a_decision_copied_onto_another_partition_is_misplaced_whatever_is_replayed() -> None:
    log = decided()
    forged = _copied_to_the_other_partition(log)
    for only in (None, {0}, {1}):
        report = replayed(log, only=only)
        assert named(report) == {("misplaced", forged)}, only
        [finding] = report.findings
        assert finding.detail.startswith(
            "it sits on partition 1, but the audit records of its source (ns.requests[0]@0) are "
            "written to partition 0"
        )


def test_a_record_chained_onto_the_head_past_the_last_input_is_reported() -> None:
    """(b)"""
    log = decided()
    last = log.audit(0, len(log.decisions[0]) - 1)
    forged = {**last, "source": {**last["source"], "offset": len(log.requests[0]) + 5}}
    at = log.append(0, sealed(forged, head(log, 0)))
    report = replayed(log)
    assert named(report) == {("beyond the last input", at)}
    assert "is past the end of its partition (@8)" in report.findings[0].detail
    # One naming an offset between the records read names no record either.
    log = decided()
    gap = {**last, "source": {**last["source"], "offset": 2}}
    log.requests[0] = [r for r in log.requests[0] if r.offset != 2]  # a transaction marker's
    log.decisions[0] = [d for d in log.decisions[0] if b'"offset":2,' not in (d.value or b"")]
    log.decisions[0] = [replace(d, offset=n) for n, d in enumerate(log.decisions[0])]
    prev = orjson.loads(log.decisions[0][1].value or b"")["digest"]
    at = log.append(0, sealed(gap, prev), at=2)
    report = replayed(log)
    assert ("without input", at) in named(report)


def test_an_outcome_changed_and_resealed_in_the_chain_is_reported() -> None:
    log = decided()
    second = log.audit(0, 1)
    forged = sealed({**second, "outcome": "rejected"}, second["prev"])
    at = log.append(0, forged, at=2)  # beside the genuine one, chained like it
    report = replayed(log)
    assert ("reordered", at) in named(report) or ("off-chain", at) in named(report)


def test_with_a_key_a_record_resealed_by_another_is_altered_or_unkeyed() -> None:
    log = decided(KEYS.sealer())
    last = log.audit(0, len(log.decisions[0]) - 1)
    guessed = sealed({**last, "outcome": "rejected"}, head(log, 0), key=bytes(32))
    at = log.append(0, guessed)
    assert ("altered", at) in named(replayed(log, KEYS))
    log = decided(KEYS.sealer())
    unkeyed = {k: v for k, v in last.items() if k != "sealed_by"}
    at = log.append(0, sealed(unkeyed, head(log, 0)))
    assert ("unkeyed", at) in named(replayed(log, KEYS))


@st.composite
def forgeries(draw: st.DrawFn) -> tuple[bool, int, int, str, int, int | None]:
    keyed = draw(st.booleans())
    log = KEYED if keyed else LOG
    partition = draw(st.integers(0, PARTITIONS - 1))
    index = draw(st.integers(0, len(log.decisions[partition]) - 1))
    target = draw(st.integers(0, PARTITIONS - 1))
    how = draw(st.sampled_from(["copied", "outcome", "resealed", "past the end", "any offset"]))
    offset = draw(st.integers(0, 12)) if how == "any offset" else None
    return keyed, partition, index, how, target, offset


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(forgeries(), st.data())
def test_any_record_its_input_does_not_justify_is_reported(
    forgery: tuple[bool, int, int, str, int, int | None], data: st.DataObject
) -> None:
    keyed, partition, index, how, target, offset = forgery
    log = decided(KEYS.sealer()) if keyed else decided()
    record = log.audit(partition, index)
    if how == "outcome":
        record = {
            **record,
            "outcome": "ignored" if record.get("outcome") != "ignored" else "rejected",
        }
    if how == "past the end":
        record = {
            **record,
            "source": {**record["source"], "offset": 8 + data.draw(st.integers(0, 3))},
        }
    if how == "any offset":
        record = {**record, "source": {**record["source"], "offset": offset}}
    # Appended after the record it copies (the topic is append-only), before or after
    # records the processor wrote since.
    at = data.draw(st.integers(index + 1 if target == partition else 0, len(log.decisions[target])))
    if how == "copied":
        value = log.decisions[partition][index].value or b""
    else:
        # Chained onto the records before it, its digest made again (without the key).
        before = [orjson.loads(d.value or b"") for d in log.decisions[target][:at]]
        value = sealed(record, before[-1]["digest"] if before else None)
    position = log.append(target, value, at)
    report = replayed(log, KEYS if keyed else None)
    source = tuple(record["source"].values())
    assert position in {f.position for f in report.findings} or source in {
        d.source for d in report.differences
    }, (report.findings, report.differences)
