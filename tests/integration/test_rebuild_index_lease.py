"""rebuild-index under the per-partition job lease, on local Spark and the filesystem store
(spark_log/rebuild_job.py): a partition whose lease another run holds is neither read for work
nor written (reported "skipped", as compaction and retention report it, its `_remote_index` rows
kept), the next run after the lease is released rebuilds it; index objects an interrupted rebuild
wrote after the leader's retention deleted their segment are removed by the next run, and nothing
a manifest references is."""

from __future__ import annotations

import io
import json

import pytest

from lakelog.compaction.remote import expire_partition
from lakelog.infra.config import LogConfig
from lakelog.spark_log.cli_jobs import _print_summary
from lakelog.spark_log.jobs import run_job
from lakelog.spark_log.session import remote_session
from lakelog.tiering.errors import ObjectNotFoundError
from lakelog.tiering.index_rebuild_tasks import RebuildRun, rebuild_run
from lakelog.logstore.segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX
from lakelog.tiering.layout import parse_segment_file, segment_key, segment_keys
from lakelog.tiering.lease import acquire, lease_key
from lakelog.tiering.manifest_model import SegmentState
from lakelog.tiering.remote_scan import load_manifest
from lakelog.tiering.topics import TopicDescriptor, write_topic_descriptor
from tests.integration.test_remote_compaction import TOPIC, build_remote

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def spark():
    session = remote_session(None, app_name="lakelog-rebuild-lease-test")
    yield session
    session.stop()


def _two_partitions(tmp_path):
    store, tier, _, _ = build_remote(tmp_path, batches=120, log_cfg={"cleanup.policy": "delete"})
    build_remote(tmp_path, batches=120, partition=1, seed=8, log_cfg={"cleanup.policy": "delete"})
    write_topic_descriptor(store, TopicDescriptor(TOPIC, None, 2, {"index.interval.bytes": "512"}))
    return store, tier, (tmp_path / "remote").as_uri()


def _table(spark, remote) -> dict:
    rows = spark.read.format("delta").load(f"{remote}/tables/_remote_index").collect()
    return {(r["partition"], r["segment_id"]): r["index_action"] for r in rows}


def _exists(store, key: str) -> bool:
    try:
        store.head(key)
        return True
    except ObjectNotFoundError:
        return False


def _all_objects(store) -> dict:
    return {o.key: store.get(o.key)[0] for p in (0, 1) for o in store.list(f"{TOPIC}-{p}/")}


def test_a_partition_whose_lease_another_run_holds_is_skipped_and_rebuilt_after_release(tmp_path, spark):
    store, _, remote = _two_partitions(tmp_path)
    segs = {p: load_manifest(store, TOPIC, p).copy_finished for p in (0, 1)}
    first = run_job(spark, "rebuild-index", remote)
    assert first.totals == {"segments": len(segs[0]) + len(segs[1]), "ok": len(segs[0]) + len(segs[1])}
    assert set(_table(spark, remote).values()) == {"ok"}

    lost = {p: segment_key(TOPIC, p, segs[p][1].base_offset, segs[p][1].segment_id, INDEX_SUFFIX) for p in (0, 1)}
    for key in lost.values():
        store.delete(key)
    lease = acquire(store, TOPIC, 0, owner="someone-else", job="compaction", ttl_ms=600_000)
    lease_before = store.get(lease_key(TOPIC, 0))
    manifest_before = load_manifest(store, TOPIC, 0)
    objects_before = {o.key: o.size for o in store.list(f"{TOPIC}-0/")}

    held = run_job(spark, "rebuild-index", remote)
    # Partition 0 is reported as compaction and retention report a held lease, and not touched.
    skipped = [r for r in held.rows if "segment_id" not in r]
    assert skipped == [{"topic": TOPIC, "partition": 0, "action": "skipped",
                        "reason": f"{lease_key(TOPIC, 0)} is held by someone-else until {lease.expires_ms}"}]
    assert held.totals == {"segments": len(segs[1]), "ok": len(segs[1]) - 1, "rebuilt": 1, "skipped": 1}
    assert not _exists(store, lost[0])
    assert {o.key: o.size for o in store.list(f"{TOPIC}-0/")} == objects_before
    assert load_manifest(store, TOPIC, 0) == manifest_before
    assert store.get(lease_key(TOPIC, 0)) == lease_before  # the holder's lease, untouched
    assert _exists(store, lost[1])
    # The table keeps partition 0's rows of the last run that indexed it.
    table = _table(spark, remote)
    assert {k: v for k, v in table.items() if k[0] == 0} == {(0, s.segment_id): "ok" for s in segs[0]}
    assert {k: v for k, v in table.items() if k[0] == 1} == \
        {(1, s.segment_id): "rebuilt" if i == 1 else "ok" for i, s in enumerate(segs[1])}
    printed = io.StringIO()
    _print_summary(held, out=printed)
    assert f"  {TOPIC}-0: skipped ({skipped[0]['reason']})\n" in printed.getvalue()
    # Its own leases it released: partition 1's lease is expired, written by this job.
    mine = json.loads(store.get(lease_key(TOPIC, 1))[0])
    assert mine["job"] == "rebuild-index" and mine["expires_ms"] == 0

    lease.release()
    after = run_job(spark, "rebuild-index", remote)
    assert after.totals == {"segments": len(segs[0]) + len(segs[1]), "ok": len(segs[0]) + len(segs[1]) - 1,
                            "rebuilt": 1}
    assert _exists(store, lost[0])
    assert _table(spark, remote)[(0, segs[0][1].segment_id)] == "rebuilt"
    assert json.loads(store.get(lease_key(TOPIC, 0))[0])["job"] == "rebuild-index"


class _ExpireBeforeFirstIndexPut:
    """The store as a rebuild task sees it, while the leader's retention expires and deletes the
    partition's first segment (delay 0) between the task's read of the `.log` and its PUTs."""

    def __init__(self, store, expire):
        self._store, self._expire, self.fired = store, expire, False

    def put(self, key, data, *args, **kwargs):
        if not self.fired and key.endswith(INDEX_SUFFIX):
            self.fired = True
            self._expire()
        return self._store.put(key, data, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._store, name)


def test_index_objects_an_interrupted_rebuild_left_are_removed_by_the_next_run(tmp_path, spark):
    store, tier, remote = _two_partitions(tmp_path)
    m0 = load_manifest(store, TOPIC, 0)
    first = m0.copy_finished[0]

    def expire_first():  # the leader's remote retention: the first segment goes, objects at once
        tier.partition(TOPIC, 0).enforce_retention(1, retention_ms=-1, now_ms=5_000_000,
                                                   retention_bytes=m0.size_in_bytes - first.size_in_bytes)

    racing = _ExpireBeforeFirstIndexPut(store, expire_first)
    # The task rebuilds the first segment of its run and stops there (the executor died).
    rows = rebuild_run(racing, RebuildRun(TOPIC, 0, 512, (first.segment_id,)), mode="all")
    assert racing.fired and rows[0]["index_action"] == "rebuilt"
    gone = load_manifest(store, TOPIC, 0).segment(first.segment_id)
    assert gone is None or gone.state == SegmentState.DELETE_FINISHED
    orphans = {segment_key(TOPIC, 0, first.base_offset, first.segment_id, s) for s in (INDEX_SUFFIX, TIME_INDEX_SUFFIX)}
    assert all(_exists(store, k) for k in orphans)
    assert not _exists(store, segment_key(TOPIC, 0, first.base_offset, first.segment_id, LOG_SUFFIX))

    # No orphans, to be left alone: partition 1's first segment expired by a retention run whose
    # delete delay is not over (DELETE_STARTED: readers mid-segment may still read it).
    m1 = load_manifest(store, TOPIC, 1)
    expired = expire_partition(store, TOPIC, 1, LogConfig({"retention.bytes": sum(s.size_in_bytes for s in m1.copy_finished[1:])}), owner="test",
                               now_ms=5_000_000, delete_delay_ms=3_600_000)
    assert expired.segments_expired == 1 and expired.objects_deleted == 0
    referenced = set()
    for p in (0, 1):
        for s in load_manifest(store, TOPIC, p).segments:
            if s.state in (SegmentState.COPY_FINISHED, SegmentState.DELETE_STARTED):
                referenced |= set(segment_keys(TOPIC, p, s.base_offset, s.segment_id))
    kept = {k: v for k, v in _all_objects(store).items() if k in referenced}
    assert len(kept) == 4 * (len(m0.copy_finished) - 1 + len(m1.copy_finished))

    summary = run_job(spark, "rebuild-index", remote)
    assert summary.totals["orphans_deleted"] == 2, summary.totals
    assert not any(_exists(store, k) for k in orphans)
    left = _all_objects(store)
    assert {k: v for k, v in left.items() if k in referenced} == kept  # every referenced object, unchanged
    assert {k for k in left if parse_segment_file(k.rsplit("/", 1)[-1])} == referenced
    assert summary.totals["segments"] == len(m0.copy_finished) - 1 + len(m1.copy_finished) - 1

    again = run_job(spark, "rebuild-index", remote)
    assert "orphans_deleted" not in again.totals


def test_a_lease_lost_while_the_tasks_run_is_reported(tmp_path, spark, monkeypatch):
    import lakelog.spark_log.rebuild_job as rebuild_job
    from lakelog.tiering.errors import LeaseHeldError
    from lakelog.tiering.lease import Lease

    store, _, remote = _two_partitions(tmp_path)
    segs = sum(len(load_manifest(store, TOPIC, p).copy_finished) for p in (0, 1))

    def taken_over(self, now_ms=None):  # partition 1's lease expired and another run took it
        if self.key == lease_key(TOPIC, 1):
            raise LeaseHeldError(self.key, "a newer run", 0)

    monkeypatch.setattr(rebuild_job, "LEASE_RENEW_INTERVAL_S", 0.0)
    monkeypatch.setattr(Lease, "renew", taken_over)
    summary = run_job(spark, "rebuild-index", remote)
    assert [r for r in summary.rows if "segment_id" not in r] == [
        {"topic": TOPIC, "partition": 1, "action": "lease-lost",
         "reason": f"lease lost: {lease_key(TOPIC, 1)} is held by a newer run until 0"}]
    assert summary.totals == {"segments": segs, "ok": segs, "lease_lost": 1}
    # Ours released, the lost one not written by us again (the other run's to release).
    assert json.loads(store.get(lease_key(TOPIC, 0))[0])["expires_ms"] == 0
    assert json.loads(store.get(lease_key(TOPIC, 1))[0])["expires_ms"] > 0
