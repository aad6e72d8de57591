"""spark_log/delta_log.py against logs written by Delta itself (real Spark, local mode), on the
filesystem store and on moto's S3 server over HTTP (S3A writes, S3Store's ListObjectsV2 with
StartAfter reads): the newest version from `_last_checkpoint` and one LIST, agreeing with Delta's
own history; after a metadata cleanup (the log starts at a checkpoint), Delta and the reader
still agree; with a commit missing after the checkpoint, Delta refuses the log and so does the
reader."""

from __future__ import annotations

import uuid

import pytest

from lakelog.spark_log.delta_commits import session_conf
from lakelog.spark_log.delta_log import DeltaLogGapError, LogTail, last_checkpoint, log_prefix, log_tail
from lakelog.spark_log.session import remote_session
from lakelog.tiering.s3_store import S3Store
from lakelog.tiering.fs_store import FileSystemStore
from tests.support.tiering import InstrumentedStore

pytestmark = pytest.mark.spark
#: A checkpoint every 4 commits: versions 0-6 give checkpoint 4 and commits 5, 6 after it.
CHECKPOINT_CONF = {"spark.databricks.delta.properties.defaults.checkpointInterval": "4"}
APPENDS = 7


@pytest.fixture(scope="module")
def spark(spark_s3):
    session = remote_session("s3://lakelog-spark/x", app_name="lakelog-delta-log-test")
    yield session
    session.stop()


@pytest.fixture(params=["fs", "s3"])
def table(request, tmp_path, spark_s3):
    """(store, the table's URL for Spark) of a fresh location; the table is `tables/t`."""
    if request.param == "fs":
        store = FileSystemStore(tmp_path / "remote")
        url = (tmp_path / "remote" / "tables" / "t").as_uri()
    else:
        bucket = f"lakelog-{uuid.uuid4().hex[:10]}"
        spark_s3.create_bucket(bucket)
        store = S3Store(bucket, "tier")
        url = f"s3a://{bucket}/tier/tables/t"
    store = InstrumentedStore(store)
    try:
        yield store, url
    finally:
        store.close()


def _delta_version(spark, url: str) -> int:
    from delta.tables import DeltaTable

    return DeltaTable.forPath(spark, url).history(1).collect()[0]["version"]


def test_the_reader_agrees_with_delta_on_its_own_logs(spark, table):
    store, url = table
    with session_conf(spark, CHECKPOINT_CONF):
        for i in range(APPENDS):
            spark.range(i, i + 1).write.format("delta").mode("append").save(url)
    assert last_checkpoint(store, "t") == 4
    store.reset_calls()
    assert log_tail(store, "t") == LogTail(APPENDS - 1, True) and _delta_version(spark, url) == APPENDS - 1
    # One GET of `_last_checkpoint`, one LIST that starts at the checkpoint's version.
    assert [(op, extra[0]) for op, _, extra in store.calls] == \
        [("get_range", 0), ("list_after", f"{log_prefix('t')}{4:020d}")]

    # Metadata cleanup: everything before the checkpoint goes, and here the checkpoint's own commit
    # file too (the protocol asks cleanup to keep it; a reader cannot count on it): the log starts
    # at a bare checkpoint. Delta reads the table; the reader agrees.
    for o in store.list(log_prefix("t")):
        name = o.key[len(log_prefix("t")):]
        if name[:20].isdigit() and int(name[:20]) < 4 or name == f"{4:020d}.json":
            store.delete(o.key)
    assert spark.read.format("delta").load(url).count() == APPENDS
    assert log_tail(store, "t") == LogTail(APPENDS - 1, True)

    # A commit after the checkpoint lost: Delta refuses the log, and the reader does too rather
    # than answer 4 (where HEAD probing would stop) or 6 (where a LIST ends).
    store.delete(f"{log_prefix('t')}{5:020d}.json")
    with pytest.raises(DeltaLogGapError) as e:
        log_tail(store, "t")
    assert (e.value.missing, e.value.later) == (5, 6)
    with pytest.raises(Exception, match="DELTA_TRUNCATED_TRANSACTION_LOG|(?i:not contiguous)"):
        spark.read.format("delta").load(url).count()
