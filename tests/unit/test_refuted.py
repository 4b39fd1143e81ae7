"""What explain and the history route say of a record its trail refutes: found through the
index, never listed as genuine (issue 46)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.audit import history
from gateway.audit.index import AuditIndex
from gateway.audit.verify import Verifier
from gateway.stage.audit_keys import AuditKeys
from tests.unit.test_forgery import KEYS, LAYOUT, Log, decided, head, sealed

Found = dict[tuple[int, int], bytes | None]


def indexed(tmp_path: Path, log: Log) -> AuditIndex:
    """The index of every partition of the log's decisions, read in two batches each."""
    index = AuditIndex(tmp_path / "index")
    for partition, records in sorted(log.decisions.items()):
        half = len(records) // 2
        for part in (records[:half], records[half:]):
            index.add([(partition, r.offset, r.value) for r in part],
                      {partition: part[-1].offset + 1})  # fmt: skip
    return index


def told(index: AuditIndex, log: Log, key: str, keys: AuditKeys | None = None) -> dict:
    """Each of the key's records, by position, with what its trail shows."""

    def read(positions: Any) -> tuple[Found, dict[int, int]]:
        return {p: log.decisions[p[0]][p[1]].value for p in positions}, {}

    page = history.page(index, key, (0, 0), 100, read, Verifier(LAYOUT, keys))
    assert page is not None
    return {item.position: history.as_json(item, "decisions")["trail"] for item in page.items}


def key_of(log: Log, partition: int) -> str:
    return str(log.audit(partition, 0)["unique_key"])


@pytest.mark.parametrize("keyed", [False, True])
def test_the_records_the_processor_wrote_are_consistent(tmp_path: Path, keyed: bool) -> None:
    log = decided(KEYS.sealer()) if keyed else decided()
    index = indexed(tmp_path, log)
    for partition in (0, 1):
        trails = told(index, log, key_of(log, partition), KEYS if keyed else None)
        assert len(trails) >= 2
        assert all(t == {"verdict": "consistent", "refuted": [], "unchecked": []}
                   for t in trails.values())  # fmt: skip
    if keyed:  # without the key, a keyed digest is not checked, and says so
        [unchecked] = {t["verdict"] for t in told(index, log, key_of(log, 0)).values()}
        assert unchecked == "unchecked"
    index.close()


def test_a_record_copied_onto_another_partition_is_refuted(tmp_path: Path) -> None:
    log = decided()
    accepted = log.audit(0, 0)
    # Copied verbatim, its outcome changed, then the processor wrote on (the next record
    # chains past it).
    _, partition, offset = log.append(1, orjson.dumps({**accepted, "outcome": "rejected"}), 2)
    index = indexed(tmp_path, log)
    trail = told(index, log, key_of(log, 0))[(partition, offset)]
    assert trail["verdict"] == "refuted"
    assert set(trail["refuted"]) == {
        "it sits on partition 1, but the audit records of its source (ns.requests[0]@0) are "
        "written to partition 0",
        "its bytes do not match its digest: it is not as the processor sealed it",
        "its prev is not the digest of the record before it (@1): a record between them is "
        "missing, or it was rewritten",
        "the chain passes over it: the record at @3 follows the one at @1, before it, so the "
        "processor never chained onto it (another wrote it onto the head)",
    }
    # The genuine ones stay consistent.
    assert told(index, log, key_of(log, 0))[(0, 0)]["verdict"] == "consistent"
    index.close()


def test_a_record_resealed_onto_the_head_is_refuted_once_the_processor_writes_on(
    tmp_path: Path,
) -> None:
    log = decided()
    second = log.audit(0, 1)
    forged = sealed({**second, "outcome": "rejected"}, str(log.audit(0, 2)["digest"]))
    _, _, offset = log.append(0, forged, at=3)
    index = indexed(tmp_path, log)
    trail = told(index, log, str(second["unique_key"]))[(0, offset)]
    assert trail["refuted"] == [
        "the chain passes over it: the record at @4 follows the one at @2, before it, so the "
        "processor never chained onto it (another wrote it onto the head)"
    ]
    # At the head, the chain cannot tell it: only a replay does (beyond the last input).
    log = decided()
    _, _, offset = log.append(0, sealed({**second, "outcome": "rejected"}, head(log, 0)))
    index.close()
    index = indexed(tmp_path / "2", log)
    assert told(index, log, str(second["unique_key"]))[(0, offset)]["verdict"] == "consistent"
    index.close()


def test_with_the_key_a_record_sealed_without_it_is_refuted(tmp_path: Path) -> None:
    log = decided(KEYS.sealer())
    last = log.audit(0, len(log.decisions[0]) - 1)
    keyed_anyhow = sealed(last, head(log, 0), key=bytes(32))
    _, _, guessed = log.append(0, keyed_anyhow)
    without = {k: v for k, v in last.items() if k != "sealed_by"}
    _, _, unkeyed = log.append(0, sealed(without, str(orjson.loads(keyed_anyhow)["digest"])))
    _, _, unsealed = log.append(0, orjson.dumps({k: v for k, v in without.items()
                                                 if k not in ("digest", "prev")}))  # fmt: skip
    index = indexed(tmp_path, log)
    trails = told(index, log, str(last["unique_key"]), KEYS)
    assert trails[(0, guessed)]["refuted"] == [
        "its bytes do not match its digest: it is not as the processor sealed it"
    ]
    assert trails[(0, unkeyed)]["refuted"][0].startswith(
        "it is sealed without a key, though its partition's records are sealed with one since "
        "offset 0"
    )
    assert trails[(0, unsealed)]["refuted"][0].startswith(
        "it carries no digest, though its partition's records are sealed since offset 0"
    )
    # Without the key file, its digest cannot be checked; the rest still can.
    trails = told(index, log, str(last["unique_key"]))
    assert trails[(0, guessed)]["verdict"] == "unchecked"
    assert trails[(0, unkeyed)]["verdict"] == "refuted"
    index.close()


def test_a_record_the_log_no_longer_holds_has_no_trail(tmp_path: Path) -> None:
    log = decided()
    index = indexed(tmp_path, log)
    page = history.page(index, key_of(log, 0), (0, 0), 1, lambda p: ({q: None for q in p}, {0: 5}))
    assert page is not None and history.as_json(page.items[0], "d")["trail"] is None
    index.close()
