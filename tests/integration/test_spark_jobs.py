"""The Spark side end to end on local Spark: the jobs (compaction, retention, rebuild-index,
sync-tables), the `lakelog` data source and SQL, against the filesystem store, moto's S3 server
through S3A, and a real node serving the compacted partition over HTTP."""

from __future__ import annotations

import base64
import threading
import uuid

import httpx
import pytest

from lakelog.spark_log.jobs import run_job
from lakelog.tiering.remote_scan import load_manifest
from lakelog.spark_log.session import remote_session
from lakelog.spark_log.tables import register_topics
from tests.integration.test_remote_compaction import TOPIC, build_remote, reference, remote_records
from tests.support.faults import wait_for
from tests.support.nodes import start_node
from lakelog.logstore.segment import INDEX_SUFFIX, TIME_INDEX_SUFFIX
from lakelog.tiering.layout import segment_key
from lakelog.tiering.s3_store import S3Store
from lakelog.tiering.topics import TopicDescriptor, write_topic_descriptor

pytestmark = pytest.mark.spark
BINARY = "application/vnd.kafka.binary.v2+json"
COMPACT = {"cleanup.policy": "compact", "segment.bytes": "12000", "index.interval.bytes": "512"}


@pytest.fixture(scope="module")
def s3(spark_s3):
    return spark_s3  # shared by the session: see tests/integration/conftest.py


@pytest.fixture(scope="module")
def spark(s3):
    session = remote_session("s3://lakelog-spark/x", app_name="lakelog-jobs-test")
    yield session
    session.stop()


def fs_url(tmp_path) -> str:
    return (tmp_path / "remote").as_uri()


def read_source(spark, remote: str, topic: str = TOPIC, **options):
    reader = spark.read.format("lakelog").option("remote", remote).option("topic", topic)
    for k, v in options.items():
        reader = reader.option(k, v)
    return [(r["offset"], r["timestamp_ms"], bytes(r["key"]) if r["key"] is not None else None,
             bytes(r["value"]) if r["value"] is not None else None)
            for r in reader.load().selectExpr("offset", "unix_millis(timestamp) AS timestamp_ms", "key", "value")
            .orderBy("offset").collect()]


def test_compaction_job_equals_the_reference_and_the_data_source_reads_it(tmp_path, spark):
    store, _, _, _ = build_remote(tmp_path)
    write_topic_descriptor(store, TopicDescriptor(TOPIC, None, 1, COMPACT))
    remote = fs_url(tmp_path)
    before = remote_records(store)
    assert read_source(spark, remote) == before
    end = load_manifest(store, TOPIC, 0).end_offset

    summary = run_job(spark, "compaction", remote, delete_delay_ms=0)
    assert summary.totals["compacted"] == 1, summary
    expected = reference(before, end + 1, drop_tombstones=False)
    assert remote_records(store) == expected
    assert read_source(spark, remote) == expected  # original offsets and timestamps kept
    # Pruning by options: one partition's offset range only.
    middle = expected[len(expected) // 2][0]
    assert read_source(spark, remote, startingOffset=middle, endingOffset=middle + 30) == \
        [r for r in expected if middle <= r[0] <= middle + 30]

    again = run_job(spark, "compaction", remote, delete_delay_ms=0)
    assert again.totals["compacted"] == 0 and again.rows[0]["reason"] == "nothing dirty"


def test_data_source_rows_are_the_reference_decoders_and_a_corrupt_object_fails_the_query(tmp_path, spark):
    """Spark's rows (decoded natively on the executors) equal the pure-Python reference's, column
    for column; a narrower `.schema(...)` decodes only its columns; a damaged object fails the query
    with RemoteCorruptionError naming it, never returning rows."""
    import pyarrow as pa

    from lakelog.logstore.record_arrow import COLUMNS
    from lakelog.tiering.remote_scan import iter_segment_arrow

    store, _, _, _ = build_remote(tmp_path)
    remote = fs_url(tmp_path)
    m = load_manifest(store, TOPIC, 0)
    parts = [cols for seg in m.copy_finished
             for _, cols in iter_segment_arrow(store, TOPIC, 0, seg, from_offset=m.log_start_offset, native=False)]
    expected = pa.Table.from_batches([pa.RecordBatch.from_pydict(c) for c in parts]).to_pylist()
    assert len(expected) > 300
    df = spark.read.format("lakelog").option("remote", remote).option("topic", TOPIC).load()
    cols = [c for c in COLUMNS if c != "timestamp"]
    rows = [r.asDict(recursive=True) for r in
            df.selectExpr("topic", "partition", "unix_micros(timestamp) AS ts_us", *cols).orderBy("offset").collect()]

    def plain(v):
        if isinstance(v, (bytes, bytearray)):
            return bytes(v)
        if isinstance(v, list):
            return [{k: plain(x) for k, x in h.items()} for h in v]
        return v

    assert [{c: plain(r[c]) for c in cols} for r in rows] == [{c: e[c] for c in cols} for e in expected]
    assert [r["ts_us"] for r in rows] == [int(e["timestamp"].timestamp() * 1_000_000) for e in expected]
    assert {(r["topic"], r["partition"]) for r in rows} == {(TOPIC, 0)}
    narrow = spark.read.format("lakelog").schema("value BINARY, offset BIGINT").option("remote", remote) \
        .option("topic", TOPIC).load()
    assert narrow.columns == ["value", "offset"]
    assert [(bytes(r["value"]) if r["value"] is not None else None, r["offset"])
            for r in narrow.orderBy("offset").collect()] == [(e["value"], e["offset"]) for e in expected]
    assert narrow.count() == len(expected)

    seg = m.copy_finished[len(m.copy_finished) // 2]
    key = f"{TOPIC}-0/{seg.base_offset:020d}-{seg.segment_id}.log"
    data = bytearray(store.get_range(key, 0, seg.size_in_bytes))
    data[len(data) // 2] ^= 0x01
    store.put(key, bytes(data))
    # (a plain count() is answered from the manifests' record counts without reading, as Parquet's
    # from its footers; reading every byte, it fails too: docs/spark.md)
    counted = spark.read.format("lakelog").option("remote", remote).option("topic", TOPIC) \
        .option("countFromManifest", "false").load()
    for query in (lambda: df.select("offset").collect(), counted.count):
        with pytest.raises(Exception) as failed:
            query()
        assert "RemoteCorruptionError" in str(failed.value) and key in str(failed.value)


def test_rebuild_index_restores_indexes_byte_for_byte_and_writes_the_remote_index_table(tmp_path, spark):
    store, _, _, _ = build_remote(tmp_path, log_cfg={"cleanup.policy": "delete"})
    write_topic_descriptor(store, TopicDescriptor(TOPIC, None, 1, {"index.interval.bytes": "512"}))
    remote = fs_url(tmp_path)
    m = load_manifest(store, TOPIC, 0)
    segs = m.copy_finished
    originals = {}
    for s in segs:
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            key = segment_key(TOPIC, 0, s.base_offset, s.segment_id, suffix)
            originals[key] = store.get(key)[0]
    lost = segment_key(TOPIC, 0, segs[1].base_offset, segs[1].segment_id, INDEX_SUFFIX)
    damaged = segment_key(TOPIC, 0, segs[2].base_offset, segs[2].segment_id, TIME_INDEX_SUFFIX)
    store.delete(lost)
    bad = bytearray(originals[damaged])
    bad[5] ^= 0xFF
    store.put(damaged, bytes(bad))

    summary = run_job(spark, "rebuild-index", remote)
    assert summary.totals == {"segments": len(segs), "ok": len(segs) - 2, "rebuilt": 2}, summary.totals
    for key, data in originals.items():
        assert store.get(key)[0] == data, key
    table = spark.read.format("delta").load(f"{remote}/tables/_remote_index").orderBy("base_offset").collect()
    assert [(r["segment_id"], r["base_offset"], r["end_offset"], r["size_in_bytes"]) for r in table] == \
        [(s.segment_id, s.base_offset, s.end_offset, s.size_in_bytes) for s in segs]
    assert all(r["min_timestamp"] <= r["max_timestamp"] for r in table)

    # Retention through Spark: retention.bytes keeps what fits, the log start moves, the source follows.
    keep = sum(s.size_in_bytes for s in segs[-3:])
    ret = run_job(spark, "retention", remote, overrides={"retention.bytes": str(keep), "retention.ms": "-1"}, delete_delay_ms=0)
    assert ret.totals["segments_expired"] == len(segs) - 3
    after = load_manifest(store, TOPIC, 0)
    assert after.log_start_offset == segs[-3].base_offset
    assert read_source(spark, remote)[0][0] == segs[-3].base_offset


def test_sync_tables_over_s3a_is_idempotent_and_sql_sees_the_topic(tmp_path, spark, s3):
    bucket = f"lakelog-{uuid.uuid4().hex[:10]}"
    s3.create_bucket(bucket)
    remote = f"s3://{bucket}/tier"
    _, _, log, written = build_remote(tmp_path)  # local log; now tier it into S3
    store = S3Store(bucket, "tier")
    from lakelog.tiering.manager import RemoteTier
    from lakelog.tiering.config import TieringConfig

    RemoteTier(store, TieringConfig({"remote.log.copy.max.segments.per.round": 100_000})) \
        .partition(TOPIC, 0).copy_segments(log, 1, log.log_end_offset)
    write_topic_descriptor(store, TopicDescriptor(TOPIC, None, 1, COMPACT))
    tiered = remote_records(store)
    assert tiered and tiered == [w for w in written if w[0] <= tiered[-1][0]]

    first = run_job(spark, "sync-tables", remote)
    assert first.totals["rows_added"] == len(tiered)
    second = run_job(spark, "sync-tables", remote)
    assert second.totals["rows_added"] == 0
    rows = spark.read.format("delta").load(f"s3a://{bucket}/tier/tables/{TOPIC}").orderBy("offset").collect()
    assert [(r["offset"], bytes(r["key"]), None if r["value"] is None else bytes(r["value"])) for r in rows] == \
        [(o, k, v) for o, _, k, v in tiered]
    assert {r["partition"] for r in rows} == {0} and all(r["date"] is not None for r in rows)

    assert set(register_topics(spark, remote)) >= {TOPIC, TOPIC + "_table", TOPIC + "_latest"}
    assert spark.sql(f"SELECT count(*) AS n FROM lakelog.{TOPIC}_table").collect()[0]["n"] == len(tiered)
    # Without nodes, lakelog.<topic> is the remote tier: here the same records.
    assert spark.sql(f"SELECT count(*) AS n FROM lakelog.{TOPIC}").collect()[0]["n"] == len(tiered)
    latest = {bytes(r["key"]): bytes(r["value"]) for r in spark.sql(f"SELECT key, value FROM lakelog.{TOPIC}_latest").collect()}
    expected = {}
    for _, _, k, v in tiered:
        expected[k] = v
    assert latest == {k: v for k, v in expected.items() if v is not None}

    # More records tiered (a newer value, a tombstone, a new key): the next sync appends them and
    # MERGEs their latest per key into <topic>_latest instead of rewriting it.
    from delta.tables import DeltaTable

    from lakelog.logstore.record_batch import Record, build_batch

    live = sorted(k for k, v in expected.items() if v is not None)
    more = [(live[0], b"newer"), (live[1], None), (b"key-new", b"fresh"), (live[0], b"newest")]
    log.append_as_leader(build_batch([Record(i, 9_000_000 + i, k, v) for i, (k, v) in enumerate(more)]), 1)
    log.roll()
    RemoteTier(store, TieringConfig({"remote.log.copy.max.segments.per.round": 100_000})) \
        .partition(TOPIC, 0).copy_segments(log, 1, log.log_end_offset)
    now_tiered = remote_records(store)
    third = run_job(spark, "sync-tables", remote)
    assert third.totals["rows_added"] == len(now_tiered) - len(tiered) >= len(more)
    latest_path = f"s3a://{bucket}/tier/tables/{TOPIC}_latest"
    assert DeltaTable.forPath(spark, latest_path).history(1).collect()[0]["operation"] == "MERGE"
    for _, _, k, v in now_tiered:
        expected[k] = v
    latest = {bytes(r["key"]): bytes(r["value"])
              for r in spark.read.format("delta").load(latest_path).select("key", "value").collect()}
    assert latest == {k: v for k, v in expected.items() if v is not None}
    assert latest[live[0]] == b"newest" and live[1] not in latest and latest[b"key-new"] == b"fresh"


def test_compaction_rebuild_index_and_retention_on_the_s3_api(tmp_path, spark, s3):
    """The three maintenance jobs against moto's S3 server (S3A, conditional PUTs on the manifest),
    not only the filesystem store."""
    bucket = f"lakelog-{uuid.uuid4().hex[:10]}"
    s3.create_bucket(bucket)
    remote = f"s3://{bucket}/tier"
    _, _, log, _ = build_remote(tmp_path)
    store = S3Store(bucket, "tier")
    from lakelog.logstore.record_batch import Record, build_batch
    from lakelog.tiering.manager import RemoteTier
    from lakelog.tiering.config import TieringConfig

    tier = RemoteTier(store, TieringConfig({"remote.log.copy.max.segments.per.round": 100_000}))
    tier.partition(TOPIC, 0).copy_segments(log, 1, log.log_end_offset)
    write_topic_descriptor(store, TopicDescriptor(TOPIC, None, 1, COMPACT))
    before = remote_records(store)
    end = load_manifest(store, TOPIC, 0).end_offset

    summary = run_job(spark, "compaction", remote, delete_delay_ms=0)
    assert summary.totals["compacted"] == 1, summary
    compacted = remote_records(store)
    assert compacted == reference(before, end + 1, drop_tombstones=False)
    assert read_source(spark, remote) == compacted

    # Compaction merges its small replacements up to segment.bytes: tier a few more segments so that
    # rebuild-index and retention below have several to work on.
    for i in range(3):
        log.append_as_leader(build_batch([Record(0, 2_000_000 + i, f"late-{i}".encode(), b"v" * 100)]), 1)
        log.roll()
    tier.partition(TOPIC, 0).copy_segments(log, 1, log.log_end_offset)
    compacted = remote_records(store)
    assert [r[0] for r in compacted[-3:]] == list(range(log.log_end_offset - 3, log.log_end_offset))

    segs = load_manifest(store, TOPIC, 0).copy_finished
    assert len(segs) >= 2, segs
    lost = segment_key(TOPIC, 0, segs[0].base_offset, segs[0].segment_id, INDEX_SUFFIX)
    original = store.get(lost)[0]
    store.delete(lost)
    rebuilt = run_job(spark, "rebuild-index", remote)
    assert rebuilt.totals == {"segments": len(segs), "ok": len(segs) - 1, "rebuilt": 1}, rebuilt.totals
    assert store.get(lost)[0] == original

    # Retention applies to a topic whose cleanup.policy deletes: the topic's config is changed to that.
    write_topic_descriptor(store, TopicDescriptor(TOPIC, None, 1, {**COMPACT, "cleanup.policy": "delete"}))
    keep = segs[-1].size_in_bytes
    ret = run_job(spark, "retention", remote, overrides={"retention.bytes": str(keep), "retention.ms": "-1"},
                  delete_delay_ms=0)
    assert ret.totals["segments_expired"] == len(segs) - 1, ret.totals
    assert load_manifest(store, TOPIC, 0).log_start_offset == segs[-1].base_offset
    assert read_source(spark, remote) == [r for r in compacted if r[0] >= segs[-1].base_offset]


# ---------------------------------------------------------------------------------------------
# with a node: compaction seen over HTTP, jobs racing producers and tiering


TIER_NODE = {"remote.log.manager.task.interval.ms": "100", "remote.segment.delete.delay.ms": "0",
             "remote.log.metadata.max.age.ms": "0"}
TOPIC_CFG = {"remote.storage.enable": "true", "cleanup.policy": "compact", "segment.bytes": "4096",
             "index.interval.bytes": "512", "local.retention.bytes": "1", "min.cleanable.dirty.ratio": "0.01"}


def _produce(url, topic, records):
    body = {"records": [{"key": base64.b64encode(k.encode()).decode(),
                         "value": None if v is None else base64.b64encode(v.encode()).decode()} for k, v in records]}
    r = httpx.post(f"{url}/topics/{topic}/partitions/0?acks=all", json=body, timeout=30,
                   headers={"Content-Type": BINARY})
    assert r.status_code == 200, r.text
    return [o["offset"] for o in r.json()["offsets"]]


def _consume(url, topic):
    out, offset = [], 0
    while True:
        r = httpx.get(f"{url}/topics/{topic}/partitions/0/records", timeout=30,
                      params={"offset": offset, "timeout": 0, "max_bytes": 65536}, headers={"Accept": BINARY})
        assert r.status_code == 200, r.text
        recs = r.json()
        if not recs:
            return out
        for rec in recs:
            out.append((rec["offset"], base64.b64decode(rec["key"]).decode(),
                        None if rec["value"] is None else base64.b64decode(rec["value"]).decode()))
        offset = recs[-1]["offset"] + 1


def test_jobs_while_producing_and_the_compacted_log_over_http(tmp_path, spark):
    remote = (tmp_path / "remote").as_uri()
    node = start_node(tmp_path, **TIER_NODE, **{"remote.storage.url": remote})
    try:
        url, topic = node.url, "balances"
        cid = httpx.get(f"{url}/v3/clusters", timeout=10).json()["data"][0]["cluster_id"]
        r = httpx.post(f"{url}/v3/clusters/{cid}/topics", timeout=30, json={
            "topic_name": topic, "partitions_count": 1,
            "configs": [{"name": k, "value": v} for k, v in TOPIC_CFG.items()]})
        assert r.status_code == 201, r.text
        sent: list[tuple[int, str, str | None]] = []

        def produce_round(tag: str, n: int) -> None:
            for i in range(0, n, 25):
                recs = [(f"acct-{(i + j) % 37}", None if (i + j) % 29 == 0 else f"{tag}-{i + j}") for j in range(25)]
                sent.extend((o, k, v) for o, (k, v) in zip(_produce(url, topic, recs), recs))

        produce_round("a", 600)
        wait_for(lambda: load_manifest_end(tmp_path, topic) >= 400, what="segments tiered")
        # Jobs run while a producer keeps writing and the node keeps tiering.
        writer = threading.Thread(target=produce_round, args=("b", 400))
        writer.start()
        try:
            comp = run_job(spark, "compaction", remote, delete_delay_ms=0)
            sync = run_job(spark, "sync-tables", remote)
        finally:
            writer.join(60)
        assert comp.totals["compacted"] == 1, comp.rows
        assert sync.totals["rows_added"] > 0

        got = _consume(url, topic)
        checkpoint = load_manifest_of(tmp_path, topic).cleaner_checkpoint
        assert checkpoint is not None and checkpoint > 0
        # Below the checkpoint: the latest record per key (tombstones kept: delete.retention.ms).
        expected = [(o, k, v) for o, _, k, v in reference([(o, 0, k, v) for o, k, v in sent], checkpoint,
                                                          drop_tombstones=False)]
        assert got == expected, "the compacted log over HTTP"
        assert len(got) < len(sent)
        # Nothing acknowledged is lost: every key's latest value is there.
        latest = {}
        for o, k, v in sent:
            latest[k] = (o, v)
        assert latest == {k: (o, v) for o, k, v in got if latest[k][0] == o}

        # The table holds exactly what was produced (up to what was tiered when sync read it).
        register_topics(spark, remote)
        rows = spark.sql(f"SELECT offset, CAST(key AS STRING) k, CAST(value AS STRING) v FROM lakelog.{topic}_table "
                         f"ORDER BY offset").collect()
        synced = [(r["offset"], r["k"], r["v"]) for r in rows]
        by_offset = {o: (o, k, v) for o, k, v in sent}
        assert synced and all(by_offset[row[0]] == row for row in synced)
        assert len({row[0] for row in synced}) == len(synced)  # no duplicates
    finally:
        node.stop()


def load_manifest_of(tmp_path, topic):
    from lakelog.tiering.fs_store import FileSystemStore

    return load_manifest(FileSystemStore(tmp_path / "remote"), topic, 0)


def load_manifest_end(tmp_path, topic) -> int:
    end = load_manifest_of(tmp_path, topic).end_offset
    return -1 if end is None else end


def test_streaming_reader_reads_each_tiered_record_once(tmp_path, spark):
    from lakelog.logstore.record_batch import Record, build_batch
    from lakelog.tiering.manager import RemoteTier
    from lakelog.tiering.config import TieringConfig

    store, tier, log, written = build_remote(tmp_path, batches=80)
    remote = fs_url(tmp_path)
    sink, checkpoint = str(tmp_path / "sink"), str(tmp_path / "checkpoint")

    def run_once() -> None:
        stream = spark.readStream.format("lakelog").option("remote", remote).option("topic", TOPIC).load()
        (stream.selectExpr("partition", "offset", "key", "value").writeStream.format("delta")
         .option("checkpointLocation", checkpoint).trigger(once=True).start(sink).awaitTermination(120))

    run_once()
    first = remote_records(store)
    got = [(r["offset"], bytes(r["key"])) for r in spark.read.format("delta").load(sink).orderBy("offset").collect()]
    assert got == [(o, k) for o, _, k, _ in first]

    for i in range(60):  # more data reaches the remote tier
        log.append_as_leader(build_batch([Record(0, 9_000_000 + i, f"key-new-{i}".encode(), b"v")]), 1)
    log.roll()
    tier.partition(TOPIC, 0).copy_segments(log, 1, log.log_end_offset)
    run_once()
    everything = remote_records(store)
    got = [(r["offset"], bytes(r["key"])) for r in spark.read.format("delta").load(sink).orderBy("offset").collect()]
    assert len(everything) > len(first)
    assert got == [(o, k) for o, _, k, _ in everything]  # each record once, nothing skipped


def test_value_schema_turns_json_values_into_typed_columns(tmp_path, spark):
    import json as _json

    from lakelog.infra.config import LogConfig
    from lakelog.logstore.log import PartitionLog
    from lakelog.logstore.record_batch import Record, build_batch
    from lakelog.tiering.manager import RemoteTier
    from lakelog.tiering.config import TieringConfig
    from lakelog.tiering.fs_store import FileSystemStore

    log = PartitionLog(tmp_path / "log" / "payments-0", LogConfig({"segment.bytes": 1000, "retention.ms": -1}))
    sent = []

    def append(ids):
        for i in ids:
            doc = {"id": i, "amount": i * 1.5, "currency": "EUR" if i % 2 else "USD"}
            sent.append(doc)
            log.append_as_leader(build_batch([Record(0, 1_700_000_000_000 + i, f"p{i}".encode(),
                                                     _json.dumps(doc).encode())]), 1)
        log.roll()

    append(range(60))
    store = FileSystemStore(tmp_path / "remote")
    tier = RemoteTier(store, TieringConfig({"remote.log.copy.max.segments.per.round": 10_000}))
    tier.partition("payments", 0).copy_segments(log, 1, log.log_end_offset)
    write_topic_descriptor(store, TopicDescriptor("payments", None, 1,
                                                  {"value.schema": "id BIGINT, amount DOUBLE, currency STRING"}))
    remote = fs_url(tmp_path)
    assert run_job(spark, "sync-tables", remote).totals["rows_added"] == 60
    table = spark.read.format("delta").load(f"{remote}/tables/payments")
    types = dict(table.dtypes)
    assert (types["id"], types["amount"], types["currency"]) == ("bigint", "double", "string")
    got = [(r["id"], r["amount"], r["currency"]) for r in table.orderBy("offset").collect()]
    assert got == [(d["id"], d["amount"], d["currency"]) for d in sent]
    # Nothing new: a second sync adds nothing.
    assert run_job(spark, "sync-tables", remote).totals["rows_added"] == 0
    # N more records tiered: the next sync adds exactly those N, typed, and every record is there once.
    n = 25
    append(range(60, 60 + n))
    tier.partition("payments", 0).copy_segments(log, 1, log.log_end_offset)
    assert run_job(spark, "sync-tables", remote).totals["rows_added"] == n
    table = spark.read.format("delta").load(f"{remote}/tables/payments")
    rows = [(r["offset"], r["id"], r["amount"], r["currency"]) for r in table.orderBy("offset").collect()]
    assert rows == [(i, d["id"], d["amount"], d["currency"]) for i, d in enumerate(sent)]


def test_sync_tables_types_avro_values_by_schema_id_evolves_and_dead_letters(tmp_path, spark):
    import io
    import json as _json
    import struct

    import fastavro

    from lakelog.infra.config import LogConfig
    from lakelog.logstore.log import PartitionLog
    from lakelog.logstore.record_batch import Record, build_batch
    from lakelog.tiering.manager import RemoteTier
    from lakelog.tiering.config import TieringConfig
    from lakelog.tiering.fs_store import FileSystemStore

    v1 = {"type": "record", "name": "Pay", "fields": [
        {"name": "id", "type": "long"}, {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal",
                                                                     "precision": 9, "scale": 2}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "tags", "type": {"type": "array", "items": "string"}}]}
    v2 = {**v1, "fields": v1["fields"] + [{"name": "note", "type": ["null", "string"], "default": None}]}
    node = start_node(tmp_path / "registry")
    try:
        ids = []
        for schema in (v1, v2):
            r = httpx.post(f"{node.url}/subjects/pay-value/versions", json={"schema": _json.dumps(schema)}, timeout=30)
            assert r.status_code == 200, r.text
            ids.append(r.json()["id"])

        def framed(schema_id: int, schema: dict, value: dict) -> bytes:
            out = io.BytesIO()
            fastavro.schemaless_writer(out, fastavro.parse_schema(schema), value)
            return b"\x00" + struct.pack(">i", schema_id) + out.getvalue()

        import datetime
        import decimal
        log = PartitionLog(tmp_path / "log" / "pay-0", LogConfig({"segment.bytes": 100_000, "retention.ms": -1}))
        store = FileSystemStore(tmp_path / "remote")
        tier = RemoteTier(store, TieringConfig({"remote.log.copy.max.segments.per.round": 10_000}))

        def append(values: list[bytes | None]) -> None:
            for v in values:
                log.append_as_leader(build_batch([Record(0, 1_700_000_000_000, b"k", v)]), 1)
            log.roll()
            tier.partition("pay", 0).copy_segments(log, 1, log.log_end_offset)

        day = datetime.date(2024, 5, 17)
        append([framed(ids[0], v1, {"id": i, "amount": decimal.Decimal(f"{i}.25"), "day": day, "tags": ["a"] * i})
                for i in range(3)])
        write_topic_descriptor(store, TopicDescriptor("pay", None, 1, {"schema.registry.url": node.url}))
        remote = fs_url(tmp_path)
        assert run_job(spark, "sync-tables", remote).totals["rows_added"] == 3
        table = spark.read.format("delta").load(f"{remote}/tables/pay")
        types = dict(table.dtypes)
        assert (types["id"], types["amount"], types["day"], types["tags"]) == (
            "bigint", "decimal(9,2)", "date", "array<string>")

        # v2 adds a column (Delta schema merge); garbage and a truncated value go to the dead letters
        append([framed(ids[1], v2, {"id": 3, "amount": decimal.Decimal("1.00"), "day": day, "tags": [], "note": "hi"}),
                b"\x01not framed", framed(ids[0], v1, {"id": 9, "amount": decimal.Decimal("1"), "day": day,
                                                       "tags": ["x"]})[:7],
                framed(999, v1, {"id": 1, "amount": decimal.Decimal("1"), "day": day, "tags": []}), None])
        res = run_job(spark, "sync-tables", remote)
        table = spark.read.format("delta").load(f"{remote}/tables/pay")
        rows = [(r["offset"], r["id"], r["note"]) for r in table.orderBy("offset").collect()]
        errors = {r["offset"]: r["reason"] for r in spark.read.format("delta").load(f"{remote}/tables/pay_errors").collect()}
        assert rows == [(0, 0, None), (1, 1, None), (2, 2, None), (3, 3, "hi"), (7, None, None)], (rows, errors)
        assert res.totals["rows_added"] == 2  # the v2 record and the tombstone
        assert sorted(errors) == [4, 5, 6]
        assert "wire format" in errors[4] and "does not decode" in errors[5] and "unknown" in errors[6]
        # again: nothing twice, in either table
        assert run_job(spark, "sync-tables", remote).totals["rows_added"] == 0
        assert spark.read.format("delta").load(f"{remote}/tables/pay_errors").count() == 3
    finally:
        try:
            node.stop()
        finally:
            node.kill()
