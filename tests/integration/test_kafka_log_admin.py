"""The log admin APIs of the Kafka door with admin clients nobody here wrote (confluent-kafka's
AdminClient, kafka-python's KafkaAdminClient) against real nodes: DeleteRecords, DescribeLogDirs,
OffsetDelete, ElectLeaders, AlterPartitionReassignments and ListPartitionReassignments."""

from __future__ import annotations

import time

import httpx
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.faults import wait_for
from tests.support.nodes import Cluster, running_node

WAIT_S = 60


@pytest.fixture
def knode(tmp_path):
    with running_node(tmp_path, kafka=True, **{"group.initial.rebalance.delay.ms": "0",
                                            "offsets.topic.num.partitions": "2"}) as n:
        yield n


def _create(admin: AdminClient, name: str, partitions: int, rf: int = 1) -> None:
    for f in admin.create_topics([NewTopic(name, partitions, rf)]).values():
        f.result(WAIT_S)


def _produce(bootstrap: str, topic: str, n: int, partition: int = 0) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(n):
        p.produce(topic, value=b"x" * 100 + str(i).encode(), partition=partition)
        p.poll(0)
    assert p.flush(WAIT_S) == 0


def test_delete_records_moves_the_log_start_and_consumers_start_there(knode):
    from kafka import TopicPartition as KpTopicPartition
    from kafka.admin import KafkaAdminClient

    admin = AdminClient({"bootstrap.servers": knode.bootstrap})
    _create(admin, "dr", 1)
    _produce(knode.bootstrap, "dr", 60)
    tp = TopicPartition("dr", 0, 25)
    result = admin.delete_records([tp])[tp].result(WAIT_S)
    assert result.low_watermark == 25
    r = httpx.get(f"{knode.url}/topics/dr/partitions/0/offsets", timeout=10).json()
    assert r["beginning_offset"] == 25 and r["end_offset"] == 60
    # The HTTP door and a Kafka consumer now start at 25.
    c = Consumer({"bootstrap.servers": knode.bootstrap, "group.id": "dr-g", "auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition("dr", 0)])
        first = None
        deadline = time.monotonic() + WAIT_S
        while first is None and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is not None and not m.error():
                first = m.offset()
        assert first == 25
    finally:
        c.close()
    kp = KafkaAdminClient(bootstrap_servers=knode.bootstrap, request_timeout_ms=30000)
    try:
        # An offset above the high watermark is refused; -1 deletes up to the high watermark.
        with pytest.raises(Exception, match="OffsetOutOfRange"):
            kp.delete_records({KpTopicPartition("dr", 0): 1000})
        out = kp.delete_records({KpTopicPartition("dr", 0): -1})
        assert out[KpTopicPartition("dr", 0)]["low_watermark"] == 60
        # DescribeLogDirs: this node's directory with the partition's size on disk.
        dirs = repr(kp.describe_log_dirs())  # one entry per node: its directory, topics, partition sizes
        assert str(knode.data_dir.resolve()) in dirs and "'dr'" in dirs, dirs
    finally:
        kp.close()


def test_offset_delete_removes_a_groups_committed_offsets_unless_subscribed(knode):
    from kafka import TopicPartition as KpTopicPartition
    from kafka.admin import KafkaAdminClient

    admin = AdminClient({"bootstrap.servers": knode.bootstrap})
    _create(admin, "od", 2)
    _produce(knode.bootstrap, "od", 10)
    r = httpx.post(f"{knode.url}/groups/od-g/offsets", timeout=30,
                   json={"offsets": [{"topic": "od", "partition": 0, "offset": 4},
                                     {"topic": "od", "partition": 1, "offset": 0}]})
    assert r.status_code in (200, 204), r.text
    kp = KafkaAdminClient(bootstrap_servers=knode.bootstrap, request_timeout_ms=30000)
    try:
        assert _committed(knode.bootstrap, "od-g") == {0: 4, 1: 0}
        kp.delete_group_offsets("od-g", [KpTopicPartition("od", 0)])
        assert _committed(knode.bootstrap, "od-g") == {1: 0}
        # A member subscribed to the topic protects its offsets.
        c = Consumer({"bootstrap.servers": knode.bootstrap, "group.id": "od-g", "auto.offset.reset": "earliest",
                      "enable.auto.commit": False})
        try:
            c.subscribe(["od"])
            wait_for(lambda: c.poll(0.5) is not None or bool(c.assignment()), timeout_s=WAIT_S)
            with pytest.raises(Exception, match="GroupSubscribedToTopic|GROUP_SUBSCRIBED_TO_TOPIC"):
                out = kp.delete_group_offsets("od-g", [KpTopicPartition("od", 1)])
                _raise_partition_errors(out)
        finally:
            c.close()
        # An unknown group answers GROUP_ID_NOT_FOUND.
        with pytest.raises(Exception, match="GroupIdNotFound|GROUP_ID_NOT_FOUND"):
            kp.delete_group_offsets("nobody-here", [KpTopicPartition("od", 0)])
    finally:
        kp.close()


def _committed(bootstrap: str, group: str) -> dict[int, int]:
    """A group's committed offsets by partition (confluent-kafka's OffsetFetch)."""
    from confluent_kafka import ConsumerGroupTopicPartitions

    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(WAIT_S)
    return {tp.partition: tp.offset for tp in res.topic_partitions if tp.offset >= 0}


def _partition0(admin: AdminClient):
    """Partition 0 of topic `mv` in a Metadata answer, or None while the answering node lacks it."""
    t = admin.list_topics("mv", timeout=WAIT_S).topics.get("mv")
    return None if t is None or t.error is not None else t.partitions.get(0)


def _raise_partition_errors(out) -> None:
    """kafka-python may answer per-partition errors in a dict rather than raising them."""
    for v in (out.values() if isinstance(out, dict) else []):
        if isinstance(v, BaseException):
            raise v
        if getattr(v, "errno", 0):
            raise RuntimeError(str(v))


def test_reassignments_and_leader_elections_on_three_nodes(tmp_path):
    from kafka import TopicPartition as KpTopicPartition
    from kafka.admin import KafkaAdminClient

    cluster = Cluster(tmp_path, size=3, kafka=True, overrides={"group.initial.rebalance.delay.ms": "0"}).start()
    try:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        _create(admin, "mv", 1, rf=2)
        # Every node learns of the topic from the metadata log: until then a node's answer lacks it.
        md = wait_for(lambda: _partition0(admin), timeout_s=WAIT_S)
        old = list(md.replicas)
        spare = next(n for n in (1, 2, 3) if n not in old)
        kp = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30000)
        try:
            assert kp.list_partition_reassignments() == {} or not kp.list_partition_reassignments()
            # Move the partition to [spare, old[0]]: the spare becomes the preferred leader.
            target = [spare, old[0]]
            kp.alter_partition_reassignments({KpTopicPartition("mv", 0): target})

            def moved() -> bool:
                p = _partition0(admin)
                return p is not None and sorted(p.replicas) == sorted(target) and not kp.list_partition_reassignments()

            wait_for(moved, timeout_s=120)
            # A reassignment of an unknown partition is answered for that partition alone.
            with pytest.raises(Exception, match="UnknownTopicOrPartition|UNKNOWN_TOPIC_OR_PARTITION"):
                out = kp.alter_partition_reassignments({KpTopicPartition("mv", 7): [1, 2]})
                _raise_partition_errors(out)
        finally:
            kp.close()
        # Preferred election: confluent-kafka's AdminClient (ElectLeaders v2).
        from confluent_kafka import ElectionType

        def preferred_leads() -> bool:
            p = _partition0(admin)
            if p is not None and p.leader == p.replicas[0]:
                return True
            admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("mv", 0)]).result(WAIT_S)
            return False

        wait_for(preferred_leads, timeout_s=120)
        # Electing again: ELECTION_NOT_NEEDED, which the client reports on the partition.
        res = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("mv", 0)]).result(WAIT_S)
        err = res[TopicPartition("mv", 0)]
        assert err is not None and "ELECTION_NOT_NEEDED" in str(err.name() if hasattr(err, "name") else err)
    finally:
        cluster.stop()
