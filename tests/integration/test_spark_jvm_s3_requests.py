"""What the JVM `lakelog` data source asks of an S3 API, counted at the server (moto's, through
S3A): a segment is one GET and no HEAD, its offset index too (their lengths come from the
manifest, see spark_log/jvm/.../RemoteTier.java); a query plans once, with one LIST and one GET
per partition's manifest, no HEAD. Without the HEAD a missing or short object is found by the
GET: the query still fails with the typed error naming it."""

from __future__ import annotations

import dataclasses
import random

import pytest

from lakelog.infra.config import LogConfig
from lakelog.logstore.log import PartitionLog
from lakelog.logstore.record_batch import Record, build_batch
from lakelog.spark_log.jvm_source import PYTHON_SOURCE_NAME
from lakelog.tiering.manager import RemoteTier
from lakelog.tiering.config import TieringConfig
from lakelog.tiering import manifest_codec
from lakelog.tiering.manifest_model import SegmentState
from lakelog.tiering.fs_store import FileSystemStore
from lakelog.tiering.layout import manifest_key
from lakelog.tiering.remote_scan import load_manifest
from tests.support.spark_jvm import copy_to_s3, jvm_session, lists

pytestmark = pytest.mark.spark
TOPIC = "s3-requests"
PARTITIONS = 2
TS0 = 1_700_000_000_000


@pytest.fixture(scope="module")
def spark(spark_s3):
    yield from jvm_session("s3://lakelog-s3-requests/x", "lakelog-s3-requests-test")


@pytest.fixture(scope="module")
def topic(tmp_path_factory, spark_s3):
    """PARTITIONS partitions of 4,000 records in segments of ~200 KB, copied to a fresh bucket;
    returns (the filesystem store, the S3 store, its URL, the segments of each partition)."""
    root = tmp_path_factory.mktemp("s3-requests")
    store = FileSystemStore(root / "remote")
    tier = RemoteTier(store, TieringConfig({"remote.log.copy.max.segments.per.round": 100_000}))
    rng = random.Random(5)
    for p in range(PARTITIONS):
        log = PartitionLog(root / "log" / f"{TOPIC}-{p}",
                           LogConfig({"segment.bytes": 200_000, "index.interval.bytes": 4096, "retention.ms": -1}))
        for first in range(0, 4000, 100):
            log.append_as_leader(build_batch([Record(first + i, TS0 + first + i, b"k%d" % (first + i), rng.randbytes(100))
                                              for i in range(100)]), 1)
        log.roll()
        tier.partition(TOPIC, p).copy_segments(log, 1, log.log_end_offset)
        log.close()
    target, url = copy_to_s3(spark_s3, store)
    segments = {p: load_manifest(store, TOPIC, p).copy_finished for p in range(PARTITIONS)}
    assert all(len(s) >= 2 for s in segments.values())
    return store, target, url, segments


def _df(spark, url: str, fmt: str = "lakelog"):
    """The topic; for the JVM reader with `countFromManifest=false`, so that count() reads every
    segment (test_spark_jvm_count.py tests the count from the manifests), and read_uncommitted."""
    r = spark.read.format(fmt).option("remote", url).option("topic", TOPIC)
    if fmt == "lakelog":
        r = r.option("countFromManifest", "false").option("isolation", "read_uncommitted")
    return r.load()


def test_a_segment_is_one_get_and_no_head(spark, spark_s3, topic):
    _, _, url, segments = topic
    n_segments = sum(len(s) for s in segments.values())
    expected = _df(spark, url, PYTHON_SOURCE_NAME).count()
    assert expected == PARTITIONS * 4000
    spark_s3.requests()  # from here on: the JVM reader's requests only
    assert _df(spark, url).count() == expected
    asked = spark_s3.requests()
    assert asked.get("GET .log") == n_segments
    assert "HEAD .log" not in asked and "HEAD .index" not in asked
    # one planning: one LIST of the root, each manifest read once by one GET, no HEAD at all
    assert asked.get("GET .json") == PARTITIONS and lists(asked) == 1
    assert "HEAD" not in asked, asked
    # an offset filter: the offset index of the first segment read, GET only
    lo = segments[0][1].base_offset + 10
    assert _df(spark, url).where(f"partition = 0 AND offset >= {lo}").count() == 4000 - lo
    asked = spark_s3.requests()
    assert asked.get("GET .index") == 1 and asked.get("GET .log") == len(segments[0]) - 1
    assert "HEAD" not in asked, asked
    assert asked.get("GET .json") == 1  # the filter's partition only


def test_missing_or_short_objects_found_by_the_get_fail_typed(spark, topic):
    store, target, url, segments = topic
    seg = segments[1][1]
    stem = f"{TOPIC}-1/{seg.base_offset:020d}-{seg.segment_id}"
    log_bytes = store.get(stem + ".log")[0]
    index_bytes = store.get(stem + ".index")[0]
    try:
        target.delete(stem + ".log")
        with pytest.raises(Exception) as e:
            _df(spark, url).count()
        assert "RemoteCorruptionError" in str(e.value) and stem + ".log is missing" in str(e.value)
        target.put(stem + ".log", log_bytes[:-700])  # shorter than the manifest says
        with pytest.raises(Exception) as e:
            _df(spark, url).count()
        assert "RemoteCorruptionError" in str(e.value) and stem + ".log" in str(e.value)
        target.put(stem + ".log", log_bytes)
        target.delete(stem + ".index")
        with pytest.raises(Exception) as e:
            _df(spark, url).where(f"partition = 1 AND offset >= {seg.base_offset + 10}").count()
        assert "RemoteCorruptionError" in str(e.value) and stem + ".index is missing" in str(e.value)
    finally:
        target.put(stem + ".log", log_bytes)
        target.put(stem + ".index", index_bytes)
    assert _df(spark, url).count() == PARTITIONS * 4000


def test_planning_reads_each_manifest_once_and_checks_it(spark, spark_s3, topic):
    """The manifests are read in parallel, each by one GET of a declared 1 MiB range (no HEAD):
    a partition directory without a manifest is not a partition yet; a manifest longer than the
    first read is read again whole; a corrupt manifest, or one of another partition, fails the
    planning with the typed error naming it."""
    store, target, url, _ = topic
    expected = PARTITIONS * 4000
    key1 = manifest_key(TOPIC, 1)
    raw1 = store.get(key1)[0]
    m1 = load_manifest(store, TOPIC, 1)
    try:
        target.put(f"{TOPIC}-7/00000000000000000000-0.log", b"x")  # a directory, no manifest
        # past the first read's 1 MiB: entries the reader skips (DELETE_FINISHED) far above the log
        last = m1.segments[-1]
        pad = tuple(dataclasses.replace(last, segment_id=f"{i:032x}", base_offset=10**12 + 10 * i,
                                        end_offset=10**12 + 10 * i + 9, state=SegmentState.DELETE_FINISHED,
                                        leader_epochs=((1, 10**12 + 10 * i),), record_count=None)
                    for i in range(6000))
        big = manifest_codec.encode(m1.replace(segments=m1.segments + pad))
        assert len(big) > 1 << 20
        target.put(key1, big)
        spark_s3.requests()
        assert _df(spark, url).count() == expected
        asked = spark_s3.requests()
        # a GET per manifest, one for the 7th directory's (answered "no such key"), and the long
        # manifest's HEAD and second GET
        assert asked.get("GET .json") == PARTITIONS + 2 and asked.get("HEAD .json") == 1, asked
        assert lists(asked) == 1
        target.put(key1, raw1[:-30] + b"9" + raw1[-29:])  # a flipped digit: the CRC fails
        with pytest.raises(Exception) as e:
            _df(spark, url).count()
        assert "RemoteCorruptionError" in str(e.value) and key1 in str(e.value)
        target.put(key1, store.get(manifest_key(TOPIC, 0))[0])  # partition 0's manifest under 1
        with pytest.raises(Exception) as e:
            _df(spark, url).count()
        assert "RemoteCorruptionError" in str(e.value) and f"the manifest is for {TOPIC}-0" in str(e.value)
    finally:
        target.put(key1, raw1)
        target.delete(f"{TOPIC}-7/00000000000000000000-0.log")
    assert _df(spark, url).count() == expected
