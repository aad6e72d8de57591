"""`lakelog.client.AdminClient` against a real node process: topics, topic configs, consumer groups."""

from __future__ import annotations

import pytest

from lakelog.client import AdminClient, Consumer, Producer
from lakelog.client.node_client import NodeUnreachableError, RequestFailedError
from tests.support.nodes import NodeProcess, start_node


@pytest.fixture(scope="module")
def node(tmp_path_factory) -> NodeProcess:
    n = start_node(tmp_path_factory.mktemp("admin"), **{
        "group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "500",
        "group.coordinator.tick.ms": "50", "offsets.topic.num.partitions": "2"})
    try:
        yield n
    finally:
        try:
            n.stop()
        finally:
            n.kill()


def test_topics_are_created_listed_described_and_deleted(node):
    with AdminClient(node.url) as admin:
        admin.create_topic("orders", partitions=3, replication_factor=1, configs={"retention.ms": "86400000"})
        assert "orders" in admin.list_topics()
        d = admin.describe_topic("orders")
        assert (d.name, d.replication_factor, d.internal) == ("orders", 1, False)
        assert [p.partition for p in d.partitions] == [0, 1, 2]
        assert all(p.leader == p.replicas[0] and p.isr == p.replicas for p in d.partitions)
        assert d.topic_id
        with pytest.raises(RequestFailedError) as exists:
            admin.create_topic("orders", partitions=1)
        assert exists.value.status == 400  # v3 answers an existing topic as Confluent's v3: 400 / 40002
        admin.delete_topic("orders")
        assert "orders" not in admin.list_topics()
        with pytest.raises(RequestFailedError) as gone:
            admin.describe_topic("orders")
        assert gone.value.status == 404


def test_configs_are_described_and_altered(node):
    with AdminClient(node.url) as admin:
        admin.create_topic("configured", partitions=1, configs={"retention.ms": "86400000"})
        configs = admin.describe_configs("configured")
        assert configs["retention.ms"] == "86400000" and "segment.bytes" in configs
        admin.alter_configs("configured", {"cleanup.policy": "compact"}, delete=["retention.ms"])
        configs = admin.describe_configs("configured")
        assert configs["cleanup.policy"] == "compact"
        assert configs["retention.ms"] != "86400000"  # back to the default
        with pytest.raises(RequestFailedError) as bad:
            admin.alter_configs("configured", {"segment.bytes": "10"})  # below the key's minimum
        assert bad.value.status == 400


def test_groups_are_listed_and_described_with_their_lag(node):
    with AdminClient(node.url) as admin:
        admin.create_topic("grouped", partitions=2)
        with Producer({"bootstrap.servers": node.url, "linger.ms": 0}) as p:
            for i in range(10):
                p.produce("grouped", value=f"v{i}".encode(), partition=i % 2)
            p.flush(30)
        consumer = Consumer({"bootstrap.servers": node.url, "group.id": "billing", "auto.offset.reset": "earliest",
                             "enable.auto.commit": False, "session.timeout.ms": 2000,
                             "heartbeat.interval.ms": 200})
        try:
            consumer.subscribe(["grouped"])
            got: list = []
            for _ in range(100):
                got.extend(consumer.poll(0.3))
                if len(got) >= 10:
                    break
            assert len(got) == 10
            consumer.commit(offsets={("grouped", 0): 2, ("grouped", 1): 5})
            assert "billing" in admin.list_groups()
            g = admin.describe_group("billing")
            assert g.group_id == "billing" and g.state == "Stable" and len(g.members) == 1
            lag = {(r["topic"], r["partition"]): (r["current_offset"], r["log_end_offset"], r["lag"])
                   for r in g.partitions}
            assert lag == {("grouped", 0): (2, 5, 3), ("grouped", 1): (5, 5, 0)}
        finally:
            consumer.close()
        with pytest.raises(RequestFailedError) as unknown:
            admin.describe_group("nobody")
        assert (unknown.value.status, unknown.value.error_code) == (404, 40405)


def test_an_unreachable_node_is_named(node):
    import socket

    with socket.socket() as s:  # a port nobody listens on: bound here, so it is not free for anyone else
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        with AdminClient(f"http://127.0.0.1:{port}", connect_timeout_s=2) as admin:
            with pytest.raises(NodeUnreachableError, match=str(port)):
                admin.list_topics()
