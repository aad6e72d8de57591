"""Spark reads committed records only: transactions written by confluent-kafka's transactional
producer to a real node (markers through the coordinator), read back with a local Spark session
through the `lakelog` data source (the JVM reader, when its jar is built, and the Python one)
from the remote tier (aborted transactions from the segments'
`.txnindex` objects) and from the nodes' hot tail (the node's read_committed answer, up to the
last stable offset), through the `lakelog.<topic>` views, and synced into Delta by `sync-tables`.
`isolation=read_uncommitted` shows the aborted records; control records are never rows."""

from __future__ import annotations

import uuid

import httpx
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from lakelog.spark_log.jobs import run_job
from lakelog.spark_log.jvm_source import PYTHON_SOURCE_NAME, jvm_source_loaded
from lakelog.spark_log.session import remote_session
from lakelog.spark_log.tables import register_topics
from lakelog.tiering.remote_scan import load_manifest, open_remote
from tests.support.faults import wait_for
from tests.support.nodes import running_node

pytestmark = pytest.mark.spark
WAIT_S = 120
SMALL = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "2",
         "transaction.state.log.num.partitions": "2", "remote.log.manager.task.interval.ms": "100",
         "remote.segment.delete.delay.ms": "60000", "remote.log.metadata.max.age.ms": "0"}
PAD = "x" * 100


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sparkrc")
    with running_node(tmp, kafka=True, **SMALL, **{"remote.storage.url": (tmp / "remote").as_uri()}) as n:
        n.remote = (tmp / "remote").as_uri()
        yield n


@pytest.fixture(scope="module")
def spark():
    session = remote_session(None, app_name="lakelog-spark-read-committed-test", master="local[2]")
    yield session
    session.stop()


def _create(bootstrap: str, name: str, **config: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(name, 1, 1, config=config)]).values():
        f.result(WAIT_S)


def _txn_producer(bootstrap: str) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"s-{uuid.uuid4().hex[:8]}",
                  "transaction.timeout.ms": 60_000, "linger.ms": 0})
    p.init_transactions(WAIT_S)
    return p


def _transaction(p: Producer, topic: str, values: list[str], *, commit: bool | None) -> None:
    """One transaction of `values` (one batch each); committed, aborted, or (None) left open."""
    p.begin_transaction()
    for v in values:
        p.produce(topic, value=v.encode(), partition=0)
        p.flush(WAIT_S)
    if commit is True:
        p.commit_transaction(WAIT_S)
    elif commit is False:
        p.abort_transaction(WAIT_S)


def _offsets(url: str, topic: str) -> dict:
    r = httpx.get(f"{url}/topics/{topic}/partitions/0/offsets", timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def _remote_end(remote: str, topic: str) -> int:
    store = open_remote(remote)
    try:
        end = load_manifest(store, topic, 0).end_offset
    finally:
        store.close()
    return -1 if end is None else end


def _rows(df) -> list[tuple[int, str]]:
    return sorted((r["offset"], bytes(r["value"]).decode()) for r in df.select("offset", "value").collect())


def _readers(spark) -> tuple[str, ...]:
    """The readers to check: the Python one, and "lakelog" (the JVM reader when its jar is loaded)."""
    return (PYTHON_SOURCE_NAME, "lakelog") if jvm_source_loaded(spark) else (PYTHON_SOURCE_NAME,)


def _read(spark, node, topic: str, fmt: str = PYTHON_SOURCE_NAME, **options):
    reader = spark.read.format(fmt).option("remote", node.remote).option("topic", topic)
    for k, v in options.items():
        reader = reader.option(k, v)
    return _rows(reader.load())


def test_remote_tier_reads_leave_aborted_transactions_and_markers_out(node, spark, tmp_path):
    topic = "paid"
    _create(node.bootstrap, topic, **{"remote.storage.enable": "true", "segment.bytes": "1024",
                                      "local.retention.bytes": "1", "retention.ms": "-1"})
    p = _txn_producer(node.bootstrap)
    committed, aborted, offset = [], [], 0
    markers = []
    for i in range(9):  # three batches then the marker: offsets 4i .. 4i+2, marker at 4i+3
        values = [f"t{i}-{j}-{PAD}" for j in range(3)]
        _transaction(p, topic, values, commit=i % 3 != 1)
        (committed if i % 3 != 1 else aborted).extend((offset + j, v) for j, v in enumerate(values))
        markers.append(offset + 3)
        offset += 4
    last = offset - 1  # the last marker
    # Committed filler rolls segments until every marker above is in the remote tier.
    filler = iter(range(1000))

    def tiered_past_last() -> bool:
        _transaction(p, topic, [f"fill-{next(filler)}-{PAD}"], commit=True)
        return _remote_end(node.remote, topic) >= last

    wait_for(tiered_past_last, WAIT_S, "every marker tiered", interval_s=0.2)
    store = open_remote(node.remote)
    try:
        m = load_manifest(store, topic, 0)
    finally:
        store.close()
    assert any(s.txn_index_bytes for s in m.copy_finished)  # the aborts are known from the .txnindex objects

    for fmt in _readers(spark):
        assert _read(spark, node, topic, fmt, endingOffset=last) == committed, fmt
        raw = _read(spark, node, topic, fmt, endingOffset=last, isolation="read_uncommitted")
        assert raw == sorted(committed + aborted), fmt
        assert not {o for o, _ in raw} & set(markers)  # control records never become rows
        # Options are case-insensitive, and a bad isolation is refused.
        assert _read(spark, node, topic, fmt, endingOffset=last, ISOLATION="READ_COMMITTED") == committed
        with pytest.raises(Exception, match="isolation"):
            spark.read.format(fmt).option("remote", node.remote).option("topic", topic) \
                .option("isolation", "serializable").load().collect()
        # A start inside an aborted transaction (offset 5: its second batch) still leaves it out.
        assert _read(spark, node, topic, fmt, startingOffset=5, endingOffset=last) == \
            [c for c in committed if c[0] >= 5], fmt
        # count() too (the JVM reader's pushed count reads the segments that hold aborted data)
        assert spark.read.format(fmt).option("remote", node.remote).option("topic", topic) \
            .option("endingOffset", last).load().count() == len(committed), fmt

    # sync-tables adds only committed rows (through "lakelog": the JVM reader when its jar is built).
    summary = run_job(spark, "sync-tables", node.remote, topics=[topic])
    table = _rows(spark.read.format("delta").load(f"{node.remote}/tables/{topic}").where(f"offset <= {last}"))
    assert table == committed
    assert summary.totals["rows_added"] >= len(committed)
    synced = {r["offset"] for r in spark.read.format("delta").load(f"{node.remote}/tables/{topic}").collect()}
    assert not synced & ({o for o, _ in aborted} | set(markers))

    # The streaming readers too: one micro-batch of everything tiered.
    for fmt in _readers(spark):
        out = tmp_path / f"stream-{fmt}"
        q = (spark.readStream.format(fmt).option("remote", node.remote).option("topic", topic).load()
             .where(f"offset <= {last}").select("offset", "value")
             .writeStream.format("parquet").option("path", str(out / "data"))
             .option("checkpointLocation", str(out / "cp")).trigger(availableNow=True).start())
        try:
            q.awaitTermination(600)
        finally:
            q.stop()
        assert _rows(spark.read.parquet(str(out / "data"))) == committed, fmt
    p.flush(WAIT_S)


def test_hot_tail_reads_stop_at_the_lso_and_views_show_committed_records(node, spark):
    topic = "tail"
    _create(node.bootstrap, topic)
    p = _txn_producer(node.bootstrap)
    _transaction(p, topic, ["c1", "c2"], commit=True)     # 0 1, COMMIT 2
    _transaction(p, topic, ["a1", "a2", "a3"], commit=False)  # 3 4 5, ABORT 6
    _transaction(p, topic, ["c3"], commit=True)           # 7, COMMIT 8
    _transaction(p, topic, ["o1"], commit=None)           # 9, open: the LSO stays at 9
    doc = _offsets(node.url, topic)
    assert doc["end_offset"] == 10 and doc["last_stable_offset"] == 9, doc
    committed = [(0, "c1"), (1, "c2"), (7, "c3")]

    for fmt in _readers(spark):
        assert _read(spark, node, topic, fmt, nodes=node.url) == committed, fmt
        raw = _read(spark, node, topic, fmt, nodes=node.url, isolation="read_uncommitted")
        assert raw == [(0, "c1"), (1, "c2"), (3, "a1"), (4, "a2"), (5, "a3"), (7, "c3"), (9, "o1")], fmt
        # A fetch whose every batch is aborted: the read goes on past them.
        assert _read(spark, node, topic, fmt, nodes=node.url, startingOffset=3) == [(7, "c3")], fmt
    assert topic in register_topics(spark, node.remote, nodes=node.url)
    view = spark.sql(f"SELECT offset, value FROM lakelog.{topic}")
    assert _rows(view) == committed
    p.commit_transaction(WAIT_S)
    wait_for(lambda: _offsets(node.url, topic)["last_stable_offset"] == 11, WAIT_S, "the LSO after the commit")
    assert _rows(view) == committed + [(9, "o1")]  # each query reads the LSO again
    p.flush(WAIT_S)
