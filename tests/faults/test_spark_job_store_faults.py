"""Spark jobs over an object store that hangs (moto's S3 server SIGSTOPped mid-job), with a real
local Spark session: each job fails within `remote.job.store.timeout.ms` (3 s here, given to the
run as `--config` is: the driver resolves it and every task carries it in its arguments) with an
error naming the store and the key, instead of waiting on the store client's own timeouts (10
minutes a request here); once the store is back, a rerun succeeds and the data is whole:
manifests valid, no lease left held, the Delta table holding each tiered record once.

The deadline reaches the executors with the job, not through their environment, so the file does
not depend on its place in the pytest process: a JVM started by an earlier Spark test serves it
as well. The S3 server is the suite's one server for Spark (`spark_s3`, tests/conftest.py), whose
address is in the environment before any Spark JVM starts."""

from __future__ import annotations

import random
import threading
import uuid

import pytest

from lakelog.infra.config import LogConfig
from lakelog.logstore.log import PartitionLog
from lakelog.logstore.record_batch import Record, build_batch
from lakelog.spark_log import tables as sync_tables
from lakelog.spark_log.jobs import run_job
from lakelog.spark_log.session import remote_session
from lakelog.tiering.config import TieringConfig
from lakelog.tiering.lease import lease_key
from lakelog.tiering.manager import RemoteTier
from lakelog.tiering.remote_scan import JOB_STORE_TIMEOUT_KEY, iter_segment_records, load_manifest
from lakelog.tiering.stores import open_store
from lakelog.tiering.topics import TopicDescriptor, write_topic_descriptor
from tests.faults.test_replication_faults import _seed
from tests.support.s3server import S3Server

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]
DEADLINE_MS = 3_000
#: A run's `--config`: the deadline of each object-store call, the driver's and the tasks'.
RUN_CONFIG = {JOB_STORE_TIMEOUT_KEY: str(DEADLINE_MS)}
#: How long the test waits for a job that must fail by its deadline: far below the store client's
#: own timeouts (600 s a request), so only the deadline can end it in time.
PATIENCE_S = 240.0
TIER_CONFIG = {"remote.storage.request.timeout.ms": 600_000, "remote.storage.max.attempts": 1,
               "remote.log.copy.max.segments.per.round": 1000, "remote.segment.delete.delay.ms": 0}


@pytest.fixture(scope="module")
def s3(spark_s3):
    """The suite's one S3 server for Spark (tests/conftest.py): Spark's JVM, and so every Python
    worker it forks for every later session of this process, keeps the environment of the moment
    it starts, so no test may start it with a store of its own. Every freeze here is thawed."""
    return spark_s3


@pytest.fixture(scope="module")
def spark(s3):
    session = remote_session("s3://lakelog-faults/x", app_name="lakelog-job-store-faults-test")
    yield session
    session.stop()


def _tiered(tmp_path, s3, rng: random.Random, topic: str, configs: dict[str, str]):
    """A bucket with one tiered partition of `topic`; (remote URL, store, records as (offset, value))."""
    bucket = f"lakelog-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(bucket)
    remote = f"s3://{bucket}/tier"
    cfg = TieringConfig(TIER_CONFIG)
    store = open_store(remote, cfg)
    log = PartitionLog(tmp_path / f"{topic}-0", LogConfig({"segment.bytes": 4000, "retention.ms": -1}))
    written = []
    for i in range(rng.randint(80, 120)):
        recs = [Record(r, 1_000 + i, f"key-{rng.randrange(20)}".encode(), f"value-{i}-{r}".encode())
                for r in range(rng.randint(1, 4))]
        first = log.append_as_leader(build_batch(recs), 1).first_offset
        written += [(first + r.offset, r.value) for r in recs]
    log.roll()
    with RemoteTier(open_store(remote, cfg), cfg) as tier:
        tier.partition(topic, 0).copy_segments(log, 1, log.log_end_offset)
    log.close()
    write_topic_descriptor(store, TopicDescriptor(topic, None, 1, configs))
    return remote, store, written


def _in_time(fn, what: str):
    out: list = []

    def run() -> None:
        try:
            out.append((True, fn()))
        except BaseException as e:  # noqa: BLE001 - handed back
            out.append((False, e))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(PATIENCE_S)
    assert out, f"{what} still blocked on the hung store after {PATIENCE_S} s"
    return out[0]


def _named(error: BaseException, remote: str) -> None:
    text = str(error)
    assert f"remote.job.store.timeout.ms={DEADLINE_MS} ms" in text, text[:2000]
    assert remote.split("/")[2] in text, text[:2000]  # the bucket: the store is named


def _no_lease_held(store, topic: str) -> None:
    from lakelog.tiering.errors import ObjectNotFoundError

    try:
        data, _ = store.get(lease_key(topic, 0))
    except ObjectNotFoundError:
        return
    assert b'"expires_ms":0' in data, data


def test_retention_job_over_a_hung_store_fails_by_its_deadline_and_a_rerun_succeeds(tmp_path, spark, s3):
    rng = random.Random(_seed("retention job over a hung object store"))
    topic = "expiring"
    remote, store, written = _tiered(tmp_path, s3, rng, topic, {"cleanup.policy": "delete", "retention.ms": "1"})
    before = load_manifest(store, topic, 0)
    assert len(before.copy_finished) > 2

    try:
        # Frozen once planned: what meets the hung store is the tasks (the lease, the manifest).
        ok, error = _in_time(lambda: run_job(spark, "retention", remote, overrides=RUN_CONFIG,
                                             on_plan=lambda n: s3.freeze()),
                             "the retention job")
    finally:
        s3.thaw()
    assert not ok, error
    _named(error, remote)
    # Nothing half done: the manifest is the one before the run (or the run's whole CAS), valid.
    assert load_manifest(store, topic, 0).copy_finished in (before.copy_finished, [])

    summary = run_job(spark, "retention", remote)
    assert summary.totals["skipped"] == 0 and summary.totals["segments_expired"] > 0, summary.rows
    after = load_manifest(store, topic, 0)
    assert after.log_start_offset > before.log_start_offset
    kept = [(r.offset, r.value) for seg in after.copy_finished for r in iter_segment_records(store, topic, 0, seg)]
    assert kept == [w for w in written if w[0] >= after.log_start_offset]  # the rest whole, in order
    _no_lease_held(store, topic)


def test_sync_tables_over_a_hung_store_fails_by_its_deadline_and_a_rerun_makes_the_table_whole(
        tmp_path, spark, s3, monkeypatch):
    rng = random.Random(_seed("sync-tables over a hung object store"))
    topic = "synced"
    remote, store, written = _tiered(tmp_path, s3, rng, topic, {"cleanup.policy": "compact"})
    real = sync_tables.appended_rows

    def hangs_after_the_append(*args, **kwargs):
        s3.freeze()  # the Delta commit is made: the store hangs before the sync's follow-ups
        return real(*args, **kwargs)

    monkeypatch.setattr(sync_tables, "appended_rows", hangs_after_the_append)
    try:
        ok, error = _in_time(lambda: run_job(spark, "sync-tables", remote, overrides=RUN_CONFIG), "sync-tables")
    finally:
        s3.thaw()
    assert not ok, error
    _named(error, remote)

    monkeypatch.setattr(sync_tables, "appended_rows", real)
    run_job(spark, "sync-tables", remote)
    rows = spark.read.format("delta").load(f"{remote.replace('s3://', 's3a://')}/tables/{topic}").collect()
    assert sorted((r["offset"], bytes(r["value"])) for r in rows) == written
    latest = {bytes(r["key"]): bytes(r["value"]) for r in
              spark.read.format("delta").load(f"{remote.replace('s3://', 's3a://')}/tables/{topic}_latest").collect()}
    expected: dict = {}
    for seg in load_manifest(store, topic, 0).copy_finished:
        for r in iter_segment_records(store, topic, 0, seg):
            expected[bytes(r.key)] = bytes(r.value)
    assert latest == expected
