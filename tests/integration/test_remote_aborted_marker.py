"""A transaction whose data is tiered while its ABORT marker is not: a real node uploads the
segments holding the aborted data (below the LSO once the marker lands), local retention deletes
them, and the marker stays in the local active segment, so no `.txnindex` object names the
transaction. The uploaded segments' manifest entries list it (`later_aborts`): read_committed
reads below the local log start over Kafka and over HTTP, and Spark's remote read, never return
its records; read_uncommitted does."""

from __future__ import annotations

import base64
import uuid

import httpx
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from lakelog.spark_log.jvm_source import jvm_source_loaded
from lakelog.spark_log.session import remote_session
from lakelog.tiering.remote_scan import load_manifest, open_remote
from tests.support.faults import wait_for
from tests.support.nodes import running_node

WAIT_S = 120
SMALL = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "2",
         "transaction.state.log.num.partitions": "2", "remote.log.manager.task.interval.ms": "100",
         "remote.segment.delete.delay.ms": "0", "remote.log.metadata.max.age.ms": "0"}
BINARY = "application/vnd.kafka.binary.v2+json"
PAD = "x" * 300
ABORTED = 8  # batches of the aborted transaction: about three segments of 1024 bytes


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("remote-abort")
    with running_node(tmp, kafka=True, **SMALL, **{"remote.storage.url": (tmp / "remote").as_uri()}) as n:
        n.remote = (tmp / "remote").as_uri()
        yield n


def _manifest(remote: str, topic: str):
    store = open_remote(remote)
    try:
        return load_manifest(store, topic, 0)
    finally:
        store.close()


def _local_log_start(url: str, topic: str) -> int:
    r = httpx.get(f"{url}/topics/{topic}/partitions/0/records",
                  params={"offset": _end_offset(url, topic), "timeout": 0}, headers={"Accept": BINARY}, timeout=30)
    return int(r.headers["X-Lakelog-Log-Start-Offset"])


def _end_offset(url: str, topic: str) -> int:
    r = httpx.get(f"{url}/topics/{topic}/partitions/0/offsets", timeout=30)
    assert r.status_code == 200, r.text
    return r.json()["end_offset"]


def _tiered_abort(node, topic: str) -> tuple[list[str], list[str], int]:
    """Write a committed transaction (offsets 0, 1, marker 2) then an aborted one (offsets 3 ..
    3 + ABORTED - 1, one batch each, marker after them in the active segment); wait until the
    aborted data's first segments are tiered and deleted locally. Returns (committed values,
    aborted values, the ABORT marker's offset)."""
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    for f in admin.create_topics([NewTopic(topic, 1, 1, config={
            "remote.storage.enable": "true", "segment.bytes": "1024", "local.retention.bytes": "1",
            "retention.ms": "-1"})]).values():
        f.result(WAIT_S)
    p = Producer({"bootstrap.servers": node.bootstrap, "transactional.id": f"ra-{uuid.uuid4().hex[:8]}",
                  "transaction.timeout.ms": 60_000, "linger.ms": 0})
    p.init_transactions(WAIT_S)
    committed = [f"c-{j}" for j in range(2)]
    aborted = [f"a-{j}-{PAD}" for j in range(ABORTED)]
    for values, commit in ((committed, True), (aborted, False)):
        p.begin_transaction()
        for v in values:
            p.produce(topic, value=v.encode(), partition=0)
            p.flush(WAIT_S)  # one batch each, so the aborted data spans segments
        (p.commit_transaction if commit else p.abort_transaction)(WAIT_S)
    p.flush(WAIT_S)
    marker = 3 + ABORTED
    assert _end_offset(node.url, topic) == marker + 1
    wait_for(lambda: _local_log_start(node.url, topic) > 4, WAIT_S, "aborted data tiered and deleted locally")
    return committed, aborted, marker


def _assert_marker_not_tiered(node, topic: str, marker: int) -> None:
    """The case under test: no `.txnindex` object, the marker above the remote tier's end, and
    the tiered segments list the transaction in their manifest entries."""
    m = _manifest(node.remote, topic)
    assert m.end_offset is not None and m.end_offset < marker
    assert not any(s.txn_index_bytes for s in m.copy_finished)
    assert any(s.later_aborts and s.later_aborts[0].last_offset == marker for s in m.copy_finished)


def _http_values(url: str, topic: str, offset: int, isolation: str) -> list[str]:
    r = httpx.get(f"{url}/topics/{topic}/partitions/0/records",
                  params={"offset": offset, "timeout": 0, "max_bytes": 1 << 20, "isolation": isolation},
                  headers={"Accept": BINARY}, timeout=30)
    assert r.status_code == 200, r.text
    return [base64.b64decode(rec["value"]).decode() for rec in r.json()]


def _kafka_values(bootstrap: str, topic: str, isolation: str, end: int) -> list[str]:
    """Every value a consumer with `isolation` gets from offset 0 until its position reaches `end`
    (aborted batches and markers are skipped but still move the position)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4().hex[:6]}",
                  "isolation.level": isolation, "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got: list[str] = []

        def done() -> bool:
            m = c.poll(0.5)
            if m is not None and not m.error():
                got.append(m.value().decode())
            return c.position([TopicPartition(topic, 0)])[0].offset >= end

        wait_for(done, WAIT_S, f"a {isolation} consumer at offset {end}", interval_s=0)
        return got
    finally:
        c.close()


def test_kafka_and_http_below_the_local_log_start_leave_out_a_transaction_aborted_in_an_untiered_segment(node):
    topic = "abort-kafka-http"
    committed, aborted, marker = _tiered_abort(node, topic)
    _assert_marker_not_tiered(node, topic, marker)
    local_start = _local_log_start(node.url, topic)
    assert 3 < local_start <= marker

    assert _kafka_values(node.bootstrap, topic, "read_committed", marker + 1) == committed
    uncommitted = _kafka_values(node.bootstrap, topic, "read_uncommitted", marker + 1)
    assert uncommitted == committed + aborted

    # Over HTTP from the remote tier: from the start, and from inside the aborted transaction.
    for offset in range(0, local_start):
        got = _http_values(node.url, topic, offset, "read_committed")
        assert not [v for v in got if v.startswith("a-")], offset
    assert _http_values(node.url, topic, 0, "read_committed")[:2] == committed
    assert _http_values(node.url, topic, 3, "read_uncommitted")[0] == aborted[0]
    _assert_marker_not_tiered(node, topic, marker)  # still the case the reads above ran against


@pytest.fixture(scope="module")
def spark():
    session = remote_session(None, app_name="lakelog-remote-aborted-marker-test", master="local[2]")
    yield session
    session.stop()


def _rows(df) -> list[str]:
    return [bytes(r["value"]).decode() for r in df.orderBy("offset").select("value").collect()]


@pytest.mark.spark
def test_spark_remote_read_leaves_out_a_transaction_aborted_in_an_untiered_segment(node, spark):
    topic = "abort-spark"
    committed, aborted, marker = _tiered_abort(node, topic)
    _assert_marker_not_tiered(node, topic, marker)
    end = _manifest(node.remote, topic).end_offset

    def read(fmt: str, **options: str) -> list[str]:
        reader = spark.read.format(fmt).option("remote", node.remote).option("topic", topic) \
            .option("endingOffset", end)
        for k, v in options.items():
            reader = reader.option(k, v)
        return _rows(reader.load())

    tiered_aborted = aborted[:end - 2]  # offsets 3 .. end
    # Both readers: the Python one, and the JVM one (`lakelog` when its jar is built), which reads
    # the manifest entries' later_aborts itself.
    assert jvm_source_loaded(spark), "the JVM reader's jar is not built (make jvm)"
    for fmt in ("lakelog_python", "lakelog"):
        assert read(fmt) == committed, fmt
        assert read(fmt, isolation="read_uncommitted") == committed + tiered_aborted, fmt
        assert read(fmt, startingOffset="4") == [], fmt  # a start inside the transaction
        assert spark.read.format(fmt).option("remote", node.remote).option("topic", topic) \
            .option("endingOffset", end).load().count() == len(committed), fmt