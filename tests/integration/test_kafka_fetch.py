"""Fetch on the Kafka door against a real node: KIP-227 fetch sessions on the wire and with
consumers that use them (kafka-python, Apache Kafka's Java console consumer), and Fetch v13+ /
Produce v13, which name topics by id."""

from __future__ import annotations

import datetime
import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v17.request import FetchPartition, FetchRequest, FetchTopic, ForgottenTopic
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.produce.v13.request import PartitionProduceData, ProduceRequest, TopicProduceData

from lakelog.logstore.record_batch import Record, build_batch
from tests.support.kafka_wire import WireClient
from tests.support.nodes import running_node

WAIT_S = 60
ROOT = Path(__file__).resolve().parents[2]
KAFKA_JARS = ROOT / ".jars" / "kafka"


@pytest.fixture
def knode(tmp_path):
    with running_node(tmp_path, kafka=True, **{"group.initial.rebalance.delay.ms": "0",
                                            "offsets.topic.num.partitions": "2"}) as n:
        yield n


def _create(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        f.result(WAIT_S)


def _topic_id(c: WireClient, name: str) -> uuid.UUID:
    _, md = c.request(MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name=name),),
                                      allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    tid = md.topics[0].topic_id
    assert tid is not None and tid.int != 0
    return tid


def _produce_v13(c: WireClient, topic_id: uuid.UUID, partition: int, values: list[bytes]) -> None:
    batch = build_batch([Record(i, int(time.time() * 1000), None, v) for i, v in enumerate(values)])
    _, res = c.request(ProduceRequest(transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=10),
                                      topic_data=(TopicProduceData(topic_id=topic_id, partition_data=(
                                          PartitionProduceData(index=partition, records=batch),)),)))
    part = res.responses[0].partition_responses[0]
    assert res.responses[0].topic_id == topic_id and part.error_code == ErrorCode.none, part


def _fetch(c: WireClient, session_id: int, epoch: int, topics: tuple = (), forgotten: tuple = (),
           wait_ms: int = 0) -> object:
    _, res = c.request(FetchRequest(max_wait=datetime.timedelta(milliseconds=wait_ms), min_bytes=1,
                                    session_id=session_id, session_epoch=epoch, topics=topics,
                                    forgotten_topics_data=forgotten))
    return res


def _parts(res) -> dict[tuple[uuid.UUID, int], object]:
    return {(t.topic_id, p.partition_index): p for t in res.responses for p in t.partitions}


def test_a_fetch_session_answers_incremental_fetches_with_what_changed(knode):
    _create(knode.bootstrap, "sess", 2)
    with WireClient("127.0.0.1", knode.kafka_port) as c:
        tid = _topic_id(c, "sess")
        _produce_v13(c, tid, 0, [b"a", b"b"])
        # A full fetch with epoch 0 opens a session and answers every partition, by topic id.
        full = _fetch(c, 0, 0, (FetchTopic(topic_id=tid, partitions=(
            FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20),
            FetchPartition(partition=1, fetch_offset=0, partition_max_bytes=1 << 20))),))
        assert full.error_code == ErrorCode.none and full.session_id != 0
        parts = _parts(full)
        assert set(parts) == {(tid, 0), (tid, 1)} and parts[(tid, 0)].high_watermark == 2
        assert parts[(tid, 0)].records and not parts[(tid, 1)].records
        sid = full.session_id
        # Incremental: partition 0 moved on to offset 2; only partition 1 gets new records.
        _produce_v13(c, tid, 1, [b"c"])
        inc = _fetch(c, sid, 1, (FetchTopic(topic_id=tid, partitions=(
            FetchPartition(partition=0, fetch_offset=2, partition_max_bytes=1 << 20),)),))
        assert inc.error_code == ErrorCode.none and inc.session_id == sid
        assert set(_parts(inc)) == {(tid, 1)} and _parts(inc)[(tid, 1)].high_watermark == 1
        # Nothing new: an incremental fetch names no partition and none is answered.
        inc = _fetch(c, sid, 2, (FetchTopic(topic_id=tid, partitions=(
            FetchPartition(partition=1, fetch_offset=1, partition_max_bytes=1 << 20),)),))
        assert inc.error_code == ErrorCode.none and _parts(inc) == {}
        # Forgetting partition 1, new records there are not answered; partition 0's are.
        _produce_v13(c, tid, 1, [b"d"])
        _produce_v13(c, tid, 0, [b"e"])
        inc = _fetch(c, sid, 3, (), (ForgottenTopic(topic_id=tid, partitions=(1,)),))
        assert set(_parts(inc)) == {(tid, 0)} and _parts(inc)[(tid, 0)].high_watermark == 3
        # A repeated epoch and an unknown session are refused as a whole.
        assert _fetch(c, sid, 3).error_code == ErrorCode.invalid_fetch_session_epoch
        assert _fetch(c, sid ^ 0x5A5A, 1).error_code == ErrorCode.fetch_session_id_not_found
        # An unknown topic id answers UNKNOWN_TOPIC_ID on its partitions.
        other = uuid.uuid4()
        res = _fetch(c, 0, -1, (FetchTopic(topic_id=other, partitions=(
            FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1024),)),))
        assert _parts(res)[(other, 0)].error_code == ErrorCode.unknown_topic_id and res.session_id == 0


def test_kafka_python_consumer_reads_through_its_fetch_session(knode):
    from kafka import KafkaConsumer, KafkaProducer

    _create(knode.bootstrap, "kps", 3)
    producer = KafkaProducer(bootstrap_servers=knode.bootstrap, acks="all")
    for i in range(60):
        producer.send("kps", value=b"first-%d" % i)
    producer.flush(WAIT_S)
    consumer = KafkaConsumer("kps", bootstrap_servers=knode.bootstrap, group_id="kps-readers",
                             auto_offset_reset="earliest", consumer_timeout_ms=15000, fetch_max_wait_ms=200)
    try:
        got = []
        deadline = time.monotonic() + WAIT_S
        while len(got) < 60 and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=1000).values():
                got.extend(m.value for m in batch)
        # More records after the session is open: incremental fetches carry them.
        for i in range(40):
            producer.send("kps", value=b"second-%d" % i)
        producer.flush(WAIT_S)
        deadline = time.monotonic() + WAIT_S
        while len(got) < 100 and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=1000).values():
                got.extend(m.value for m in batch)
    finally:
        consumer.close()
        producer.close()
    assert sorted(got) == sorted([b"first-%d" % i for i in range(60)] + [b"second-%d" % i for i in range(40)])


def test_the_java_console_consumer_reads_every_record(knode, tmp_path):
    """Kafka's own Java consumer (4.x: fetch sessions, Fetch v17+ by topic id) reads what was produced."""
    assert (KAFKA_JARS / "kafka-tools-4.1.0.jar").exists(), "run `make kafka` to resolve Kafka's jars into .jars/kafka"
    _create(knode.bootstrap, "javas", 2)
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": knode.bootstrap})
    for i in range(30):
        p.produce("javas", value=f"j{i}".encode(), partition=i % 2)
    assert p.flush(WAIT_S) == 0
    env = {**os.environ, "KAFKA_LOG4J_OPTS": ""}
    out = subprocess.run(
        ["java", "-cp", f"{KAFKA_JARS}/*", "org.apache.kafka.tools.consumer.ConsoleConsumer",
         "--bootstrap-server", knode.bootstrap, "--topic", "javas", "--from-beginning", "--max-messages", "30",
         "--timeout-ms", "60000", "--group", "java-readers"],
        capture_output=True, text=True, timeout=180, env=env, cwd=tmp_path)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("j")]
    assert sorted(lines) == sorted(f"j{i}" for i in range(30)), out.stderr[-3000:]
