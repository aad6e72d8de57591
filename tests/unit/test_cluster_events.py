"""The console's cluster events (ingest_api/cluster/events.py) from records applied to a real ClusterImage."""

from __future__ import annotations

from lakelog.ingest_api.cluster.image import ClusterImage
from lakelog.ingest_api.cluster.events import ClusterEvents


def _part(replicas, isr, leader, leader_epoch=0, partition_epoch=0):
    return {"replicas": replicas, "isr": isr, "leader": leader, "leader_epoch": leader_epoch,
            "partition_epoch": partition_epoch}


def _register(image, node, epoch, term=1):
    image.apply_record({"type": "register_broker", "node_id": node, "broker_epoch": epoch, "incarnation_id": f"i{epoch}",
                        "host": "127.0.0.1", "port": 9000 + node, "rack": None}, term=term)


def test_events_follow_the_records_once_armed():
    ready = {"v": False}
    image = ClusterImage()
    events = ClusterEvents(armed=lambda: ready["v"], controller_id=lambda: 2, clock=lambda: 1000.0)
    image.observer = events
    _register(image, 1, 1)  # replayed before the node caught up: no event
    assert events.recent() == [] and events.armed_at_ms is None
    ready["v"] = True
    _register(image, 2, 2)
    _register(image, 1, 3)
    image.apply_record({"type": "unfence_broker", "node_id": 1, "broker_epoch": 3})
    image.apply_record({"type": "fence_broker", "node_id": 1, "broker_epoch": 3})
    image.apply_record({"type": "create_topic", "name": "orders", "topic_id": "t1", "configs": {},
                        "partitions": [_part([1, 2], [1, 2], 1)]})
    image.apply_record({"type": "partition_change", "topic": "orders", "topic_id": "t1", "partition": 0,
                        "leader": 2, "isr": [2], "leader_epoch": 1, "partition_epoch": 1}, term=2)
    image.apply_record({"type": "partition_change", "topic": "orders", "topic_id": "t1", "partition": 0,
                        "isr": [2, 1], "leader_epoch": 1, "partition_epoch": 2}, term=2)
    image.apply_record({"type": "partition_change", "topic": "orders", "topic_id": "t1", "partition": 0,
                        "leader": -1, "leader_epoch": 2, "partition_epoch": 3}, term=2)
    image.apply_record({"type": "alter_configs", "name": "orders", "topic_id": "t1", "configs": {"retention.ms": "1"}},
                       term=2)
    image.apply_record({"type": "delete_topic", "name": "orders", "topic_id": "t1"}, term=2)
    # A skipped record (a stale partition epoch on a deleted topic) makes no event.
    image.apply_record({"type": "partition_change", "topic": "orders", "topic_id": "t1", "partition": 0,
                        "leader": 1, "leader_epoch": 3, "partition_epoch": 4}, term=2)
    got = [(e["kind"], e["message"]) for e in reversed(events.recent())]
    assert got == [
        ("node_joined", "node 2 joined (127.0.0.1:9002)"),
        ("node_restarted", "node 1 registered again: restarted (127.0.0.1:9001)"),
        ("node_unfenced", "node 1 is serving (unfenced)"),
        ("node_fenced", "node 1 fenced: its session expired or it stopped"),
        ("topic_created", "topic orders created: 1 partition(s), replication factor 2"),
        ("controller", "new active controller: node 2 (controller epoch 2)"),
        ("leader_changed", "orders-0: leader node 1 -> node 2 (leader epoch 1)"),
        ("isr_shrunk", "orders-0: ISR shrank 1, 2 -> 2 (out: 1)"),
        ("isr_expanded", "orders-0: ISR expanded 2 -> 2, 1 (in: 1)"),
        ("leader_changed", "orders-0 is offline: no leader (was node 2)"),
        ("configs_altered", "topic orders: configs changed (retention.ms)"),
        ("topic_deleted", "topic orders deleted"),
    ]
    assert [e["seq"] for e in events.recent(limit=2)] == [12, 11]
    assert [e["seq"] for e in events.recent(after_seq=10)] == [12, 11]
    assert events.recent()[0]["time_ms"] == 1_000_000 and events.recent()[0]["topic"] == "orders"


def test_the_events_are_bounded_and_a_failing_observer_never_fails_an_apply():
    image = ClusterImage()
    events = ClusterEvents(max_events=3)
    image.observer = events
    for i in range(1, 6):
        _register(image, i, i)
    assert [e["node"] for e in events.recent()] == [5, 4, 3]

    class Broken:
        def before(self, image, record):
            raise RuntimeError("boom")

        def after(self, image, record, token):
            raise RuntimeError("boom")

    image.observer = Broken()
    _register(image, 9, 10)
    assert image.brokers[9].broker_epoch == 10 and image.skipped_records == 0
