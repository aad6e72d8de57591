"""The Kafka door with clients nobody here wrote: confluent-kafka (librdkafka) and kafka-python
against real node processes on loopback, plus raw frames that are malformed, truncated, oversized or
of an unsupported version."""

from __future__ import annotations

import datetime
import socket
import struct
import time
import uuid

import httpx
import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from kio.schema.api_versions.v0.request import ApiVersionsRequest as ApiVersionsV0
from kio.schema.errors import ErrorCode
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.produce.v10.request import PartitionProduceData as PartitionProduceDataV10
from kio.schema.produce.v10.request import ProduceRequest as ProduceRequestV10
from kio.schema.produce.v10.request import TopicProduceData as TopicProduceDataV10

from lakelog.ingest_api.kafka import codec
from lakelog.logstore.record_batch import Record, build_batch
from tests.support.faults import wait_for
from tests.support.kafka_wire import WireClient
from tests.support.nodes import Cluster, NodeProcess, free_port, start_node

WAIT_S = 60


@pytest.fixture
def knode(tmp_path):
    """One node with a Kafka listener on a free port."""
    n = start_node(tmp_path, kafka=True, **{"group.initial.rebalance.delay.ms": "0",
                                            "offsets.topic.num.partitions": "4"})
    try:
        yield n
    finally:
        try:
            n.stop()
        finally:
            n.kill()


def _create(admin: AdminClient, name: str, partitions: int, rf: int = 1) -> None:
    for f in admin.create_topics([NewTopic(name, partitions, rf)]).values():
        f.result(WAIT_S)


def _produce(bootstrap: str, topic: str, n: int, **conf) -> list[tuple[int, int]]:
    p = Producer({"bootstrap.servers": bootstrap, **conf})
    done: list[tuple[int, int]] = []
    errors: list[KafkaError] = []

    def report(err, msg):
        (errors.append(err) if err else done.append((msg.partition(), msg.offset())))

    for i in range(n):
        p.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode(), on_delivery=report)
    assert p.flush(WAIT_S) == 0
    assert not errors, errors
    return done


def _consume(consumer: Consumer, n: int, wait_s: float = WAIT_S) -> list:
    """Up to `n` records (a bound on the wait, not a speed check: a loaded machine rebalances slowly)."""
    got = []
    deadline = time.monotonic() + wait_s
    while len(got) < n and time.monotonic() < deadline:
        m = consumer.poll(1.0)
        if m is not None and not m.error():
            got.append(m)
    return got


def test_confluent_kafka_idempotent_lz4_producer_group_consumer_and_admin(knode):
    admin = AdminClient({"bootstrap.servers": knode.bootstrap})
    md = admin.list_topics(timeout=WAIT_S)
    assert {b.id: (b.host, b.port) for b in md.brokers.values()} == {1: ("127.0.0.1", knode.kafka_port)}
    _create(admin, "orders", 3)
    # validate_only creates nothing.
    for f in admin.create_topics([NewTopic("dry", 2, 1)], validate_only=True).values():
        f.result(WAIT_S)
    assert "dry" not in admin.list_topics(timeout=WAIT_S).topics
    assert len(admin.list_topics(timeout=WAIT_S).topics["orders"].partitions) == 3

    done = _produce(knode.bootstrap, "orders", 300, **{"enable.idempotence": True, "acks": "all",
                                                        "compression.type": "lz4", "linger.ms": 5})
    assert len(done) == 300 and len(set(done)) == 300
    # The stored batches are the producer's own: the HTTP door reads the same records.
    total = 0
    for p in range(3):
        r = httpx.get(f"{knode.url}/topics/orders/partitions/{p}/offsets", timeout=10)
        total += r.json()["end_offset"]
    assert total == 300

    consumer = Consumer({"bootstrap.servers": knode.bootstrap, "group.id": "readers",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.subscribe(["orders"])
        got = _consume(consumer, 300)
        assert sorted(m.value() for m in got) == sorted(f"v{i}".encode() for i in range(300))
        assert {m.key(): m.value() for m in got}[b"k7"] == b"v7"
        consumer.commit(asynchronous=False)
        committed = consumer.committed([TopicPartition("orders", p) for p in range(3)], timeout=WAIT_S)
        assert sum(tp.offset for tp in committed) == 300
        # The group and its offsets are the ones the HTTP door shows.
        offsets = httpx.get(f"{knode.url}/groups/readers/offsets", timeout=10).json()["offsets"]
        assert sum(o["offset"] for o in offsets) == 300
        described = admin.describe_consumer_groups(["readers"])["readers"].result(WAIT_S)
        assert len(described.members) == 1
    finally:
        consumer.close()

    res = ConfigResource(ConfigResource.Type.TOPIC, "orders", set_config={"retention.ms": "3600000"})
    for f in admin.alter_configs([res]).values():
        f.result(WAIT_S)
    configs = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "orders")])
    described_configs = list(configs.values())[0].result(WAIT_S)
    assert described_configs["retention.ms"].value == "3600000"
    for f in admin.delete_topics(["orders"]).values():
        f.result(WAIT_S)
    assert "orders" not in admin.list_topics(timeout=WAIT_S).topics


def test_kafka_python_producer_and_consumer(knode):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic as KpNewTopic

    admin = KafkaAdminClient(bootstrap_servers=knode.bootstrap, request_timeout_ms=30000)
    try:
        admin.create_topics([KpNewTopic("kp", num_partitions=2, replication_factor=1)])
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=knode.bootstrap, acks="all", compression_type="gzip")
    futures = [producer.send("kp", key=b"k%d" % i, value=b"value-%d" % i) for i in range(50)]
    producer.flush(WAIT_S)
    metas = [f.get(timeout=WAIT_S) for f in futures]
    producer.close()
    assert {m.topic for m in metas} == {"kp"}
    consumer = KafkaConsumer("kp", bootstrap_servers=knode.bootstrap, group_id="kp-readers",
                             auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=20000)
    try:
        values = sorted(m.value for m in consumer)
        assert values == sorted(b"value-%d" % i for i in range(50))
        consumer.commit()
    finally:
        consumer.close()


def test_offsets_committed_over_http_are_where_a_kafka_consumer_resumes(knode):
    admin = AdminClient({"bootstrap.servers": knode.bootstrap})
    _create(admin, "resume", 1)
    _produce(knode.bootstrap, "resume", 10)
    r = httpx.post(f"{knode.url}/groups/shared/offsets", timeout=30,
                   json={"offsets": [{"topic": "resume", "partition": 0, "offset": 6}]})
    assert r.status_code == 200, r.text
    consumer = Consumer({"bootstrap.servers": knode.bootstrap, "group.id": "shared",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        # ListOffsets by timestamp: the first record at or after it (none after the last: -1).
        ts = [consumer.offsets_for_times([TopicPartition("resume", 0, t)], timeout=WAIT_S)[0].offset
              for t in (0, 2**62)]
        assert ts == [0, -1]
        consumer.subscribe(["resume"])
        got = _consume(consumer, 4)
        assert [m.offset() for m in got] == [6, 7, 8, 9]
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    # ... and the reverse: the Kafka consumer's commit is what HTTP reads.
    offsets = httpx.get(f"{knode.url}/groups/shared/offsets", timeout=10).json()["offsets"]
    assert [(o["topic"], o["partition"], o["offset"]) for o in offsets] == [("resume", 0, 10)]
    # DeleteGroups: an empty group goes with its offsets; a group with a member stays.
    member = Consumer({"bootstrap.servers": knode.bootstrap, "group.id": "busy", "auto.offset.reset": "earliest"})
    try:
        member.subscribe(["resume"])
        assert _consume(member, 1)
        results = admin.delete_consumer_groups(["shared", "busy"])
        results["shared"].result(WAIT_S)
        with pytest.raises(Exception, match="NON_EMPTY_GROUP"):
            results["busy"].result(WAIT_S)
    finally:
        member.close()
    assert httpx.get(f"{knode.url}/groups/shared/offsets", timeout=10).json()["offsets"] == []


def test_bad_frames_close_only_their_connection_and_unknown_versions_are_answered(knode):
    with WireClient("127.0.0.1", knode.kafka_port) as healthy:
        # A version from the future: ApiVersions answers v0's shape with UNSUPPORTED_VERSION and the table.
        healthy.send_raw(struct.pack(">ihhih", 10, 18, 99, 77, -1))
        frame = healthy.read_frame()
        cid, err = struct.unpack_from(">ih", frame, 0)
        assert (cid, err) == (77, ErrorCode.unsupported_version.value)
        _, md = healthy.request(MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                                include_topic_authorized_operations=False))
        assert [b.port for b in md.brokers] == [knode.kafka_port]

        bad_frames = [
            struct.pack(">i", 3) + b"abc",  # shorter than a request header
            struct.pack(">i", 200 * 1024 * 1024),  # over socket.request.max.bytes
            struct.pack(">ihhih", 13, 3, 12, 1, 3) + b"xyz",  # a whole frame whose request ends too soon
            struct.pack(">ihhi", 1000, 3, 12, 1) + b"\x00" * 16,  # announces more bytes than it sends
        ]
        for data in bad_frames:
            with socket.create_connection(("127.0.0.1", knode.kafka_port), timeout=10) as s:
                s.sendall(data)
                if data.startswith(struct.pack(">i", 1000)):
                    s.shutdown(socket.SHUT_WR)  # truncated: the peer stops sending
                assert s.recv(100) == b""  # the node closed this connection
        # The other connection is still served.
        _, md = healthy.request(MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                                include_topic_authorized_operations=False))
        assert md.cluster_id
        # A transactional id goes to the transaction coordinator, which bounds transaction.timeout.ms.
        loading = (ErrorCode.coordinator_load_in_progress, ErrorCode.not_coordinator, ErrorCode.coordinator_not_available)

        def answered():
            _, r = healthy.request(InitProducerIdRequest(transactional_id="txn-1",
                                                         transaction_timeout=datetime.timedelta(hours=1)))
            return r if r.error_code not in loading else None

        pid = wait_for(answered, WAIT_S, "the transaction coordinator")
        assert pid.error_code == ErrorCode.invalid_transaction_timeout
        _, pid = healthy.request(InitProducerIdRequest(transactional_id=None, transaction_timeout=datetime.timedelta(seconds=60)))
        assert pid.error_code == ErrorCode.none and pid.producer_id >= 0
    assert "closed" in knode.read_log()
    assert "Traceback" not in knode.read_log()


def test_three_nodes_metadata_routes_producers_to_leaders_and_a_stale_client_is_told(tmp_path):
    cluster = Cluster(tmp_path, size=3, kafka=True, overrides={"group.initial.rebalance.delay.ms": "0"}).start()
    try:
        admin = AdminClient({"bootstrap.servers": cluster.node(1).bootstrap})
        _create(admin, "spread", 6, rf=1)
        md = admin.list_topics(timeout=WAIT_S)
        assert {b.id: b.port for b in md.brokers.values()} == {n.node_id: n.kafka_port for n in cluster.nodes}
        leaders = {p.id: p.leader for p in md.topics["spread"].partitions.values()}
        assert set(leaders.values()) == {1, 2, 3}  # placement spreads the leaders
        # Bootstrapped from node 1 alone, the producer sends each partition's batches to its leader.
        done = _produce(cluster.node(1).bootstrap, "spread", 120, **{"enable.idempotence": True, "acks": "all"})
        per_partition = {p: sum(1 for q, _ in done if q == p) for p in range(6)}
        for p, leader in leaders.items():
            r = httpx.get(f"{cluster.node(leader).url}/topics/spread/partitions/{p}/offsets", timeout=10)
            assert r.json()["end_offset"] == per_partition[p]
        # A client that sends a partition's records to a node that does not lead it is told so.
        p, leader = next((p, leader) for p, leader in leaders.items() if leader != 1)
        batch = build_batch([Record(0, int(time.time() * 1000), None, b"stale")])
        with WireClient("127.0.0.1", cluster.node(1).kafka_port) as c:
            _, res = c.request(ProduceRequest(transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=10), topic_data=(
                TopicProduceData(name="spread", partition_data=(PartitionProduceData(index=p, records=batch),)),)))
        part = res.responses[0].partition_responses[0]
        assert part.error_code == ErrorCode.not_leader_or_follower
        # ... with where the leader is (KIP-951), on Produce v10+.
        with WireClient("127.0.0.1", cluster.node(1).kafka_port) as c:
            _, res = c.request(ProduceRequestV10(transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=10),
                                                 topic_data=(TopicProduceDataV10(name="spread", partition_data=(
                                                     PartitionProduceDataV10(index=p, records=batch),)),)))
        part = res.responses[0].partition_responses[0]
        assert part.error_code == ErrorCode.not_leader_or_follower and part.current_leader.leader_id == leader
        assert [(e.node_id, e.port) for e in res.node_endpoints] == [(leader, cluster.node(leader).kafka_port)]
        # A consumer group reads everything, whichever node coordinates it.
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                             "auto.offset.reset": "earliest"})
        try:
            consumer.subscribe(["spread"])
            assert len(_consume(consumer, 120, wait_s=240)) == 120
        finally:
            consumer.close()
    finally:
        cluster.stop()


def test_unsupported_versions_of_other_apis_are_answered_not_dropped(knode):
    with WireClient("127.0.0.1", knode.kafka_port) as c:
        c.send_raw(codec.encode_request(ApiVersionsV0(), 1))
        assert c.read_frame()[:4] == struct.pack(">i", 1)
        # Produce v2 is below the range we answer: its own response type, UNSUPPORTED_VERSION inside.
        c.send_raw(struct.pack(">ihhih", 10, 0, 2, 5, -1))
        frame = c.read_frame()
        assert struct.unpack_from(">i", frame, 0)[0] == 5
        _, md = c.request(MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                          include_topic_authorized_operations=False))
        assert md.brokers


def _local_log_start(url: str, topic: str) -> int:
    """The leader's local log start offset (what a local read at the end reports)."""
    end = httpx.get(f"{url}/topics/{topic}/partitions/0/offsets", timeout=30).json()["end_offset"]
    r = httpx.get(f"{url}/topics/{topic}/partitions/0/records", params={"offset": end, "timeout": 0},
                  headers={"Accept": "application/vnd.kafka.binary.v2+json"}, timeout=30)
    return int(r.headers["X-Lakelog-Log-Start-Offset"])


def test_a_kafka_consumer_reads_below_the_local_log_start_from_the_remote_tier(tmp_path):
    node = start_node(tmp_path, kafka=True, **{
        "remote.storage.url": (tmp_path / "remote").as_uri(), "remote.log.manager.task.interval.ms": "100",
        "remote.segment.delete.delay.ms": "0", "remote.log.metadata.max.age.ms": "0"})
    try:
        admin = AdminClient({"bootstrap.servers": node.bootstrap})
        topic = NewTopic("tiered", 1, 1, config={"remote.storage.enable": "true", "segment.bytes": "2048",
                                                  "local.retention.bytes": "1", "retention.ms": "-1"})
        for f in admin.create_topics([topic]).values():
            f.result(WAIT_S)
        p = Producer({"bootstrap.servers": node.bootstrap, "linger.ms": 0, "batch.num.messages": 10})
        for i in range(300):
            p.produce("tiered", value=f"value-{i:04d}".encode())
            if i % 10 == 9:
                p.flush(WAIT_S)
        assert p.flush(WAIT_S) == 0
        wait_for(lambda: _local_log_start(node.url, "tiered") > 100, what="local segments deleted after upload")
        consumer = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "tier-readers",
                             "enable.auto.commit": False})
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition("tiered", 0), timeout=WAIT_S)
            assert (low, high) == (0, 300)  # ListOffsets earliest is the remote tier's start
            consumer.assign([TopicPartition("tiered", 0, 0)])
            got = _consume(consumer, 300)
            assert [m.value().decode() for m in got] == [f"value-{i:04d}" for i in range(300)]
        finally:
            consumer.close()
    finally:
        try:
            node.stop()
        finally:
            node.kill()


def test_a_kafka_port_in_use_stops_the_node_with_a_clear_line(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        node = NodeProcess(tmp_path / "data", free_port(), kafka_port=taken.getsockname()[1])
        try:
            with pytest.raises(RuntimeError, match="exited with 1"):
                node.start(timeout_s=WAIT_S)
            assert "cannot open the Kafka listeners" in node.read_log()
        finally:
            node.kill()
