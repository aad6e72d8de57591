"""A partition leader killed mid-stream, seen by Kafka clients nobody here wrote.

Three real nodes, a topic of three partitions at replication factor 3 (min.insync.replicas 2).
confluent-kafka's idempotent producer (acks=all) and a group consumer run in one loop; once the
stream is going, the leader of partition 0 is killed with SIGKILL. The same client objects carry
on: every record the producer saw acknowledged is consumed, the log holds each record once (the
idempotent producer's retries did not duplicate it), and records produced after the kill arrive
too. No assertion on how fast: the bounds only keep a broken cluster from hanging the suite.
"""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.faults import wait_for
from tests.support.nodes import Cluster

TOPIC = "stream"
WAIT_S = 60
BEFORE_KILL = 600
AFTER_KILL = 600
#: Bound on the time to read back every acknowledged record (an election, a coordinator move and
#: a rebalance on a loaded machine).
DRAIN_S = 300


def _leaders(admin: AdminClient) -> dict[int, int]:
    md = admin.list_topics(TOPIC, timeout=WAIT_S)
    return {p.id: p.leader for p in md.topics[TOPIC].partitions.values()}


def _full_isr(admin: AdminClient) -> bool:
    md = admin.list_topics(TOPIC, timeout=WAIT_S)
    parts = md.topics[TOPIC].partitions.values()
    return len(parts) == 3 and all(p.leader > 0 and len(p.isrs) == 3 for p in parts)


class Stream:
    """The producer and the consumer of the test, driven from one loop."""

    def __init__(self, bootstrap: str) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                                  "linger.ms": 5, "compression.type": "lz4"})
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                                  "auto.offset.reset": "earliest", "enable.auto.commit": True,
                                  "auto.commit.interval.ms": 500})
        self.consumer.subscribe([TOPIC])
        self.sent = 0
        self.acked: set[str] = set()
        self.failed: list[str] = []
        #: (partition, offset) -> value: a redelivery after a rebalance lands on the same key.
        self.consumed: dict[tuple[int, int], str] = {}

    def _report(self, err, msg) -> None:
        if err is None:
            self.acked.add(msg.value().decode())
        else:
            self.failed.append(str(err))

    def step(self, produce: int) -> None:
        for _ in range(produce):
            self.producer.produce(TOPIC, key=str(self.sent % 17).encode(), value=f"r{self.sent:06d}".encode(),
                                  on_delivery=self._report)
            self.sent += 1
        self.producer.poll(0)
        for m in self.consumer.consume(500, timeout=0.05):
            if not m.error():
                self.consumed[(m.partition(), m.offset())] = m.value().decode()

    def close(self) -> None:
        self.producer.flush(WAIT_S)
        self.consumer.close()


def test_a_killed_leader_loses_no_acknowledged_record_and_the_clients_carry_on(tmp_path):
    cluster = Cluster(tmp_path, 3, kafka=True, overrides={"group.initial.rebalance.delay.ms": "0",
                                                          "offsets.topic.num.partitions": "3"}).start(timeout_s=120)
    stream = None
    try:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        topic = NewTopic(TOPIC, 3, 3, config={"min.insync.replicas": "2"})
        for f in admin.create_topics([topic]).values():
            f.result(WAIT_S)
        wait_for(lambda: _full_isr(admin), WAIT_S, "every ISR full")
        stream = Stream(cluster.bootstrap)

        deadline = time.monotonic() + DRAIN_S
        victim = _leaders(admin)[0]
        while len(stream.acked) < BEFORE_KILL and time.monotonic() < deadline:
            stream.step(produce=20)
        assert len(stream.acked) >= BEFORE_KILL, f"only {len(stream.acked)} acknowledged before the kill"
        # SIGKILL while batches are in flight: no controlled shutdown, no leadership handed over.
        cluster.node(victim).kill()
        killed_at = stream.sent
        in_flight = stream.sent - len(stream.acked)

        while stream.sent < killed_at + AFTER_KILL and time.monotonic() < deadline:
            stream.step(produce=20)
        assert stream.producer.flush(DRAIN_S) == 0
        assert not stream.failed, stream.failed[:5]
        # The producer gave no record up, in flight at the kill or not.
        assert len(stream.acked) == stream.sent, (
            f"{stream.sent - len(stream.acked)} never acknowledged ({in_flight} were in flight at the kill)")
        print(f"{in_flight} records in flight at the kill, {stream.sent} produced")

        while set(stream.consumed.values()) < stream.acked and time.monotonic() < deadline:
            stream.step(produce=0)
        values = list(stream.consumed.values())
        missing = stream.acked - set(values)
        assert not missing, f"{len(missing)} acknowledged records never consumed, e.g. {sorted(missing)[:5]}"
        assert len(values) == len(set(values)), "a record is in the log twice"
        assert {f"r{i:06d}" for i in range(killed_at, stream.sent)} <= set(values)
        # Partition 0 has a new leader among the two nodes left.
        assert _leaders(AdminClient({"bootstrap.servers": ",".join(
            n.bootstrap for n in cluster.live())}))[0] not in (victim, -1)
    finally:
        if stream is not None:
            stream.close()
        cluster.stop()
