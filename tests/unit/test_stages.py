"""The loop's stages over real RocksDB stores stay total: any run of arbitrary records on any
input, committed as the loop commits, leaves a valid request afterwards decided, and a store
restored from the changelog those commits wrote holds what the original holds."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.catalogue import Catalogue, TopicSpec
from gateway.processor.metrics import Metrics
from gateway.processor.stages import INPUTS, Stages, Stores
from gateway.stage.parsing import Limits
from gateway.stage.records import Output, Source
from tests.support import Consumed, MemoryTransaction, changelogged, commit_stores
from tests.unit.test_total import JOB, PARTITIONS, T0, headers, keys, routed, values

CATALOGUE = Catalogue(tuple(TopicSpec(role, f"t.{role}", PARTITIONS, 1) for role in INPUTS))


records = st.lists(
    st.tuples(
        st.sampled_from(INPUTS), st.integers(0, PARTITIONS - 1), values, keys, headers,
        st.booleans(),  # commit after this record
    ),
    max_size=12,
)  # fmt: skip


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=records)
def test_any_records_then_a_valid_request_is_decided_and_a_restore_holds_the_same(script):
    root = Path(tempfile.mkdtemp(prefix="stages-"))
    outputs: list[Output] = []

    def emit(output: Output, _source: Source) -> None:
        outputs.append(output)

    stores = Stores(root / "a")
    stages = Stages(CATALOGUE, emit, Metrics(), Limits(), stores)
    changelogs = MemoryTransaction()

    def commit() -> None:
        commit_stores(stores.open, changelogs)

    try:
        offset = 0
        for role, partition, value, key, hs, then_commit in script:
            offset += 1
            record = Consumed(
                f"t.{role}", partition, offset, T0 + offset, key, value, list(hs.items()) or None
            )
            stages.handle([record])
            if then_commit:
                commit()
        key, partition = routed(JOB)
        before = len(outputs)
        valid = Consumed(
            "t.requests", partition, offset + 1, T0 + offset + 1, key, orjson.dumps(JOB)
        )
        stages.handle([valid])
        decisions = [o for o in outputs[before:] if o.role == "decisions"]
        assert len(decisions) == 1
        assert orjson.loads(decisions[0].value or b"")["outcome"] in ("accepted", "rejected")
        assert not any(o.role == "dead_letters" for o in outputs)
        commit()
        restored = Stores(root / "b")
        for (role, p), changelog in changelogs.logs.items():
            restored.get(role, p).restore(changelogged(changelog))
        for where, store in stores.open.items():
            assert sorted(restored.get(*where).live()) == sorted(store.live())
        restored.close(list(restored.open))
    finally:
        stores.close(list(stores.open))
        shutil.rmtree(root, ignore_errors=True)
