"""Many partition changes of one controller round in one metadata record (`partition_changes`)."""

from __future__ import annotations

from lakelog.ingest_api.cluster.image import ClusterImage
from lakelog.ingest_api.cluster.partition_change import batch_changes
from tests.unit.test_cluster_image import applied, create, part, register


def _change(topic: str, p: int, *, leader: int, leader_epoch: int, partition_epoch: int, isr: list[int]) -> dict:
    return {"type": "partition_change", "topic": topic, "topic_id": f"id-{topic}", "partition": p,
            "leader": leader, "isr": isr, "leader_epoch": leader_epoch, "partition_epoch": partition_epoch}


def test_runs_of_partition_changes_are_packed_and_other_records_keep_their_places():
    fence = {"type": "fence_broker", "node_id": 3, "broker_epoch": 13}
    changes = [_change("t", p, leader=1, leader_epoch=1, partition_epoch=1, isr=[1, 2]) for p in range(5)]
    out = batch_changes([fence, *changes, {"type": "alter_configs"}, changes[0]], max_changes=2)
    assert [r["type"] for r in out] == ["fence_broker", "partition_changes", "partition_changes", "partition_change",
                                        "alter_configs", "partition_change"]
    assert [c["partition"] for c in out[1]["changes"] + out[2]["changes"]] == [0, 1, 2, 3]
    assert all("type" not in c for c in out[1]["changes"])
    assert batch_changes([]) == []


def test_a_packed_record_applies_each_change_and_skips_a_stale_one_alone():
    image = ClusterImage()
    for n in (1, 2, 3):
        applied(image, register(n, 10 + n))
    applied(image, create("t", "id-t", *[part([3, 1, 2]) for _ in range(4)]))
    # Node 3 died: its four leaderships move in one record; partition 2's change is stale (epoch 0).
    changes = [_change("t", p, leader=1, leader_epoch=1, partition_epoch=1, isr=[1, 2]) for p in range(4)]
    changes[2] = _change("t", 2, leader=1, leader_epoch=1, partition_epoch=0, isr=[1, 2])
    skipped = image.skipped_records
    [record] = batch_changes(changes)
    image.apply_record(record)
    states = image.topics["t"].partitions
    assert [s.leader for s in states] == [1, 1, 3, 1]
    assert [list(s.isr) for s in states] == [[1, 2], [1, 2], [3, 1, 2], [1, 2]]
    assert image.skipped_records == skipped + 1
    # The same record again (a duplicate proposal): every change is stale now, nothing moves.
    image.apply_record(record)
    assert [s.leader_epoch for s in image.topics["t"].partitions] == [1, 1, 0, 1]
    assert image.skipped_records == skipped + 1 + 4


def test_an_empty_or_oversized_partition_changes_record_is_refused():
    image = ClusterImage()
    skipped = image.skipped_records
    image.apply_record({"type": "partition_changes", "changes": []})
    assert image.skipped_records == skipped + 1
