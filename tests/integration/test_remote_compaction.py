"""Compaction and retention of the remote tier, partition by partition (the work of one Spark task),
on the filesystem store: results equal a plain-Python reference, offsets are preserved, the jobs
are idempotent, leases exclude a second run, and a job racing the leader's retention gives way."""

from __future__ import annotations

import random

import pytest

from lakelog.compaction.remote import compact_partition, expire_partition
from lakelog.compaction.remote_common import COMPACTION_ORIGIN
from lakelog.infra.config import LogConfig
from lakelog.logstore.log import PartitionLog
from lakelog.logstore.record_batch import Record, build_batch
from lakelog.tiering.config import TieringConfig
from lakelog.tiering.fs_store import FileSystemStore
from lakelog.tiering.lease import acquire
from lakelog.tiering.manager import RemoteTier
from lakelog.tiering.manifest_model import SegmentState
from lakelog.tiering.remote_scan import iter_segment_records, load_manifest

TOPIC = "accounts"
DAY = 86_400_000


def build_remote(tmp_path, *, batches=200, keys=40, tombstone_every=17, seed=7, ts0=1_000_000, partition=0,
                 log_cfg=None):
    """A local log of keyed batches, uploaded; returns (store, tier, records) with records as
    (offset, timestamp, key, value) in offset order."""
    rng = random.Random(seed)
    cfg = {"segment.bytes": 4000, "index.interval.bytes": 512, "retention.ms": -1, "cleanup.policy": "compact"}
    cfg.update(log_cfg or {})
    log = PartitionLog(tmp_path / "log" / f"{TOPIC}-{partition}", LogConfig(cfg))
    written = []
    for i in range(batches):
        recs = []
        for r in range(rng.randint(1, 4)):
            key = f"key-{rng.randrange(keys)}".encode()
            n = len(written) + r
            value = None if n % tombstone_every == 0 else f"value-{n}-{rng.random():.6f}".encode()
            recs.append(Record(r, ts0 + i * 10 + r, key, value))
        first = log.append_as_leader(build_batch(recs), 1).first_offset
        written += [(first + r.offset, r.timestamp, r.key, r.value) for r in recs]
    store = FileSystemStore(tmp_path / "remote")
    tier = RemoteTier(store, TieringConfig({"remote.log.copy.max.segments.per.round": 100_000,
                                            "remote.segment.delete.delay.ms": 0}))
    tier.partition(TOPIC, partition).copy_segments(log, 1, log.log_end_offset)
    return store, tier, log, written


def remote_records(store, partition=0):
    m = load_manifest(store, TOPIC, partition)
    out = []
    for seg in m.copy_finished:
        out += [(r.offset, r.timestamp, r.key, r.value)
                for r in iter_segment_records(store, TOPIC, partition, seg, from_offset=m.log_start_offset)]
    return out


def reference(records, upto, *, drop_tombstones):
    """Latest record per key among offsets < upto; the rest untouched."""
    latest = {}
    for rec in records:
        if rec[0] < upto:
            latest[rec[2]] = rec[0]
    kept = [rec for rec in records if rec[0] >= upto or latest[rec[2]] == rec[0]]
    if drop_tombstones:
        kept = [rec for rec in kept if rec[0] >= upto or rec[3] is not None]
    return kept


def config(**kw):
    base = {"cleanup.policy": "compact", "segment.bytes": 12_000, "index.interval.bytes": 512,
            "delete.retention.ms": DAY, "min.cleanable.dirty.ratio": 0.5}
    base.update(kw)
    return LogConfig(base)


def test_compaction_equals_the_reference_and_keeps_offsets(tmp_path):
    store, _, _, written = build_remote(tmp_path)
    before = remote_records(store)
    m0 = load_manifest(store, TOPIC, 0)
    remote_end = m0.end_offset
    assert before == [w for w in written if w[0] <= remote_end]

    report = compact_partition(store, TOPIC, 0, config(), owner="test", now_ms=2_000_000)
    assert report.action == "compacted", report
    after = remote_records(store)
    assert after == reference(before, remote_end + 1, drop_tombstones=False)
    assert len(after) < len(before)
    m1 = load_manifest(store, TOPIC, 0)
    assert m1.cleaner_checkpoint == remote_end + 1
    assert m1.copy_finished[0].base_offset == m0.copy_finished[0].base_offset
    assert m1.end_offset == remote_end  # same offset range, now in fewer segments
    assert len(m1.copy_finished) < len(m0.copy_finished)
    assert all(s.origin == COMPACTION_ORIGIN for s in m1.copy_finished)
    replaced = {s.segment_id for s in m0.copy_finished}
    assert {s.segment_id for s in m1.in_state(SegmentState.DELETE_STARTED, SegmentState.DELETE_FINISHED)} == replaced

    # Idempotent: a second run finds nothing dirty and changes nothing.
    again = compact_partition(store, TOPIC, 0, config(), owner="test", now_ms=2_000_000)
    assert again.action == "none" and again.reason == "nothing dirty"
    assert remote_records(store) == after

    # After delete.retention.ms the tombstones go (forced: nothing new is dirty).
    later = compact_partition(store, TOPIC, 0, config(), owner="test", now_ms=2_000_000 + DAY + 1, force=True)
    assert later.action == "compacted"
    assert remote_records(store) == reference(before, remote_end + 1, drop_tombstones=True)


def test_small_replacements_are_merged_and_a_round_with_nothing_to_drop_writes_nothing(tmp_path):
    """Many segments compacted to a few records: the replacements are merged up to segment.bytes
    (not one nearly empty segment per input group); a forced round over the result drops nothing
    and writes nothing."""
    store, _, _, _ = build_remote(tmp_path, batches=400, keys=5, tombstone_every=10_000)
    before = remote_records(store)
    m0 = load_manifest(store, TOPIC, 0)
    assert len(m0.copy_finished) >= 10
    report = compact_partition(store, TOPIC, 0, config(**{"segment.bytes": 4000}), owner="test", now_ms=2_000_000)
    assert report.action == "compacted"
    m1 = load_manifest(store, TOPIC, 0)
    assert remote_records(store) == reference(before, m0.end_offset + 1, drop_tombstones=False)
    assert len(m1.copy_finished) == 1, [s.size_in_bytes for s in m1.copy_finished]
    assert (m1.copy_finished[0].base_offset, m1.copy_finished[0].end_offset) == \
        (m0.copy_finished[0].base_offset, m0.end_offset)
    objects = sorted(i.key for i in store.list(f"{TOPIC}-0/"))

    again = compact_partition(store, TOPIC, 0, config(**{"segment.bytes": 4000}), owner="test", now_ms=2_000_001,
                              force=True)
    assert again.action == "none" and again.reason == "nothing to drop", again
    assert again.records_read == len(remote_records(store))
    m2 = load_manifest(store, TOPIC, 0)
    assert [s.segment_id for s in m2.copy_finished] == [s.segment_id for s in m1.copy_finished]
    assert sorted(i.key for i in store.list(f"{TOPIC}-0/")) == objects


def test_min_compaction_lag_keeps_young_records(tmp_path):
    store, _, _, written = build_remote(tmp_path)
    before = remote_records(store)
    # Records with timestamp > now - lag stay dirty; the checkpoint stops at the first of them.
    boundary_ts = before[len(before) // 2][1]
    now = 5_000_000
    report = compact_partition(store, TOPIC, 0, config(**{"min.compaction.lag.ms": now - boundary_ts}),
                               owner="test", now_ms=now)
    assert report.action == "compacted"
    after = remote_records(store)
    young = [r for r in before if r[1] > boundary_ts]
    assert all(r in after for r in young)  # nothing young was dropped
    m = load_manifest(store, TOPIC, 0)
    assert m.cleaner_checkpoint <= young[0][0]


def test_dirty_ratio_threshold_and_lease(tmp_path):
    store, _, _, _ = build_remote(tmp_path, batches=60)
    lease = acquire(store, TOPIC, 0, owner="someone-else", job="compaction", ttl_ms=60_000)
    held = compact_partition(store, TOPIC, 0, config(), owner="test")
    assert held.action == "skipped" and "someone-else" in held.reason
    lease.release()
    first = compact_partition(store, TOPIC, 0, config(), owner="test")
    assert first.action == "compacted"
    ratio = compact_partition(store, TOPIC, 0, config(**{"min.cleanable.dirty.ratio": 0.99}), owner="test",
                              force=False)
    assert ratio.action == "none"


def test_compaction_yields_to_the_leaders_retention(tmp_path, monkeypatch):
    """The leader expires the first segments while the job writes: the groups holding them are
    abandoned (their staged objects deleted), never swapped in over a moved log start."""
    store, tier, log, _ = build_remote(tmp_path)
    import lakelog.compaction.remote as cr

    real_upload = cr.upload_replacement
    rp = tier.partition(TOPIC, 0)
    m0 = load_manifest(store, TOPIC, 0)
    fired = []

    def upload_then_expire(*args):
        real_upload(*args)
        if not fired:
            fired.append(1)
            rp.enforce_retention(1, retention_ms=-1, retention_bytes=m0.size_in_bytes - m0.copy_finished[0].size_in_bytes,
                                 now_ms=3_000_000)

    monkeypatch.setattr(cr, "upload_replacement", upload_then_expire)
    report = compact_partition(store, TOPIC, 0, config(), owner="test", now_ms=2_000_000, delete_delay_ms=0)
    assert report.groups_abandoned >= 1
    m = load_manifest(store, TOPIC, 0)
    assert m.log_start_offset > m0.log_start_offset
    # Nothing staged is left live; the readable tier is contiguous from the new log start.
    assert not [s for s in m.segments if s.is_staged]
    done = m.copy_finished
    assert done[0].base_offset <= m.log_start_offset <= done[0].end_offset
    assert all(b.base_offset == a.end_offset + 1 for a, b in zip(done, done[1:]))
    assert remote_records(store)[0][0] >= m.log_start_offset


def test_retention_expires_exactly_the_old_segments(tmp_path):
    store, _, _, _ = build_remote(tmp_path, log_cfg={"cleanup.policy": "delete"})
    m0 = load_manifest(store, TOPIC, 0)
    segs = m0.copy_finished
    cut = segs[3].max_timestamp  # segments 0..3 are at or before the cut
    now = 10_000_000
    report = expire_partition(store, TOPIC, 0, LogConfig({"retention.ms": now - cut - 1}), owner="test",
                              now_ms=now, delete_delay_ms=0)
    assert report.action == "expired" and report.segments_expired == 4
    m1 = load_manifest(store, TOPIC, 0)
    assert m1.log_start_offset == segs[4].base_offset
    assert [s.segment_id for s in m1.copy_finished] == [s.segment_id for s in segs[4:]]
    assert report.objects_deleted == 4
    assert not [i for i in store.list(f"{TOPIC}-0/") if segs[0].segment_id in i.key]
    again = expire_partition(store, TOPIC, 0, LogConfig({"retention.ms": now - cut - 1}), owner="test", now_ms=now)
    assert again.action == "none"
    # retention.bytes keeps the newest segments within the limit (never the last one)
    by_size = expire_partition(store, TOPIC, 0, LogConfig({"retention.bytes": 1}), owner="test", now_ms=now)
    m2 = load_manifest(store, TOPIC, 0)
    assert by_size.segments_expired == len(segs) - 5 and len(m2.copy_finished) == 1


def test_a_lease_lost_mid_run_commits_nothing(tmp_path, monkeypatch):
    from lakelog.tiering.errors import LeaseHeldError
    from lakelog.tiering.lease import Lease

    store, _, _, _ = build_remote(tmp_path, batches=400)
    m0 = load_manifest(store, TOPIC, 0)
    assert len(m0.copy_finished) >= 8  # enough groups (one per segment below) for a renewal

    def lost(self, now_ms=None):
        raise LeaseHeldError(self.key, "a newer run", 0)

    monkeypatch.setattr(Lease, "renew", lost)
    report = compact_partition(store, TOPIC, 0, config(**{"segment.bytes": 4500}), owner="test", now_ms=2_000_000)
    assert report.action == "skipped" and "lease lost" in report.reason
    m1 = load_manifest(store, TOPIC, 0)
    assert m1.segments == m0.segments and m1.cleaner_checkpoint == m0.cleaner_checkpoint


def test_replacements_keep_the_aborted_transactions_of_the_segments_they_replace(tmp_path):
    import time

    from lakelog.index.transaction_index import AbortedTxn
    from lakelog.logstore.segment import TXN_INDEX_SUFFIX
    from lakelog.tiering.layout import segment_key

    now = int(time.time() * 1000)
    log = PartitionLog(tmp_path / "log" / f"{TOPIC}-0", LogConfig({"segment.bytes": 600, "retention.ms": -1,
                                                                     "cleanup.policy": "compact"}))
    for i in range(10):
        log.append_as_leader(build_batch([Record(0, now, b"k%d" % (i % 3), b"v%d" % i)]), 1)
    log.append_as_leader(build_batch([Record(0, now, b"k0", b"aborted")], producer_id=5, producer_epoch=0,
                                     base_sequence=0, is_transactional=True), 1)
    log.append_control(5, 0, False, 0, 1)
    for i in range(10):
        log.append_as_leader(build_batch([Record(0, now, b"k%d" % (i % 3 + 1), b"w%d" % i)]), 1)
    log.roll()
    store = FileSystemStore(tmp_path / "remote")
    tier = RemoteTier(store, TieringConfig({"remote.log.copy.max.segments.per.round": 100_000,
                                            "remote.segment.delete.delay.ms": 0}))
    try:
        tier.partition(TOPIC, 0).copy_segments(log, 1, log.log_end_offset)
        before = tier.partition(TOPIC, 0).aborted_transactions(0, log.log_end_offset).aborted
        assert before == (AbortedTxn(5, 10, 11, 12),)
        report = compact_partition(store, TOPIC, 0, config(**{"segment.bytes": 100_000}), owner="t", now_ms=now,
                                   force=True)
        assert report.action == "compacted", report
        m = load_manifest(store, TOPIC, 0)
        carrying = [s for s in m.copy_finished if s.txn_index_bytes]
        assert len(carrying) == 1 and carrying[0].origin == COMPACTION_ORIGIN
        assert store.get(segment_key(TOPIC, 0, carrying[0].base_offset, carrying[0].segment_id,
                                     TXN_INDEX_SUFFIX))[0] == bytes.fromhex("0000") + (5).to_bytes(8, "big") + \
            (10).to_bytes(8, "big") + (11).to_bytes(8, "big") + (12).to_bytes(8, "big")
        kept = {r[0]: r[3] for r in remote_records(store)}
        assert 10 not in kept                  # the aborted record is gone ...
        assert kept[9] == b"v9"                # ... and did not supersede the committed k0 = v9
        fresh = RemoteTier(store, TieringConfig({}))
        try:
            assert fresh.partition(TOPIC, 0).aborted_transactions(0, log.log_end_offset).aborted == before
        finally:
            fresh.close()
    finally:
        tier.close()
        log.close()


def test_the_split_round_stops_below_the_first_aborted_transaction(tmp_path):
    import time

    from lakelog.compaction.remote_split import SplitRound, open_round

    now = int(time.time() * 1000)
    log = PartitionLog(tmp_path / "log" / f"{TOPIC}-0", LogConfig({"segment.bytes": 600, "retention.ms": -1,
                                                                     "cleanup.policy": "compact"}))
    for i in range(10):
        log.append_as_leader(build_batch([Record(0, now, b"k%d" % (i % 3), b"v%d" % i)]), 1)
    log.append_as_leader(build_batch([Record(0, now, b"k0", b"aborted")], producer_id=5, producer_epoch=0,
                                     base_sequence=0, is_transactional=True), 1)   # 10
    log.append_control(5, 0, False, 0, 1)                                          # 11
    for i in range(10):
        log.append_as_leader(build_batch([Record(0, now, b"k%d" % (i % 3), b"w%d" % i)]), 1)
    log.roll()
    store = FileSystemStore(tmp_path / "remote")
    tier = RemoteTier(store, TieringConfig({"remote.log.copy.max.segments.per.round": 100_000}))
    try:
        tier.partition(TOPIC, 0).copy_segments(log, 1, log.log_end_offset)
        opened = open_round(store, TOPIC, 0, config(), owner="t", force=True, now_ms=now, delete_delay_ms=0,
                            max_map_bytes=1 << 20, task_max_bytes=1 << 20)
        assert isinstance(opened, SplitRound)
        try:
            # An aborted record must not supersede the committed k0 = v9 in a round that cannot drop it.
            assert opened.section.uncleanable == 10
        finally:
            opened.release()
    finally:
        tier.close()
        log.close()


def test_remote_compaction_drops_markers_once_empty_and_past_delete_retention(tmp_path):
    """The one-task round follows the local cleaner's marker rules (compaction/txn_markers.py):
    markers stay while a round sees data of their transaction; the next round stamps their
    delete horizon and drops the ABORT's `.txnindex` entry; a round at the horizon (triggered by
    the job state's earliest horizon) removes them."""
    import time

    from lakelog.tiering.remote_scan import iter_segment_batches

    now = int(time.time() * 1000)
    log = PartitionLog(tmp_path / "log" / f"{TOPIC}-0", LogConfig({"segment.bytes": 600, "retention.ms": -1,
                                                                     "cleanup.policy": "compact"}))
    for i in range(10):
        log.append_as_leader(build_batch([Record(0, now, b"k%d" % (i % 3), b"v%d" % i)]), 1)   # 0..9
    log.append_as_leader(build_batch([Record(0, now, b"k0", b"aborted")], producer_id=5, producer_epoch=0,
                                     base_sequence=0, is_transactional=True), 1)                 # 10
    log.append_control(5, 0, False, 0, 1)                                                        # 11 ABORT
    log.append_as_leader(build_batch([Record(0, now, b"k1", b"in-txn")], producer_id=6, producer_epoch=0,
                                     base_sequence=0, is_transactional=True), 1)                 # 12
    log.append_control(6, 0, True, 0, 1)                                                         # 13 COMMIT
    for i in range(10):
        log.append_as_leader(build_batch([Record(0, now, b"k%d" % (i % 3), b"w%d" % i)]), 1)   # 14..23
    log.roll()
    store = FileSystemStore(tmp_path / "remote")
    tier = RemoteTier(store, TieringConfig({"remote.log.copy.max.segments.per.round": 100_000,
                                            "remote.segment.delete.delay.ms": 0}))
    cfg = config(**{"segment.bytes": 100_000, "delete.retention.ms": 1000})

    def markers() -> list[tuple[int, int | None]]:
        m = load_manifest(store, TOPIC, 0)
        return [(b.base_offset, b.delete_horizon_ms) for s in m.copy_finished
                for _, b in iter_segment_batches(store, TOPIC, 0, s) if b.is_control]

    def txn_index_bytes() -> int:
        return sum(s.txn_index_bytes for s in load_manifest(store, TOPIC, 0).copy_finished)

    try:
        tier.partition(TOPIC, 0).copy_segments(log, 1, log.log_end_offset)
        first = compact_partition(store, TOPIC, 0, cfg, owner="t", now_ms=now, force=True)
        assert first.action == "compacted", first
        assert markers() == [(11, None), (13, None)] and txn_index_bytes() == 34
        kept = {r[0]: r[3] for r in remote_records(store)}
        assert 10 not in kept and 12 not in kept  # aborted; superseded by k1 = w9 at 23

        second = compact_partition(store, TOPIC, 0, cfg, owner="t", now_ms=now + 10, force=True)
        assert second.action == "compacted", second
        assert markers() == [(11, now + 1010), (13, now + 1010)] and txn_index_bytes() == 0

        early = compact_partition(store, TOPIC, 0, cfg, owner="t", now_ms=now + 1009)
        assert early.action != "compacted" and len(markers()) == 2
        third = compact_partition(store, TOPIC, 0, cfg, owner="t", now_ms=now + 1010)
        assert third.action == "compacted", third
        assert markers() == [] and {r[0]: r[3] for r in remote_records(store)} == kept
    finally:
        tier.close()
        log.close()
