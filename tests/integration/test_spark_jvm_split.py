"""The JVM `lakelog` data source cuts a segment larger than the group size (`maxPartitionBytes`)
across tasks (spark_log/jvm/.../Planner.java `cut`): parts with consecutive offset ranges, each
read from the offset index's floor entry of its first offset up to the index entry past its last
offset's batch. Checked on the filesystem store and on moto's S3 server through S3A: the rows
(offsets, keys, values, headers and every other column) are those of a read without cuts and of
the Python reader, with batches across the cuts (read by both tasks, each keeping its own
offsets), every codec, a compacted segment with offset gaps; the input partitions are the ones
the cut predicts; pushed filters, count() and a streaming micro-batch keep their results; on S3
each part is one `.index` GET and one `.log` GET of its own byte range, no HEAD."""

from __future__ import annotations

import math
import random

import pytest

from lakelog.infra.config import LogConfig
from lakelog.logstore.compression import Compression
from lakelog.logstore.log import PartitionLog
from lakelog.logstore.record_batch import Record, build_batch
from lakelog.spark_log.jvm_source import PYTHON_SOURCE_NAME
from lakelog.tiering.manager import RemoteTier
from lakelog.tiering.config import TieringConfig
from lakelog.tiering.fs_store import FileSystemStore
from lakelog.tiering.remote_scan import load_manifest
from tests.support.spark_jvm import copy_to_s3, jvm_session, lists, plain

pytestmark = pytest.mark.spark
TOPIC = "jvm-split"
TS0 = 1_700_000_000_000
GROUP = 256 * 1024          # maxPartitionBytes of the cut reads
MIN_SPLIT = 64 * 1024       # minSplitBytes of the cut reads
CUT = {"maxPartitionBytes": GROUP, "minSplitBytes": MIN_SPLIT}
WHOLE = {"maxPartitionBytes": 1 << 30}  # one task, no cut
MAX_PARTS_PER_SEGMENT = 1024  # Options.MAX_PARTS_PER_SEGMENT


@pytest.fixture(scope="module")
def spark(spark_s3):
    yield from jvm_session("s3://lakelog-jvm-split/x", "lakelog-jvm-split-test")


def _headers(rng: random.Random) -> tuple:
    return tuple((name, None if rng.random() < 0.3 else rng.randbytes(rng.randrange(6)))
                 for name in rng.sample(["trace", "clé-ü", "", "h" * 9], rng.randrange(3)))


def build_topic(root) -> tuple[FileSystemStore, list[tuple[int, int]]]:
    """Partition 0: 9,000 records of ~240 B in batches of 10, every codec, segments of ~1 MB;
    partition 1: batches of 1-5 records with offset gaps between their records and after their
    last one (as compaction leaves them), segments of ~1 MB. Returns the store and every batch's (base, last) offsets."""
    store = FileSystemStore(root / "remote")
    tier = RemoteTier(store, TieringConfig({"remote.log.copy.max.segments.per.round": 100_000}))
    codecs = list(Compression)
    batches: list[tuple[int, int]] = []
    rng = random.Random(14)
    config = LogConfig({"segment.bytes": 1_000_000, "index.interval.bytes": 4096, "retention.ms": -1})
    log = PartitionLog(root / "log" / f"{TOPIC}-0", config)
    for b in range(900):
        first = b * 10
        recs = [Record(first + i, TS0 + first + i, None if rng.random() < 0.1 else b"key-%d" % (first + i),
                       None if rng.random() < 0.05 else rng.randbytes(200 + rng.randrange(80)), _headers(rng))
                for i in range(10)]
        log.append_as_follower(build_batch(recs, base_offset=first, compression=codecs[b % len(codecs)],
                                           partition_leader_epoch=1 + b // 300))
        batches.append((first, first + 9))
    log.roll()
    tier.partition(TOPIC, 0).copy_segments(log, 3, log.log_end_offset)
    log.close()
    log = PartitionLog(root / "log" / f"{TOPIC}-1", config)
    offset = 0
    for b in range(2500):
        recs = []
        for r in range(rng.randint(1, 5)):
            recs.append(Record(offset, TS0 + 7 * b + r, b"k%d" % rng.randrange(50), rng.randbytes(150 + rng.randrange(150)),
                               _headers(rng)))
            offset += rng.choice((1, 1, 2, 9))
        last = offset - 1 + rng.choice((0, 0, 4))
        log.append_as_follower(build_batch(recs, base_offset=recs[0].offset, compression=codecs[b % 3],
                                           last_offset_delta=last - recs[0].offset, partition_leader_epoch=2))
        batches.append((recs[0].offset, last))
        offset = last + 1
    log.roll()
    tier.partition(TOPIC, 1).copy_segments(log, 3, log.log_end_offset)
    log.close()
    return store, batches


@pytest.fixture(scope="module")
def topic(tmp_path_factory):
    root = tmp_path_factory.mktemp("jvm-split")
    store, batches = build_topic(root)
    segments = [(p, s) for p in (0, 1) for s in load_manifest(store, TOPIC, p).copy_finished]
    assert sum(s.size_in_bytes > GROUP for _, s in segments) >= 4, [s.size_in_bytes for _, s in segments]
    return store, (root / "remote").as_uri(), segments, batches


def expected_parts(segments, group: int = GROUP, min_bytes: int = MIN_SPLIT) -> tuple[list, int]:
    """What Planner.java plans for whole segments: each segment's parts (partition, from, to) and the
    number of input partitions once consecutive parts are grouped up to `group` bytes."""
    parts, splits, size, empty = [], 0, 0, True
    for p, s in segments:
        span = s.end_offset - s.base_offset + 1
        n = 1
        if s.size_in_bytes > group and span > 1:
            n = min(math.ceil(s.size_in_bytes / group), s.size_in_bytes // min_bytes, MAX_PARTS_PER_SEGMENT, span)
            n = max(n, 1)
        weight = s.size_in_bytes if n == 1 else math.ceil(s.size_in_bytes / n)
        step, extra, lo = span // n, span % n, s.base_offset
        for i in range(n):
            hi = lo + step - 1 + (1 if i < extra else 0)
            parts.append((p, lo, hi, n > 1))
            lo = hi + 1
            if not empty and size + weight > group:
                splits, size = splits + 1, 0
            size, empty = size + weight, False
    return parts, splits + (0 if empty else 1)


def read(spark, fmt: str, remote: str, *, where: str | None = None, **options) -> list[dict]:
    reader = spark.read.format(fmt).option("remote", remote).option("topic", TOPIC)
    for k, v in options.items():
        reader = reader.option(k, v)
    df = reader.load()
    if where:
        df = df.where(where)
    return [plain(r.asDict(recursive=True)) for r in df.orderBy("partition", "offset").collect()]


def _df(spark, url: str, **options):
    """The JVM reader, read_uncommitted."""
    r = spark.read.format("lakelog").option("remote", url).option("topic", TOPIC).option("isolation", "read_uncommitted")
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def test_cut_segments_give_the_rows_of_a_whole_read_and_of_the_reference(spark, topic):
    store, url, segments, batches = topic
    parts, n_splits = expected_parts(segments)
    # the cuts fall inside batches (both tasks read such a batch) and inside the gaps of partition 1
    cuts = [lo for (_, lo, _, cut) in parts if cut]
    assert any(b < c <= last for c in cuts for b, last in batches), "no cut inside a batch"
    cut_df = _df(spark, url, **CUT)
    assert cut_df.rdd.getNumPartitions() == n_splits
    assert n_splits > len(segments)  # more tasks than segments
    assert _df(spark, url, **WHOLE).rdd.getNumPartitions() == 1
    cut_rows = read(spark, "lakelog", url, **CUT)
    assert cut_rows == read(spark, "lakelog", url, **WHOLE)
    assert cut_rows == read(spark, PYTHON_SOURCE_NAME, url)
    # read ahead on background threads: each part's stream ends at its own byte range too
    assert read(spark, "lakelog", url, prefetchSegments=2, prefetchChunks=1, chunkBytes=65536, **CUT) == cut_rows
    offsets = [(r["partition"], r["offset"]) for r in cut_rows]
    assert len(offsets) == len(set(offsets)) and len(offsets) > 9000
    # the default plan (no maxPartitionBytes): segments of ~1 MB stay whole below the 4 MiB floor
    assert _df(spark, url).rdd.getNumPartitions() <= len(segments)


@pytest.mark.parametrize("where", [
    "offset BETWEEN 1234 AND 7777",           # both ends inside cut segments
    "partition = 1 AND offset >= 5000",
    "partition = 0",
    f"timestamp >= timestamp_millis({TS0 + 4321}) AND timestamp < timestamp_millis({TS0 + 9000})",
    "offset % 7 = 3 AND key IS NOT NULL",     # not pushed: evaluated over the cut read
])
def test_pushed_filters_over_cut_segments_keep_their_results(spark, topic, where):
    _, url, _, _ = topic
    ref = read(spark, PYTHON_SOURCE_NAME, url, where=where)
    assert ref
    assert read(spark, "lakelog", url, where=where, **CUT) == ref


def test_count_over_cut_segments(spark, topic):
    _, url, _, _ = topic
    total = _df(spark, url, **WHOLE).count()
    py = spark.read.format(PYTHON_SOURCE_NAME).option("remote", url).option("topic", TOPIC).load()
    assert total == py.count() > 9000
    for from_manifest in ("true", "false"):
        df = _df(spark, url, countFromManifest=from_manifest, **CUT)
        assert df.count() == total
        where = "offset BETWEEN 1234 AND 7777"
        assert df.where(where).count() == py.where(where).count()


def test_streaming_micro_batch_reads_cut_segments_once(spark, topic):
    _, url, _, _ = topic
    stream = spark.readStream.format("lakelog").option("remote", url).option("topic", TOPIC)
    for k, v in CUT.items():
        stream = stream.option(k, v)
    query = (stream.load().selectExpr("partition", "offset", "key", "value", "headers").writeStream.format("memory")
             .queryName("jvm_split_stream").trigger(availableNow=True).start())
    try:
        query.awaitTermination(300)
        got = [plain(r.asDict(recursive=True)) for r in spark.sql("SELECT * FROM jvm_split_stream").orderBy(
            "partition", "offset").collect()]
    finally:
        query.stop()
    ref = read(spark, PYTHON_SOURCE_NAME, url)
    assert got == [{k: r[k] for k in ("partition", "offset", "key", "value", "headers")} for r in ref]


def test_on_s3_each_part_is_one_index_get_and_one_log_get_of_its_bytes(spark, spark_s3, topic):
    store, url, segments, _ = topic
    _, s3_url = copy_to_s3(spark_s3, store)
    parts, n_splits = expected_parts(segments)
    ref = read(spark, PYTHON_SOURCE_NAME, url)
    spark_s3.requests()  # from here on: the JVM reader's requests only
    # one scan (sorted here: Spark's sort would scan twice, once to sample its ranges)
    rows = [plain(r.asDict(recursive=True)) for r in _df(spark, s3_url, **CUT).collect()]
    asked = spark_s3.requests()
    assert sorted(rows, key=lambda r: (r["partition"], r["offset"])) == ref
    assert asked.get("GET .log") == len(parts)
    assert asked.get("GET .index") == sum(cut for *_, cut in parts)  # a whole segment needs no index
    assert "HEAD" not in asked, asked
    assert asked.get("GET .json") == 2 and lists(asked) == 1
    # each part's GET asks for its own bytes only: all parts together ask for the segments' bytes
    # and the batches around each cut (read twice), not each part to the end of its segment
    log_bytes = sum(s.size_in_bytes for _, s in segments)
    assert log_bytes <= asked["bytes GET .log"] <= log_bytes * 1.1, (asked["bytes GET .log"], log_bytes)
    spark_s3.requests()
    assert _df(spark, s3_url, countFromManifest="false", **CUT).count() == len(ref)
    asked = spark_s3.requests()
    assert asked.get("GET .log") == len(parts) and "HEAD" not in asked, asked
    assert _df(spark, s3_url, **CUT).rdd.getNumPartitions() == n_splits
    # count() from the manifests: a segment its entry counts is not cut, so it is not read at all
    assert _df(spark, s3_url, **CUT).count() == len(ref)
    asked = spark_s3.requests()
    assert "GET .log" not in asked and "GET .index" not in asked and "HEAD" not in asked, asked


@pytest.mark.parametrize("value", ["65535", str((1 << 40) + 1), "-4"])
def test_min_split_bytes_out_of_its_bounds_is_refused(spark, topic, value):
    _, url, _, _ = topic
    with pytest.raises(Exception) as e:
        _df(spark, url, minSplitBytes=value, maxPartitionBytes=GROUP).count()
    assert "minSplitBytes must lie between 65536 and 1099511627776" in str(e.value)


def test_a_segment_written_by_remote_compaction_cut_across_tasks(spark, tmp_path):
    """Remote compaction's replacement segments (whole batches gone: offset gaps inside and between
    batches, few rows for some offset ranges) cut across tasks give the rows of the reference."""
    from lakelog.compaction.remote import compact_partition

    store = FileSystemStore(tmp_path / "remote")
    tier = RemoteTier(store, TieringConfig({"remote.log.copy.max.segments.per.round": 100_000,
                                            "remote.segment.delete.delay.ms": 0}))
    cfg = LogConfig({"cleanup.policy": "compact", "segment.bytes": 1_000_000, "index.interval.bytes": 4096,
                     "retention.ms": -1, "delete.retention.ms": 86_400_000, "min.cleanable.dirty.ratio": 0.0})
    rng = random.Random(7)
    log = PartitionLog(tmp_path / "log" / f"{TOPIC}-0", cfg)
    for b in range(2400):
        # the early keys are overwritten later: whole early batches are compacted away
        keys = [rng.randrange(4000) if b < 1200 else rng.randrange(4000, 9000) for _ in range(10)]
        log.append_as_follower(build_batch([Record(b * 10 + i, TS0 + b * 10 + i, b"key-%d" % k, rng.randbytes(200))
                                            for i, k in enumerate(keys)], base_offset=b * 10, partition_leader_epoch=1))
    log.roll()
    tier.partition(TOPIC, 0).copy_segments(log, 1, log.log_end_offset)
    log.close()
    before = load_manifest(store, TOPIC, 0).copy_finished
    report = compact_partition(store, TOPIC, 0, cfg, owner="test", now_ms=TS0 + 10**9, delete_delay_ms=0)
    assert report.action == "compacted", report
    after = load_manifest(store, TOPIC, 0).copy_finished
    assert [s.segment_id for s in after] != [s.segment_id for s in before]
    assert sum(s.size_in_bytes > GROUP for s in after) >= 1
    url = (tmp_path / "remote").as_uri()
    ref = read(spark, PYTHON_SOURCE_NAME, url)
    assert len(ref) < sum(s.end_offset - s.base_offset + 1 for s in after)  # gaps
    cut_df = _df(spark, url, **CUT)
    assert cut_df.rdd.getNumPartitions() == expected_parts([(0, s) for s in after])[1] > len(after)
    assert read(spark, "lakelog", url, **CUT) == ref
    assert cut_df.count() == _df(spark, url, countFromManifest="false", **CUT).count() == len(ref)
