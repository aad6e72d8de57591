"""sync-tables' row counts from the Delta commit (spark_log/delta_commits.py, reading the log through
spark_log/delta_log.py), its latest table from one aggregate, and the Delta work it leaves out,
against real Delta writes on the filesystem store: two partitions sharing keys, a first sync, a
no-op sync, then an incremental one."""

from __future__ import annotations

import re

import pytest

from lakelog.logstore.record_batch import Record, build_batch
from lakelog.spark_log.delta_commits import appended_rows
from lakelog.spark_log.delta_log import newest_version, read_commit
from lakelog.spark_log.jobs import run_job
from lakelog.spark_log.session import remote_session
from lakelog.tiering.topics import TopicDescriptor, write_topic_descriptor
from tests.integration.test_remote_compaction import TOPIC, build_remote, remote_records

pytestmark = pytest.mark.spark
COMPACT = {"cleanup.policy": "compact", "segment.bytes": "4000"}


@pytest.fixture(scope="module")
def spark(spark_s3):
    session = remote_session("s3://lakelog-spark/x", app_name="lakelog-sync-commits-test")
    yield session
    session.stop()


def _latest(records_by_partition: dict[int, list]) -> dict[tuple[int, bytes], bytes]:
    out: dict[tuple[int, bytes], bytes | None] = {}
    for p, records in records_by_partition.items():
        for _, _, k, v in records:
            out[(p, k)] = v
    return {pk: v for pk, v in out.items() if v is not None}


def _table(spark, remote: str, name: str) -> list:
    return spark.read.format("delta").load(f"{remote}/tables/{name}").collect()


def test_rows_from_the_commit_latest_by_aggregate_no_checksum_and_no_empty_commit(tmp_path, spark):
    store, tier0, log0, _ = build_remote(tmp_path, batches=120, keys=25, partition=0, seed=3)
    _, tier1, log1, _ = build_remote(tmp_path, batches=90, keys=25, partition=1, seed=4)
    write_topic_descriptor(store, TopicDescriptor(TOPIC, None, 2, COMPACT))
    remote = (tmp_path / "remote").as_uri()
    tiered = {p: remote_records(store, p) for p in (0, 1)}
    assert tiered[0] and tiered[1]

    compressed = spark.conf.get("spark.sql.inMemoryColumnarStorage.compressed")
    first = run_job(spark, "sync-tables", remote)
    # the sync's own settings (uncompressed cache, no checksum files) are the session's again after it
    assert spark.conf.get("spark.sql.inMemoryColumnarStorage.compressed") == compressed == "true"
    n = len(tiered[0]) + len(tiered[1])
    assert first.totals["rows_added"] == n
    # The count is the append commit's own metric, and that commit carries the sync's transaction.
    commit = read_commit(store, TOPIC, newest_version(store, TOPIC))
    assert {a["txn"]["appId"] for a in commit if "txn" in a} == {f"lakelog-sync-{TOPIC}"}
    assert appended_rows(store, TOPIC, f"lakelog-sync-{TOPIC}", 0) == n
    rows = _table(spark, remote, TOPIC)
    assert sorted((r["partition"], r["offset"]) for r in rows) == \
        sorted((p, o) for p in (0, 1) for o, _, _, _ in tiered[p])
    # <topic>_latest, built from the cached rows by one aggregate: the newest value per
    # (partition, key), tombstoned keys left out; a key in both partitions is two rows.
    latest = {(r["partition"], bytes(r["key"])): bytes(r["value"]) for r in _table(spark, remote, TOPIC + "_latest")}
    assert latest == _latest(tiered)
    assert len(latest) == len(_table(spark, remote, TOPIC + "_latest"))
    assert {k for _, k in latest if (0, k) in latest and (1, k) in latest}  # shared keys were kept apart
    # No post-commit checksum files (`_delta_log/<version>.crc`) were written for either table.
    logs = [i.key.rsplit("/", 1)[1] for i in store.list("tables/") if "/_delta_log/" in i.key]
    assert "00000000000000000000.json" in logs and not [k for k in logs if re.fullmatch(r"\d{20}\.crc", k)]
    # Created by the first sync (no search for files to remove); a run that finds it already made
    # by another overwrites it, with the same rows.
    from lakelog.spark_log.tables import write_latest_table

    write_latest_table(spark, remote, TOPIC, exists=False)
    again = {(r["partition"], bytes(r["key"])): bytes(r["value"]) for r in _table(spark, remote, TOPIC + "_latest")}
    assert again == latest and newest_version(store, TOPIC + "_latest") == 1

    # Nothing new: no Spark append, so no commit at all (not even an empty one).
    version = newest_version(store, TOPIC)
    assert run_job(spark, "sync-tables", remote).totals["rows_added"] == 0
    assert newest_version(store, TOPIC) == version

    # New records in partition 1 only (a newer value, a tombstone, a new key): exactly those are
    # added, counted from their commit, and MERGEd into <topic>_latest.
    live = sorted(k for (p, k) in latest if p == 1)
    more = [(live[0], b"newer"), (live[1], None), (b"key-new", b"fresh")]
    log1.append_as_leader(build_batch([Record(i, 9_000_000 + i, k, v) for i, (k, v) in enumerate(more)]), 1)
    log1.roll()
    tier1.partition(TOPIC, 1).copy_segments(log1, 1, log1.log_end_offset)
    now = {p: remote_records(store, p) for p in (0, 1)}
    added = len(now[1]) - len(tiered[1])
    assert added >= len(more)
    third = run_job(spark, "sync-tables", remote)
    assert third.totals["rows_added"] == added
    assert newest_version(store, TOPIC) == version + 1
    assert len(_table(spark, remote, TOPIC)) == n + added
    latest = {(r["partition"], bytes(r["key"])): bytes(r["value"]) for r in _table(spark, remote, TOPIC + "_latest")}
    assert latest == _latest(now)
    assert latest[(1, live[0])] == b"newer" and (1, live[1]) not in latest and latest[(1, b"key-new")] == b"fresh"
    log0.close()
    log1.close()


def test_a_retried_append_is_skipped_by_delta_and_makes_no_commit(tmp_path, spark):
    """What appended_rows relies on: Delta records the writer's (txnAppId, txnVersion) in the commit
    with numOutputRows, and skips an append whose transaction it already holds, committing nothing."""
    from lakelog.tiering.fs_store import FileSystemStore

    store = FileSystemStore(tmp_path / "remote")
    path = (tmp_path / "remote" / "tables" / "t").as_uri()

    def append(rows: int, version: int) -> None:
        (spark.range(rows).write.format("delta").mode("append").option("txnAppId", "app")
         .option("txnVersion", version).save(path))

    append(7, 10)
    assert (newest_version(store, "t"), appended_rows(store, "t", "app", 10)) == (0, 7)
    append(7, 10)  # retried: skipped
    assert newest_version(store, "t") == 0
    append(2, 17)
    assert (newest_version(store, "t"), appended_rows(store, "t", "app", 17)) == (1, 2)
    assert spark.read.format("delta").load(path).count() == 9


def test_latest_per_key_is_a_hash_aggregate_and_keeps_every_column_of_the_newest_row(spark):
    """`<topic>_latest`'s rows (and the MERGE's source): the newest row of each (partition, key),
    found by a hash aggregate of max(offset) and a semi-join, never by sorting whole rows; every
    column of that row, in the input's column order, equal to a plain Python reference."""
    from lakelog.spark_log.tables import _latest_per_key

    schema = ("partition INT, offset BIGINT, key BINARY, value BINARY, `_newest_partition` STRING, "
              "`odd name` ARRAY<INT>")
    rows = []
    for p in (0, 1):
        for o in range(60):
            key = None if o % 7 == 0 else f"k{o % 5}".encode()  # keyless records: never latest
            value = None if (p, o) in {(0, 58), (1, 44), (1, 59)} else f"v{p}-{o}".encode()
            rows.append((p, o, key, value, f"s{o}", [p, o]))
    df = spark.createDataFrame(rows[::-1], schema)  # offsets out of order: the result may not rely on it
    newest: dict = {}
    for r in rows:
        if r[2] is not None and r[1] >= newest.get((r[0], r[2]), (0, -1))[1]:
            newest[(r[0], r[2])] = r
    everything = sorted(newest.values())
    live = [r for r in everything if r[3] is not None]
    assert len(live) < len(everything)  # some keys end on a tombstone

    def got(frame) -> list:
        return sorted(tuple(bytes(x) if isinstance(x, (bytes, bytearray)) else x for x in r) for r in frame.collect())

    with_tombstones = _latest_per_key(df)
    assert with_tombstones.columns == df.columns
    assert got(with_tombstones) == everything
    alive = _latest_per_key(df, live_only=True)
    assert alive.columns == df.columns and got(alive) == live
    plan = alive._jdf.queryExecution().executedPlan().toString()
    assert "HashAggregate" in plan and "SortAggregate" not in plan, plan
