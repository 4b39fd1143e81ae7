"""The local broker launcher's pure parts."""

from gateway.broker.launcher import _cluster_id


def test_cluster_ids_never_look_like_an_option():
    ids = {_cluster_id() for _ in range(2000)}
    assert len(ids) == 2000 and not any(i.startswith("-") for i in ids)
