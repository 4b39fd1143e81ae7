"""The state directory's record of where its state came from, and what purge deletes."""

from __future__ import annotations

from gateway.processor.state_identity import Identity, purge, reconcile, recorded

A = Identity("cluster-a", {"changelog__g--x--y--default": "topic-1"})


def _with_state(state_dir, identity):
    reconcile(state_dir, identity)
    (state_dir / "g" / "default").mkdir(parents=True)
    (state_dir / "g" / "default" / "CURRENT").write_text("rocksdb")


def test_matching_state_is_kept_and_a_new_directory_records_its_identity(tmp_path):
    state = tmp_path / "state"
    assert reconcile(state, A) is False and recorded(state) == A
    _with_state(state, A)
    assert reconcile(state, A) is False
    assert (state / "g" / "default" / "CURRENT").exists()


def test_state_from_another_cluster_changelog_or_layout_is_deleted(tmp_path):
    for other in (
        Identity("cluster-b", A.changelogs),
        Identity(A.cluster_id, {"changelog__g--x--y--default": "topic-2"}),
        Identity(A.cluster_id, A.changelogs, layout=A.layout + 1),
    ):
        state = tmp_path / f"{other.cluster_id}-{other.layout}" / "state"
        _with_state(state, A)
        assert reconcile(state, other) is True
        assert recorded(state) == other and [p.name for p in state.iterdir()] == ["identity.json"]


def test_state_of_unknown_origin_is_deleted(tmp_path):
    state = tmp_path / "state"
    (state / "g").mkdir(parents=True)
    assert reconcile(state, A) is True and recorded(state) == A


def test_purge_deletes_only_the_purged_clusters_state(tmp_path):
    _with_state(tmp_path / "gateway-dedup" / "1", A)
    _with_state(tmp_path / "other-dedup" / "1", Identity("cluster-b", {}))
    deleted = purge("cluster-a", tmp_path)
    assert deleted == [tmp_path / "gateway-dedup" / "1"]
    assert not (tmp_path / "gateway-dedup").exists()
    assert recorded(tmp_path / "other-dedup" / "1") == Identity("cluster-b", {})


def test_a_restart_keeps_the_stores_and_drops_what_a_previous_version_left(tmp_path):
    state = tmp_path / "state"
    _with_state(state, A)
    (state / "stores").mkdir()
    assert reconcile(state, A, keep="stores") is True
    assert sorted(p.name for p in state.iterdir()) == ["identity.json", "stores"]
    assert reconcile(state, A, keep="stores") is False and (state / "stores").is_dir()
