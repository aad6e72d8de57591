"""`count()` pushed into the JVM `lakelog` data source (spark_log/jvm/.../CountReader.java): a
segment whose manifest entry holds a record count, wanted whole, is counted without reading it;
every other segment (an entry from before the field existed, one cut by the log start offset or
an offset or timestamp bound) and the hot tail are read and counted. The pushed count must equal
what a full read returns, on a topic with transactions and their markers, after key compaction,
and with older manifest entries; on S3 the counted segments are not even fetched."""

from __future__ import annotations

import dataclasses
import random

import pytest

from lakelog.compaction.remote import compact_partition
from lakelog.infra.config import LogConfig
from lakelog.logstore.log import PartitionLog
from lakelog.logstore.record_batch import Record, build_batch
from lakelog.spark_log.jvm_source import PYTHON_SOURCE_NAME
from lakelog.tiering.manager import RemoteTier
from lakelog.tiering.config import TieringConfig
from lakelog.tiering import manifest_codec
from lakelog.tiering.fs_store import FileSystemStore
from lakelog.tiering.layout import manifest_key
from lakelog.tiering.remote_scan import load_manifest
from tests.support.spark_jvm import copy_to_s3, jvm_session, lists

pytestmark = pytest.mark.spark
TOPIC = "jvm-count"
PARTITIONS = 2
TS0 = 1_700_000_000_000


@pytest.fixture(scope="module")
def spark(spark_s3):
    yield from jvm_session("s3://lakelog-jvm-count/x", "lakelog-jvm-count-test")


def build_topic(root, *, keys: int = 1000) -> FileSystemStore:
    """PARTITIONS partitions of keyed records in segments of ~6 KB, with a transaction (and its
    marker, a control batch) every 13 batches, uploaded to a filesystem store at root/remote."""
    store = FileSystemStore(root / "remote")
    tier = RemoteTier(store, TieringConfig({"remote.log.copy.max.segments.per.round": 100_000,
                                            "remote.segment.delete.delay.ms": 0}))
    for p in range(PARTITIONS):
        rng = random.Random(30 + p)
        log = PartitionLog(root / "log" / f"{TOPIC}-{p}", LogConfig({"segment.bytes": 6000, "index.interval.bytes": 512,
                                                                     "retention.ms": -1, "cleanup.policy": "compact"}))
        offset = 0
        for i in range(150):
            n = rng.randint(1, 4)
            recs = [Record(offset + r, TS0 + i * 1000 + r, f"key-{rng.randrange(keys)}".encode(),
                           None if rng.random() < 0.05 else rng.randbytes(rng.randrange(10, 60))) for r in range(n)]
            kw = {}
            if i % 13 == 6:
                kw = dict(producer_id=9000 + i, producer_epoch=0, base_sequence=0, is_transactional=True)
            log.append_as_follower(build_batch(recs, base_offset=offset, partition_leader_epoch=1, **kw))
            offset += n
            if kw:
                marker = Record(offset, TS0 + i * 1000 + 999, b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00")
                log.append_as_follower(build_batch([marker], base_offset=offset, producer_id=9000 + i, producer_epoch=0,
                                                   is_transactional=True, is_control=True, partition_leader_epoch=1))
                offset += 1
        log.roll()
        tier.partition(TOPIC, p).copy_segments(log, 1, log.log_end_offset)
        log.close()
    return store


def _df(spark, url: str, fmt: str = "lakelog", **options):
    """read_uncommitted unless `isolation` is given: the topic's aborted transactions are counted
    (test_the_pushed_count_leaves_aborted_transactions_out reads it read_committed)."""
    r = spark.read.format(fmt).option("remote", url).option("topic", TOPIC).option("isolation", "read_uncommitted")
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def _pushed(df) -> bool:
    return "count pushed" in df._jdf.queryExecution().executedPlan().toString()


def counts(spark, url: str, where: str | None = None, **options) -> tuple[int, int, int]:
    """(the pushed count, the JVM reader's count reading every byte, the reference's row count)."""
    def q(df):
        return df.where(where) if where else df
    pushed = q(_df(spark, url, **options)).count()
    read = q(_df(spark, url, countFromManifest="false", **options)).count()
    ref = len(q(_df(spark, url, PYTHON_SOURCE_NAME, **options)).select("offset").collect())
    return pushed, read, ref


def set_record_counts(store, partition: int, fn) -> None:
    """Rewrite a partition's manifest with each entry's record_count replaced by fn(entry)."""
    m = load_manifest(store, TOPIC, partition)
    segs = tuple(dataclasses.replace(s, record_count=fn(s)) for s in m.segments)
    store.put(manifest_key(TOPIC, partition), manifest_codec.encode(m.replace(segments=segs)))


@pytest.fixture(scope="module")
def topic(tmp_path_factory):
    root = tmp_path_factory.mktemp("jvm-count")
    return build_topic(root), (root / "remote").as_uri()


def test_the_pushed_count_is_the_count_of_a_full_read(spark, topic):
    store, url = topic
    entries = [s for p in range(PARTITIONS) for s in load_manifest(store, TOPIC, p).copy_finished]
    assert len(entries) >= 6 and all(s.record_count is not None for s in entries)
    pushed, read, ref = counts(spark, url)
    assert pushed == read == ref
    assert ref < sum(s.end_offset - s.base_offset + 1 for s in entries)  # the markers are not rows
    assert _pushed(_df(spark, url).groupBy().count())
    assert not _pushed(_df(spark, url, countFromManifest="false").groupBy().count())
    # SQL's COUNT(*) and COUNT(offset) are pushed too; a filter Spark evaluates after the scan is not
    _df(spark, url).createOrReplaceTempView("jvm_count_v")
    assert spark.sql("SELECT COUNT(*) FROM jvm_count_v").collect()[0][0] == ref
    assert spark.sql("SELECT COUNT(offset) FROM jvm_count_v").collect()[0][0] == ref
    assert _pushed(spark.sql("SELECT COUNT(offset) FROM jvm_count_v"))
    assert not _pushed(spark.sql("SELECT COUNT(key) FROM jvm_count_v"))  # key may be null: not pushed
    assert spark.sql("SELECT COUNT(key) FROM jvm_count_v").collect()[0][0] == \
        len(_df(spark, url, PYTHON_SOURCE_NAME).where("key IS NOT NULL").select("offset").collect())
    # bounds given as options cut segments: those are read, the rest counted
    first = entries[0]
    cut = {"startingOffset": str(first.base_offset + 3), "endingOffset": str(entries[3].end_offset - 2)}
    pushed, read, ref = counts(spark, url, **cut)
    assert pushed == read == ref and 0 < ref
    pushed, read, ref = counts(spark, url, startingTimestamp=str(TS0 + 40_000))
    assert pushed == read == ref and 0 < ref
    assert counts(spark, url, partitions="1")[0] == counts(spark, url, partitions="1")[2]


def test_the_pushed_count_leaves_aborted_transactions_out(spark, topic):
    """read_committed (the default): a segment whose aborted transactions the manifest's `.txnindex`
    lists is read, not counted from its record count (which counts aborted records too)."""
    store, url = topic
    entries = [s for p in range(PARTITIONS) for s in load_manifest(store, TOPIC, p).copy_finished]
    assert any(s.txn_index_bytes for s in entries)
    pushed, read, ref = counts(spark, url, isolation="read_committed")
    assert pushed == read == ref and 0 < ref < counts(spark, url)[2]
    rows = _df(spark, url, isolation="read_committed").select("producer_id").collect()
    assert len(rows) == ref and not any(r["producer_id"] >= 9000 for r in rows)
    pushed, read, ref = counts(spark, url, isolation="read_committed", startingOffset="20", partitions="1")
    assert pushed == read == ref and 0 < ref


@pytest.mark.parametrize("where, pushed", [
    ("partition = 1", True), ("partition IN (0, 1)", True), ("offset >= 40", True),
    ("partition = 0 AND offset BETWEEN 17 AND 301", True), ("offset > 5 AND offset < 120", True),
    ("partition = 1 AND offset > 9223372036854775806", True), ("offset IN (3, 50, 100)", False),
    ("timestamp >= TIMESTAMP_MILLIS(1700000040000)", False), ("partition >= 1", False),
    ("offset > 10 OR partition = 0", False)])
def test_partition_and_offset_filters_are_counted_exactly(spark, topic, where, pushed):
    """Filters the reader applies exactly (offset bounds, partition = / IN) stay pushed with the
    count; any other filter is evaluated by Spark after the scan, and the count is not pushed."""
    _, url = topic
    assert len(set(counts(spark, url, where))) == 1
    assert _pushed(_df(spark, url).where(where).groupBy().count()) == pushed
    # the rows themselves: filters not evaluated again by Spark must still select exactly
    rows = sorted(tuple(r) for r in _df(spark, url).where(where).select("partition", "offset").collect())
    ref = sorted(tuple(r) for r in _df(spark, url, PYTHON_SOURCE_NAME).where(where).select("partition", "offset").collect())
    assert rows == ref


def test_older_entries_and_a_log_start_offset_inside_a_segment_are_read(spark, tmp_path):
    store = build_topic(tmp_path)
    url = (tmp_path / "remote").as_uri()
    full = counts(spark, url)[2]
    # every other entry as written before record_count existed
    set_record_counts(store, 0, lambda s: None if int(s.segment_id, 16) % 2 else s.record_count)
    set_record_counts(store, 1, lambda s: None)
    assert counts(spark, url) == (full, full, full)
    # a wrong count in an entry shows: the pushed count trusts the manifest (as Parquet its footers)
    set_record_counts(store, 1, lambda s: 0)
    pushed, read, _ = counts(spark, url)
    assert read == full and pushed < full
    set_record_counts(store, 1, lambda s: None)
    # the log start offset inside the first segment: that segment is read from there
    m = load_manifest(store, TOPIC, 0)
    first = m.copy_finished[0]
    store.put(manifest_key(TOPIC, 0), manifest_codec.encode(m.replace(log_start_offset=first.base_offset + 2)))
    pushed, read, ref = counts(spark, url)
    assert pushed == read == ref and ref < full


def test_after_compaction_the_count_is_of_the_records_present(spark, tmp_path):
    store = build_topic(tmp_path, keys=40)
    url = (tmp_path / "remote").as_uri()
    before = counts(spark, url)[2]
    cfg = LogConfig({"cleanup.policy": "compact", "segment.bytes": 20_000, "index.interval.bytes": 512,
                     "delete.retention.ms": 86_400_000, "min.cleanable.dirty.ratio": 0.0})
    for p in range(PARTITIONS):
        report = compact_partition(store, TOPIC, p, cfg, owner="test", now_ms=TS0 + 10**9, delete_delay_ms=0)
        assert report.action == "compacted", report
    entries = [s for p in range(PARTITIONS) for s in load_manifest(store, TOPIC, p).copy_finished]
    assert all(s.record_count is not None for s in entries)
    pushed, read, ref = counts(spark, url)
    assert pushed == read == ref and ref < before
    assert ref < sum(s.end_offset - s.base_offset + 1 for s in entries)  # offsets arithmetic would be wrong


def test_on_s3_counted_segments_are_not_fetched(spark, spark_s3, topic):
    store, _ = topic
    _, url = copy_to_s3(spark_s3, store)
    ref = counts(spark, url)[2]
    spark_s3.requests()
    assert _df(spark, url).count() == ref
    asked = spark_s3.requests()
    # the planning's LIST and one GET per manifest: nothing else, no HEAD
    assert "GET .log" not in asked and asked.get("GET .json") == PARTITIONS and lists(asked) == 1
    assert "HEAD" not in asked, asked
