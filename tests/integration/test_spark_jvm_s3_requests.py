"""What the JVM `lakelog` data source asks of an S3 API, counted at the server (moto's, through
S3A): a segment is one GET and no HEAD, its offset index too (their lengths come from the
manifest, see spark_log/jvm/.../RemoteTier.java); a query plans once. Without the HEAD a missing
or short object is found by the GET: the query still fails with the typed error naming it."""

from __future__ import annotations

import random
import uuid

import pytest

from lakelog.infra.config import LogConfig
from lakelog.logstore.log import PartitionLog
from lakelog.logstore.record_batch import Record, build_batch
from lakelog.spark_log.jvm_source import PYTHON_SOURCE_NAME, jvm_source_loaded
from lakelog.spark_log.session import remote_session
from lakelog.tiering import RemoteTier, TieringConfig
from lakelog.tiering.fs_store import FileSystemStore
from lakelog.tiering.remote_scan import load_manifest
from lakelog.tiering.s3_store import S3Store

pytestmark = pytest.mark.spark
TOPIC = "s3-requests"
PARTITIONS = 2
TS0 = 1_700_000_000_000


@pytest.fixture(scope="module")
def spark(spark_s3):
    session = remote_session("s3://lakelog-s3-requests/x", app_name="lakelog-s3-requests-test")
    assert jvm_source_loaded(session), "make jvm builds spark_log/jvm/lakelog-spark.jar"
    yield session
    session.stop()


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
    bucket = f"lakelog-{uuid.uuid4().hex[:10]}"
    spark_s3.create_bucket(bucket)
    target = S3Store(bucket, "tier")
    for info in store.list(""):
        target.put(info.key, store.get(info.key)[0])
    segments = {p: load_manifest(store, TOPIC, p).copy_finished for p in range(PARTITIONS)}
    assert all(len(s) >= 2 for s in segments.values())
    return store, target, f"s3://{bucket}/tier", segments


def _df(spark, url: str, fmt: str = "lakelog"):
    """The topic; for the JVM reader with `countFromManifest=false`, so that count() reads every
    segment (test_spark_jvm_count.py tests the count from the manifests)."""
    r = spark.read.format(fmt).option("remote", url).option("topic", TOPIC)
    if fmt == "lakelog":
        r = r.option("countFromManifest", "false")
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
    assert asked.get("GET .json") == PARTITIONS  # one planning: each manifest read once
    # an offset filter: the offset index of the first segment read, GET only
    lo = segments[0][1].base_offset + 10
    assert _df(spark, url).where(f"partition = 0 AND offset >= {lo}").count() == 4000 - lo
    asked = spark_s3.requests()
    assert asked.get("GET .index") == 1 and asked.get("GET .log") == len(segments[0]) - 1
    assert "HEAD .log" not in asked and "HEAD .index" not in asked


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
