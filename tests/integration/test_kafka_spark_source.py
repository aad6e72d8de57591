"""Spark's own Kafka source (`spark-sql-kafka-0-10`, resolved through infra/pom.xml) reads a Lakelog
topic through the Kafka door: a Structured Streaming query with trigger availableNow into a Delta
table, and a batch `spark.read.format("kafka")`. Real node processes on loopback; a local Spark
session from the project's own session builder (its class path is the jars folder)."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from lakelog.spark_log.session import build_session
from tests.support.nodes import start_node

pytestmark = pytest.mark.spark

WAIT_S = 60
RECORDS = 500
PARTITIONS = 3


@pytest.fixture(scope="module")
def knode(tmp_path_factory):
    n = start_node(tmp_path_factory.mktemp("spark-kafka"), kafka=True,
                   **{"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "2"})
    try:
        yield n
    finally:
        try:
            n.stop()
        finally:
            n.kill()


@pytest.fixture(scope="module")
def spark():
    session = build_session(app_name="lakelog-kafka-source", master="local[2]",
                            conf={"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false"})
    yield session
    session.stop()


def _fill(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
        f.result(WAIT_S)
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                  "compression.type": "lz4", "linger.ms": 5})
    for i in range(RECORDS):
        p.produce(topic, key=f"k{i}".encode(), value=f"value-{i:05d}".encode())
    assert p.flush(WAIT_S) == 0


def test_structured_streaming_reads_a_topic_into_a_delta_table(knode, spark, tmp_path):
    _fill(knode.bootstrap, "events")
    table, checkpoint = str(tmp_path / "events_delta"), str(tmp_path / "checkpoint")
    stream = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", knode.bootstrap)
              .option("subscribe", "events")
              .option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", "200")  # several micro-batches, each one Delta commit
              .load()
              .selectExpr("CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value", "partition", "offset"))
    query = (stream.writeStream.format("delta").option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start(table))
    assert query.awaitTermination(300)  # availableNow: stops once it has read what was there at the start
    assert query.exception() is None

    rows = spark.read.format("delta").load(table).collect()
    assert len(rows) == RECORDS
    assert sorted(r["value"] for r in rows) == [f"value-{i:05d}" for i in range(RECORDS)]
    assert {r["key"]: r["value"] for r in rows}["k42"] == "value-00042"
    # Offsets per partition are the log's: 0..n-1 with no gap and no repeat.
    for p in range(PARTITIONS):
        offsets = sorted(r["offset"] for r in rows if r["partition"] == p)
        assert offsets == list(range(len(offsets)))
    versions = spark.sql(f"DESCRIBE HISTORY delta.`{table}`").count()
    assert versions >= 2  # maxOffsetsPerTrigger split the read into several batches

    # A second availableNow run reads only what came since (the checkpoint holds the offsets).
    p = Producer({"bootstrap.servers": knode.bootstrap, "acks": "all"})
    for i in range(RECORDS, RECORDS + 7):
        p.produce("events", key=f"k{i}".encode(), value=f"value-{i:05d}".encode())
    assert p.flush(WAIT_S) == 0
    query = (stream.writeStream.format("delta").option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start(table))
    assert query.awaitTermination(300)
    assert query.exception() is None
    assert spark.read.format("delta").load(table).count() == RECORDS + 7


def test_batch_read_of_a_topic_with_offset_bounds(knode, spark):
    _fill(knode.bootstrap, "batch")
    df = (spark.read.format("kafka")
          .option("kafka.bootstrap.servers", knode.bootstrap)
          .option("subscribe", "batch")
          .option("startingOffsets", "earliest")
          .option("endingOffsets", "latest")
          .load())
    rows = df.selectExpr("CAST(value AS STRING) AS value", "partition", "offset", "timestamp").collect()
    assert len(rows) == RECORDS
    assert sorted(r["value"] for r in rows) == [f"value-{i:05d}" for i in range(RECORDS)]
    assert all(r["timestamp"] is not None for r in rows)
    # Explicit per-partition bounds (JSON offsets): partition 0 from offset 2 up to 5, nothing else.
    bounded = (spark.read.format("kafka")
               .option("kafka.bootstrap.servers", knode.bootstrap)
               .option("assign", '{"batch": [0]}')
               .option("startingOffsets", '{"batch": {"0": 2}}')
               .option("endingOffsets", '{"batch": {"0": 5}}')
               .load().select("offset").collect())
    assert sorted(r["offset"] for r in bounded) == [2, 3, 4]
