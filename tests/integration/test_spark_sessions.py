"""Two Spark sessions one after the other in one process (the first stopped), each over its own S3
API server holding a bucket of the same name: the JVM reader of the second session must plan and
read the second store's segments.

Regression test: the JVM reader took its FileSystem from Hadoop's JVM-wide cache
(`FileSystem.get`), keyed by scheme, bucket and user but not by the configuration, so the second
session read the bucket on the first session's endpoint: here partition 0 only, without an error.
"""

from __future__ import annotations

import uuid

import pytest

from lakelog.spark_log.jvm_source import jvm_source_loaded
from lakelog.spark_log.session import remote_session, s3a_conf
from lakelog.tiering.remote_scan import iter_segment_records, load_manifest, readable_segments, remote_partitions
from lakelog.tiering.s3_store import S3Store
from tests.integration.test_spark_jvm_source import TOPIC, build_topic
from tests.support.s3server import S3Server

pytestmark = pytest.mark.spark


def _copy(store, server: S3Server, bucket: str, only_prefix: str = "") -> int:
    env = server.env()
    target = S3Store(bucket, "tier", endpoint_url=env["AWS_ENDPOINT_URL"], region=env["AWS_REGION"],
                     access_key_id=env["AWS_ACCESS_KEY_ID"], secret_access_key=env["AWS_SECRET_ACCESS_KEY"])
    copied = 0
    for info in store.list(""):
        if info.key.startswith(only_prefix):
            target.put(info.key, store.get(info.key)[0])
            copied += 1
    return copied


def _reference_counts(store) -> dict[int, int]:
    """Records per partition by the Python reference decoder, in this process (no Spark): every data
    record, aborted transactions' too, so the reads below are `read_uncommitted`."""
    out = {}
    for p in remote_partitions(store)[TOPIC]:
        m = load_manifest(store, TOPIC, p)
        out[p] = sum(1 for s in readable_segments(m) for _ in iter_segment_records(store, TOPIC, p, s))
    return out


def _session(server: S3Server, app: str):
    env = server.env()
    conf = s3a_conf(env["AWS_ENDPOINT_URL"], env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"], env["AWS_REGION"])
    return remote_session(None, app_name=app, master="local[2]", conf=conf)


def test_a_later_session_reads_its_own_store_for_a_bucket_of_the_same_name(tmp_path, spark_s3):
    store = build_topic(tmp_path)
    expected = _reference_counts(store)
    assert len(expected) > 1 and all(expected.values())
    bucket = f"lakelog-{uuid.uuid4().hex[:10]}"
    remote = f"s3://{bucket}/tier"
    # The first store has partition 0 only; the second (the process's shared server, whose endpoint
    # the driver's own S3 client reads from the environment) has every partition.
    with S3Server() as first_server:
        first_server.create_bucket(bucket)
        assert _copy(store, first_server, bucket, f"{TOPIC}-0/") > 0
        spark_s3.create_bucket(bucket)
        _copy(store, spark_s3, bucket)

        first = _session(first_server, "lakelog-first-session")
        try:
            assert jvm_source_loaded(first), "make jvm builds spark_log/jvm/lakelog-spark.jar"
            df = first.read.format("lakelog").option("remote", remote).option("topic", TOPIC) \
                .option("isolation", "read_uncommitted").load()
            assert df.count() == expected[0]
        finally:
            first.stop()

        second = _session(spark_s3, "lakelog-second-session")
        try:
            assert jvm_source_loaded(second)
            df = second.read.format("lakelog").option("remote", remote).option("topic", TOPIC) \
                .option("isolation", "read_uncommitted").load()
            by_partition = {r["partition"]: r["n"] for r in df.groupBy("partition").count()
                            .withColumnRenamed("count", "n").collect()}
            assert by_partition == expected, (by_partition, expected)
        finally:
            second.stop()
