"""The tiering manager on the filesystem store: copy rounds, crash and zombie cleanup, leader changes
with different segment boundaries, local and remote retention, topic deletion."""

from __future__ import annotations

import os
import time

import pytest

from lakelog.infra.config import LogConfig
from lakelog.logstore.log import PartitionLog
from lakelog.logstore.record_batch import iter_batches
from lakelog.tiering import epochs as epochs_format
from lakelog.tiering.config import TieringConfig
from lakelog.tiering.errors import (
    FencedLeaderEpochError,
    LocalSegmentCorruptError,
    RemotePartitionDeletedError,
    TransientStoreError,
)
from lakelog.tiering.fs_store import FileSystemStore
from lakelog.tiering.layout import EPOCHS_SUFFIX, segment_keys
from lakelog.logstore.segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX
from lakelog.tiering.manager import RemoteTier
from lakelog.tiering.manifest_model import SegmentState
from tests.support.tiering import InstrumentedStore, fill_log

S = SegmentState
TOPIC = "orders"


def log_config(**kw) -> LogConfig:
    base = {"segment.bytes": 2048, "index.interval.bytes": 256, "retention.ms": -1}
    base.update({k.replace("_", "."): v for k, v in kw.items()})
    return LogConfig(base)


def make_log(tmp_path, name: str = "leader", **kw) -> PartitionLog:
    return PartitionLog(tmp_path / name / f"{TOPIC}-0", log_config(**kw))


def make_tier(store, **kw) -> RemoteTier:
    cfg = {"remote.segment.delete.delay.ms": 0, "remote.fetch.chunk.bytes": 4096,
           "remote.log.copy.max.segments.per.round": 1000}
    cfg.update(kw)
    return RemoteTier(store, TieringConfig(cfg))


@pytest.fixture
def store(tmp_path):
    return InstrumentedStore(FileSystemStore(tmp_path / "remote"))


@pytest.fixture
def tier(store):
    t = make_tier(store)
    yield t
    t.close()


def segment_objects(store) -> set[str]:
    return {o.key for o in store.list(f"{TOPIC}-0/") if not o.key.endswith("manifest.json")}


def expected_objects(m) -> set[str]:
    return {k for s in m.segments if s.state in (S.COPY_FINISHED, S.DELETE_STARTED)
            for k in segment_keys(TOPIC, 0, s.base_offset, s.segment_id, txn_index=s.txn_index_bytes > 0)}


def assert_contiguous_and_clean(store, rp, *, first: int | None = None, end: int | None = None) -> None:
    m = rp.meta.load()
    done = m.copy_finished
    for a, b in zip(done, done[1:]):
        assert b.base_offset == a.end_offset + 1, "gap or overlap"
    if first is not None:
        assert done[0].base_offset == first
    if end is not None:
        assert done[-1].end_offset == end
    assert not m.in_state(S.COPY_STARTED)
    assert segment_objects(store) == expected_objects(m), "orphan or missing objects"


def local_bytes(log, start: int = 0) -> bytes:
    return b"".join(bytes(b.buffer) for b in log.batches(start))


def remote_bytes(rp, start: int, end: int, max_bytes: int = 1500) -> bytes:
    out, offset = [], start
    while offset < end:
        r = rp.read(offset, max_bytes)
        assert r.records, f"no progress at {offset}"
        out.append(r.records)
        offset = r.next_offset
    return b"".join(out)


def sealed_below(log, hw: int) -> list:
    segs = log.segments
    return [s for s, n in zip(segs, segs[1:]) if n.base_offset <= hw]


# ---------------------------------------------------------------------------------------------


def test_uploads_sealed_segments_below_the_hw_once(tmp_path, store, tier):
    log = make_log(tmp_path)
    fill_log(log, 120, leader_epoch=1)
    segs = log.segments
    assert len(segs) > 6
    hw = segs[5].base_offset + 1  # segments 0..4 end below the HW; 5 holds it
    rp = tier.partition(TOPIC, 0)
    report = rp.copy_segments(log, 1, hw)
    assert [s.base_offset for s in report.uploaded] == [s.base_offset for s in segs[:5]]
    assert [s.end_offset for s in report.uploaded] == [s.base_offset - 1 for s in segs[1:6]]
    assert report.lag_segments == len(segs) - 1 - 5
    assert_contiguous_and_clean(store, rp, first=0, end=segs[5].base_offset - 1)
    # idempotent: nothing more to do
    store.reset_calls()
    again = rp.copy_segments(log, 1, hw)
    assert again.uploaded == [] and store.count("put") == 0
    # the active segment is never uploaded, whatever the HW
    rp.copy_segments(log, 1, log.log_end_offset)
    m = rp.meta.load()
    assert m.end_offset == log.active_segment.base_offset - 1
    metrics = tier.metrics_snapshot()
    assert metrics["segments_uploaded"] == len(segs) - 1 and metrics["upload_lag_segments"] == 0


def test_remote_indexes_are_the_local_indexes_trimmed(tmp_path, store, tier):
    log = make_log(tmp_path, index_interval_bytes=300)
    fill_log(log, 80, leader_epoch=1, timestamp_step=7)
    rp = tier.partition(TOPIC, 0)
    rp.copy_segments(log, 1, log.log_end_offset)
    m = rp.meta.load()
    for seg, remote in zip(log.segments, m.copy_finished):
        keys = dict(zip((LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, EPOCHS_SUFFIX),
                        segment_keys(TOPIC, 0, remote.base_offset, remote.segment_id)))
        assert store.get(keys[LOG_SUFFIX])[0] == seg.log_path.read_bytes()
        assert store.get(keys[INDEX_SUFFIX])[0] == seg.offset_index.path.read_bytes()
        assert store.get(keys[TIME_INDEX_SUFFIX])[0] == seg.time_index.path.read_bytes()
        assert len(seg.offset_index.path.read_bytes()) > 0
        assert remote.max_timestamp == seg.max_timestamp and remote.size_in_bytes == seg.size


def test_epochs_cover_the_segment(tmp_path, store, tier):
    log = make_log(tmp_path, segment_bytes=100_000)
    fill_log(log, 5, leader_epoch=3)
    fill_log(log, 5, leader_epoch=5)
    log.roll()
    rp = tier.partition(TOPIC, 0)
    [uploaded] = rp.copy_segments(log, 5, log.log_end_offset).uploaded
    assert uploaded.leader_epochs == ((3, 0), (5, 15))
    key = segment_keys(TOPIC, 0, 0, uploaded.segment_id)[3]
    assert epochs_format.decode(store.get(key)[0]) == [(3, 0), (5, 15)]


def test_local_deletion_only_of_tiered_segments(tmp_path, store, tier):
    log = make_log(tmp_path, local_retention_ms=0)
    fill_log(log, 100, leader_epoch=1)
    rp = tier.partition(TOPIC, 0)
    hw = log.log_end_offset
    assert rp.eligible_for_local_deletion(log) == []
    assert rp.apply_local_retention(log, hw, now_ms=10**13).deleted_base_offsets == ()
    segs = log.segments
    everything = local_bytes(log)
    rp.copy_segments(log, 1, hw, max_segments=3)
    assert [s.base_offset for s in rp.eligible_for_local_deletion(log, max_age_ms=0)] == \
        [s.base_offset for s in segs[:3]]
    result = rp.apply_local_retention(log, hw, now_ms=10**13)
    assert result.deleted_base_offsets == tuple(s.base_offset for s in segs[:3])
    assert log.log_start_offset == segs[3].base_offset
    # the data is still all there: remote below the local log start, local above
    assert remote_bytes(rp, 0, log.log_start_offset) + local_bytes(log) == everything


def test_a_failure_mid_upload_is_resumed_without_orphans(tmp_path, store, tier):
    log = make_log(tmp_path)
    fill_log(log, 60, leader_epoch=1)
    rp = tier.partition(TOPIC, 0)
    store.fail("put", suffix=TIME_INDEX_SUFFIX, after=2)  # the third segment dies half uploaded
    with pytest.raises(TransientStoreError):
        rp.copy_segments(log, 1, log.log_end_offset)
    m = rp.meta.load()
    assert len(m.copy_finished) == 2 and len(m.in_state(S.COPY_STARTED)) == 1
    assert rp.eligible_for_local_deletion(log, max_age_ms=0) == log.segments[:2]
    report = rp.copy_segments(log, 1, log.log_end_offset)
    assert len(report.abandoned) == 1 and report.deleted == report.abandoned
    assert_contiguous_and_clean(store, rp, first=0, end=log.active_segment.base_offset - 1)
    assert tier.metrics_snapshot()["upload_failures"] == 1


def test_crash_then_a_new_leader_finishes(tmp_path, store, tier):
    log = make_log(tmp_path)
    fill_log(log, 60, leader_epoch=1)
    store.fail("put", suffix=INDEX_SUFFIX, after=3, error=RuntimeError("crash"))
    with pytest.raises(RuntimeError):
        tier.partition(TOPIC, 0).copy_segments(log, 1, log.log_end_offset)
    store.clear_faults()
    # "another node": a fresh tier over the same store, as the new leader
    with make_tier(store) as new_tier:
        rp = new_tier.partition(TOPIC, 0)
        report = rp.copy_segments(log, 2, log.log_end_offset)
        assert len(report.abandoned) == 1
        assert_contiguous_and_clean(store, rp, first=0, end=log.active_segment.base_offset - 1)
        assert rp.meta.load().leader_epoch == 2
    with pytest.raises(FencedLeaderEpochError):
        tier.partition(TOPIC, 0).copy_segments(log, 1, log.log_end_offset)


def test_a_zombie_leader_is_fenced_mid_upload_and_removes_its_objects(tmp_path, store):
    log = make_log(tmp_path)
    fill_log(log, 40, leader_epoch=1)
    old_tier, new_tier = make_tier(store), make_tier(store)
    try:
        new_rp = new_tier.partition(TOPIC, 0)
        took_over = []
        started = []

        def new_leader_takes_over(op, key):
            # Runs inside the old leader's PUT of its second segment's .epochs: the new leader
            # (epoch 2) runs a whole round at that moment.
            if not started and key.endswith(EPOCHS_SUFFIX) and store.count("put", EPOCHS_SUFFIX) == 2:
                started.append(True)
                took_over.append(new_rp.copy_segments(log, 2, log.log_end_offset, max_segments=1))
            return False

        store.fail(predicate=new_leader_takes_over)
        with pytest.raises(FencedLeaderEpochError):
            old_tier.partition(TOPIC, 0).copy_segments(log, 1, log.log_end_offset)
        assert took_over and len(took_over[0].abandoned) == 1
        store.clear_faults()
        new_rp.copy_segments(log, 2, log.log_end_offset)
        assert_contiguous_and_clean(store, new_rp, first=0, end=log.active_segment.base_offset - 1)
        assert old_tier.metrics_snapshot()["fenced_commits"] == 1
    finally:
        old_tier.close()
        new_tier.close()


def test_late_writes_of_a_zombie_are_swept(tmp_path, store, tier):
    log = make_log(tmp_path)
    fill_log(log, 30, leader_epoch=1)
    rp = tier.partition(TOPIC, 0)
    rp.copy_segments(log, 1, log.log_end_offset)
    stray = segment_keys(TOPIC, 0, 0, "f" * 32)
    for key in stray:
        store.put(key, b"late write of a fenced leader")
    assert set(rp.sweep_orphans()) == set(stray)
    assert_contiguous_and_clean(store, rp)
    # a new leader sweeps when it takes over
    for key in stray:
        store.put(key, b"again")
    report = rp.copy_segments(log, 2, log.log_end_offset)
    assert set(report.orphans_deleted) == set(stray)


def test_a_new_leader_with_other_segment_boundaries_continues_without_overlap(tmp_path, store, tier):
    leader = make_log(tmp_path, "a", segment_bytes=2048)
    fill_log(leader, 90, leader_epoch=1)
    follower = make_log(tmp_path, "b", segment_bytes=2900)
    for batch in leader.batches():
        follower.append_as_follower(bytes(batch.buffer))
    assert {s.base_offset for s in leader.segments} != {s.base_offset for s in follower.segments}
    follower_bases = {s.base_offset for s in follower.segments}
    k = next(i for i, s in enumerate(leader.segments) if i > 1 and s.base_offset not in follower_bases)
    rp = tier.partition(TOPIC, 0)
    rp.copy_segments(leader, 1, leader.log_end_offset, max_segments=k)
    end_by_old = rp.meta.load().end_offset
    assert end_by_old + 1 not in follower_bases  # the new leader must upload a slice of a segment
    with make_tier(store) as new_tier:
        new_rp = new_tier.partition(TOPIC, 0)
        report = new_rp.copy_segments(follower, 2, follower.log_end_offset)
        assert report.uploaded[0].base_offset == end_by_old + 1
        assert_contiguous_and_clean(store, new_rp, first=0, end=follower.active_segment.base_offset - 1)
        end = new_rp.meta.load().end_offset + 1
        assert remote_bytes(new_rp, 0, end) == local_bytes(leader)[:len(remote_bytes(new_rp, 0, end))]
        assert remote_bytes(new_rp, 0, end) == b"".join(
            bytes(b.buffer) for b in leader.batches(0, max_offset=end))


def test_remote_retention_by_bytes_and_time_with_delete_delay(tmp_path, store):
    log = make_log(tmp_path)
    fill_log(log, 80, leader_epoch=1, first_timestamp=1_000_000, timestamp_step=1000)
    with make_tier(store, **{"remote.segment.delete.delay.ms": 60_000}) as t:
        rp = t.partition(TOPIC, 0)
        rp.copy_segments(log, 1, log.log_end_offset)
        m = rp.meta.load()
        done = m.copy_finished
        total = m.size_in_bytes
        keep_bytes = total - done[0].size_in_bytes - done[1].size_in_bytes
        report = rp.enforce_retention(1, retention_ms=-1, retention_bytes=keep_bytes, now_ms=5_000_000)
        assert report.segments_expired == [done[0].segment_id, done[1].segment_id]
        assert report.log_start_offset == done[2].base_offset and report.deleted == []
        m = rp.meta.load()
        assert m.log_start_offset == done[2].base_offset and len(m.in_state(S.DELETE_STARTED)) == 2
        # objects stay until the delay is over (a reader may still be reading them)
        assert segment_objects(store) == expected_objects(m)
        assert len(rp.cleanup(1, now_ms=5_000_000 + 59_999)) == 0
        assert len(rp.cleanup(1, now_ms=5_000_000 + 60_000)) == 2
        assert_contiguous_and_clean(store, rp, first=done[2].base_offset)
        # by time: segments whose newest record is older than retention.ms
        third = done[2]
        cutoff = third.max_timestamp + 1
        report = rp.enforce_retention(1, retention_ms=1, retention_bytes=-1, now_ms=cutoff + 1)
        assert report.segments_expired == [third.segment_id]
        # reads below the new remote log start are out of range
        from lakelog.tiering.errors import RemoteOffsetOutOfRangeError
        with pytest.raises(RemoteOffsetOutOfRangeError):
            rp.read(0, 100)


def test_everything_expired_remotely_lets_local_retention_delete(tmp_path, store, tier):
    log = make_log(tmp_path, local_retention_ms=0)
    fill_log(log, 40, leader_epoch=1)
    rp = tier.partition(TOPIC, 0)
    rp.copy_segments(log, 1, log.log_end_offset)
    rp.enforce_retention(1, retention_ms=0, retention_bytes=-1, now_ms=10**13)
    m = rp.meta.load()
    assert m.end_offset is None and m.log_start_offset == log.active_segment.base_offset
    assert len(rp.eligible_for_local_deletion(log, max_age_ms=0)) == len(log.segments) - 1


def test_remote_restarts_when_the_local_log_lost_untiered_offsets(tmp_path, store, tier):
    log = make_log(tmp_path)
    fill_log(log, 30, leader_epoch=1)
    rp = tier.partition(TOPIC, 0)
    rp.copy_segments(log, 1, log.log_end_offset, max_segments=2)
    old_end = rp.meta.load().end_offset
    # local retention (retention.ms) deleted segments before they were tiered
    log.truncate_fully_and_start_at(log.log_end_offset + 50)
    fill_log(log, 30, leader_epoch=1)
    report = rp.copy_segments(log, 1, log.log_end_offset)
    assert report.restarted_at == log.log_start_offset > old_end + 1
    assert_contiguous_and_clean(store, rp, first=log.log_start_offset)


def test_delete_all_removes_everything_and_fences_the_incarnation(tmp_path, store):
    log = make_log(tmp_path)
    fill_log(log, 40, leader_epoch=1)
    with make_tier(store) as t:
        rp = t.partition(TOPIC, 0, topic_id="id-1")
        rp.copy_segments(log, 1, log.log_end_offset)
        store.put(f"{TOPIC}-0/{'0' * 20}-{'e' * 32}.log", b"orphan")
        assert rp.delete_all() > 0
        assert segment_objects(store) == set()
        m = rp.meta.load()
        assert m.deleted and m.segments == ()
        assert rp.delete_all() == 0  # idempotent
        with pytest.raises(RemotePartitionDeletedError):
            rp.copy_segments(log, 9, log.log_end_offset)
        # the re-created topic (another id) starts over
        new = t.partition(TOPIC, 0, topic_id="id-2")
        new.copy_segments(log, 0, log.log_end_offset)
        assert_contiguous_and_clean(store, new, first=0)


def test_a_corrupt_local_segment_is_not_uploaded(tmp_path, store, tier):
    log = make_log(tmp_path)
    fill_log(log, 30, leader_epoch=1)
    seg = log.segments[1]
    with open(seg.log_path, "r+b") as f:
        f.seek(100)
        b = f.read(1)
        f.seek(100)
        f.write(bytes([b[0] ^ 0xFF]))
    rp = tier.partition(TOPIC, 0)
    with pytest.raises(LocalSegmentCorruptError):
        rp.copy_segments(log, 1, log.log_end_offset)
    m = rp.meta.load()
    assert len(m.copy_finished) == 1 and not m.in_state(S.COPY_STARTED)
    assert segment_objects(store) == expected_objects(m)


def test_concurrent_rounds_of_one_partition_are_serialised(tmp_path, store, tier):
    from concurrent.futures import ThreadPoolExecutor

    log = make_log(tmp_path)
    fill_log(log, 60, leader_epoch=1)
    rp = tier.partition(TOPIC, 0)
    with ThreadPoolExecutor(4) as pool:
        reports = list(pool.map(lambda _: rp.copy_segments(log, 1, log.log_end_offset), range(4)))
    assert sum(len(r.uploaded) for r in reports) == len(log.segments) - 1
    assert_contiguous_and_clean(store, rp, first=0)


def test_bytes_round_trip_through_a_fresh_reader(tmp_path, store, tier):
    log = make_log(tmp_path)
    fill_log(log, 50, leader_epoch=1)
    tier.partition(TOPIC, 0).copy_segments(log, 1, log.log_end_offset)
    end = log.active_segment.base_offset
    with make_tier(store) as other:
        got = remote_bytes(other.partition(TOPIC, 0), 0, end, max_bytes=10_000)
    assert got == local_bytes(log)[:len(got)] and len(got) == sum(s.size for s in log.segments[:-1])
    offsets = [b.base_offset for _, b in iter_batches(got)]
    assert offsets == sorted(offsets) and offsets[0] == 0
    assert os.path.exists(log.segments[0].log_path)


def test_total_retention_bytes_counts_local_only_data(tmp_path, store, tier):
    log = make_log(tmp_path)
    fill_log(log, 60, leader_epoch=1)
    rp = tier.partition(TOPIC, 0)
    rp.copy_segments(log, 1, log.log_end_offset, max_segments=4)
    local_only = rp.local_only_bytes(log)
    assert local_only == sum(s.size for s in log.segments[4:])
    m = rp.meta.load()
    first = m.copy_finished[0]
    # retention.bytes = everything but the first remote segment: exactly that one expires
    log.update_config(log_config(retention_bytes=m.size_in_bytes + local_only - first.size_in_bytes))
    report = rp.enforce_log_retention(log, 1, now_ms=10**13)
    assert report.segments_expired == [first.segment_id]
    log.update_config(log_config(cleanup_policy="compact"))
    assert rp.enforce_log_retention(log, 1, now_ms=10**13).segments_expired == []


# ---------------------------------------------------------------------------------------------
# one manifest commit per segment, parallel object PUTs, snapshot reads of local segments


def test_one_manifest_commit_per_segment_and_the_same_result(tmp_path, store, tier):
    log = make_log(tmp_path)
    fill_log(log, 60, leader_epoch=1)
    rp = tier.partition(TOPIC, 0)
    rp.copy_segments(log, 1, 0)  # the leader's claim round: nothing to upload
    commits_before = rp.meta.commits
    report = rp.copy_segments(log, 1, log.log_end_offset)
    sealed = len(log.segments) - 1
    assert sealed >= 3 and len(report.uploaded) == sealed
    # COPY_FINISHED of each segment rides with COPY_STARTED of the next: n + 1 commits, not 2n.
    assert rp.meta.commits - commits_before == sealed + 1
    assert [s.state for s in report.uploaded] == [S.COPY_FINISHED] * sealed
    assert_contiguous_and_clean(store, rp, first=0, end=log.active_segment.base_offset - 1)


def test_a_failed_scan_still_finishes_the_segment_before_it(tmp_path, store, tier):
    log = make_log(tmp_path)
    fill_log(log, 40, leader_epoch=1)
    second = log.segments[1]
    with open(second.log_path, "r+b") as f:  # damage the second segment's first batch
        f.seek(40)
        byte = f.read(1)
        f.seek(40)
        f.write(bytes([byte[0] ^ 0xFF]))
    rp = tier.partition(TOPIC, 0)
    with pytest.raises(LocalSegmentCorruptError):
        rp.copy_segments(log, 1, log.log_end_offset)
    m = rp.meta.load()
    assert [s.base_offset for s in m.copy_finished] == [0], "the first segment is tiered"
    assert not m.in_state(S.COPY_STARTED)
    assert segment_objects(store) == expected_objects(m)


def test_small_objects_are_put_while_the_log_streams(tmp_path, store):
    log = make_log(tmp_path)
    fill_log(log, 20, leader_epoch=1)
    seen_during_log_put = []

    def during_log_put(op, key):
        if key.endswith(LOG_SUFFIX) and not seen_during_log_put:
            # Hold the .log PUT until the three small PUTs of the same segment have started.
            prefix = key[:-len(LOG_SUFFIX)]
            for _ in range(500):
                if all(store.count("put", prefix + s) for s in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, EPOCHS_SUFFIX)):
                    seen_during_log_put.append(True)
                    break
                time.sleep(0.01)
            else:
                seen_during_log_put.append(False)
        return False

    store.fail(predicate=during_log_put)
    t = make_tier(store, **{"remote.log.upload.threads": 3})
    try:
        rp = t.partition(TOPIC, 0)
        rp.copy_segments(log, 1, log.log_end_offset)
        assert seen_during_log_put == [True]
        assert_contiguous_and_clean(store, rp, first=0)
    finally:
        t.close()


def test_a_failed_small_put_leaves_the_segment_unfinished_then_it_is_redone(tmp_path, store, tier):
    log = make_log(tmp_path)
    fill_log(log, 30, leader_epoch=1)
    store.fail("put", suffix=TIME_INDEX_SUFFIX, after=1)  # the second segment's .timeindex
    rp = tier.partition(TOPIC, 0)
    with pytest.raises(TransientStoreError):
        rp.copy_segments(log, 1, log.log_end_offset)
    m = rp.meta.load()
    assert [s.base_offset for s in m.copy_finished] == [0]
    assert len(m.in_state(S.COPY_STARTED)) == 1
    rp.copy_segments(log, 1, log.log_end_offset)
    assert_contiguous_and_clean(store, rp, first=0, end=log.active_segment.base_offset - 1)


def test_upload_reads_a_snapshot_of_a_segment_deleted_meanwhile(tmp_path, store, tier):
    log = make_log(tmp_path)
    fill_log(log, 30, leader_epoch=1)
    first = log.segments[0]
    expected = first.log_path.read_bytes()
    deleted = []

    def delete_first_segment(op, key):
        # Between the snapshot and the .log PUT, retention removes the local segment.
        if op == "put" and key.endswith(LOG_SUFFIX) and not deleted:
            deleted.extend(log.delete_oldest_segments(lambda seg, nxt: seg.base_offset == 0))
        return False

    store.fail(predicate=delete_first_segment)
    rp = tier.partition(TOPIC, 0)
    rp.copy_segments(log, 1, log.log_end_offset)
    assert deleted == [0] and not first.log_path.exists()
    seg = rp.meta.load().copy_finished[0]
    data, _ = store.get(segment_keys(TOPIC, 0, seg.base_offset, seg.segment_id)[0])
    assert data == expected


def test_open_segment_reader_refuses_a_segment_that_is_gone(tmp_path):
    from lakelog.logstore.errors import SegmentsChangedError

    log = make_log(tmp_path)
    fill_log(log, 30, leader_epoch=1)
    base = log.segments[1].base_offset
    with log.open_segment_reader(base) as reader:
        size = reader.size
        assert os.pread(reader.fileno(), 8, 0)[:8] == base.to_bytes(8, "big")
    with pytest.raises(SegmentsChangedError):
        log.open_segment_reader(base + 1)
    reader = log.open_segment_reader(0)
    log.delete_oldest_segments(lambda seg, nxt: seg.base_offset == 0)
    with pytest.raises(SegmentsChangedError):
        log.open_segment_reader(0)
    assert len(os.pread(reader.fileno(), 1 << 20, 0)) > 0  # the snapshot still reads
    reader.close()
    assert size > 0


def test_the_next_segment_is_scanned_ahead_once(tmp_path, store, tier, monkeypatch):
    import threading

    import lakelog.tiering.uploader_copy as uploader_module

    log = make_log(tmp_path)
    fill_log(log, 60, leader_epoch=1)
    scans = []
    real = uploader_module.scan_segment

    def counting(*args, **kwargs):
        scans.append(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(uploader_module, "scan_segment", counting)
    rp = tier.partition(TOPIC, 0)
    report = rp.copy_segments(log, 1, log.log_end_offset)
    sealed = len(log.segments) - 1
    assert len(report.uploaded) == sealed and len(scans) == sealed  # each segment scanned once
    assert sum(1 for name in scans if name.startswith("lakelog-remote-upload")) == sealed - 1
    assert_contiguous_and_clean(store, rp, first=0, end=log.active_segment.base_offset - 1)


def test_entries_record_their_data_records_without_control_batches(tmp_path, store, tier):
    """The manifest's record_count is what a reader returns from the segment: the records of its
    data batches; a transaction's marker (a control batch) is not one."""
    from lakelog.logstore.record_batch import Record, build_batch

    log = make_log(tmp_path)
    fill_log(log, 40, records_per_batch=3, leader_epoch=1)
    first = log.log_end_offset
    log.append_as_follower(build_batch([Record(first, 5, b"k", b"v"), Record(first + 1, 6, b"k", b"w")],
                                       base_offset=first, producer_id=7, producer_epoch=0, base_sequence=0,
                                       is_transactional=True, partition_leader_epoch=1))
    log.append_as_follower(build_batch([Record(first + 2, 7, b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00")],
                                       base_offset=first + 2, producer_id=7, producer_epoch=0, is_transactional=True,
                                       is_control=True, partition_leader_epoch=1))
    assert log.log_end_offset == first + 3
    log.roll()
    rp = tier.partition(TOPIC, 0)
    rp.copy_segments(log, 1, log.log_end_offset)
    entries = rp.meta.load().copy_finished
    assert entries and all(s.record_count is not None for s in entries)
    assert sum(s.record_count for s in entries) == 40 * 3 + 2
    for s in entries:
        data = store.get(f"{TOPIC}-0/{s.base_offset:020d}-{s.segment_id}.log")[0]
        assert s.record_count == sum(b.record_count for _, b in iter_batches(data) if not b.is_control)


def test_txnindex_is_uploaded_with_its_segment_and_read_back(tmp_path, store, tier):
    from lakelog.index.transaction_index import AbortedTxn, decode_entries
    from lakelog.logstore.record_batch import Record, build_batch
    from lakelog.logstore.segment import TXN_INDEX_SUFFIX
    from lakelog.tiering.layout import segment_key

    log = make_log(tmp_path)
    now = int(time.time() * 1000)
    txn = build_batch([Record(0, now, b"k", b"v" * 100)], producer_id=9, producer_epoch=0, base_sequence=0,
                      is_transactional=True)
    log.append_as_leader(txn, 1)                    # 0: opens producer 9's transaction
    log.append_control(9, 0, False, 0, 1)           # 1: ABORT
    log.roll()
    fill_log(log, 30, leader_epoch=1)
    hw = log.log_end_offset
    log.update_high_watermark(hw)
    rp = tier.partition(TOPIC, 0)
    rp.copy_segments(log, 1, hw)
    m = rp.meta.load()
    first = m.copy_finished[0]
    assert first.base_offset == 0 and first.txn_index_bytes == 34
    assert all(s.txn_index_bytes == 0 for s in m.copy_finished[1:])
    data, _ = store.get(segment_key(TOPIC, 0, 0, first.segment_id, TXN_INDEX_SUFFIX))
    assert decode_entries(data) == [AbortedTxn(9, 0, 1, 2)] == log.segment_aborted_transactions(0)
    assert_contiguous_and_clean(store, rp, first=0)
    search = rp.aborted_transactions(0, hw)
    assert search.aborted == (AbortedTxn(9, 0, 1, 2),) and not search.complete  # the local log may add more
    assert rp.aborted_transactions(0, 2).complete  # its LSO reaches the bound: nothing later can overlap
    assert rp.aborted_transactions(2, hw).aborted == ()
    # a .txnindex object that does not match the manifest is refused, never served
    from lakelog.tiering.errors import RemoteCorruptionError
    store.put(segment_key(TOPIC, 0, 0, first.segment_id, TXN_INDEX_SUFFIX), data[:-1] + b"\x01")
    fresh = make_tier(store)
    try:
        with pytest.raises(RemoteCorruptionError):
            fresh.partition(TOPIC, 0).aborted_transactions(0, hw)
    finally:
        fresh.close()
    log.close()


def test_a_tiered_segment_lists_aborted_transactions_whose_marker_is_not_tiered(tmp_path, store, tier):
    """Producer 9's transaction has data in segment 0; its ABORT marker lands in a later segment
    that stays local (the active one). The upload of segment 0 records it in `later_aborts`, so
    a remote read of segment 0 alone knows it is aborted (complete: no local search needed)."""
    from lakelog.index.transaction_index import AbortedTxn
    from lakelog.logstore.record_batch import Record, build_batch

    log = make_log(tmp_path)
    now = int(time.time() * 1000)
    txn = build_batch([Record(0, now, b"k", b"v" * 100)], producer_id=9, producer_epoch=0, base_sequence=0,
                      is_transactional=True)
    log.append_as_leader(txn, 1)                    # 0: opens producer 9's transaction
    log.roll()
    fill_log(log, 3, leader_epoch=1)                # 1..9, another segment
    log.roll()
    marker = log.append_control(9, 0, False, 0, 1)  # 10: ABORT, in the active segment
    hw = log.log_end_offset
    log.update_high_watermark(hw)
    rp = tier.partition(TOPIC, 0)
    rp.copy_segments(log, 1, hw)
    m = rp.meta.load()
    assert [(s.base_offset, s.end_offset) for s in m.copy_finished] == [(0, 0), (1, 9)]
    aborted = AbortedTxn(9, 0, marker, hw)
    assert m.copy_finished[0].later_aborts == (aborted,) and m.copy_finished[0].txn_index_bytes == 0
    assert m.copy_finished[1].later_aborts == (aborted,)  # its data lies below: overlapping by offsets
    search = rp.aborted_transactions(0, 1)
    assert search.aborted == (aborted,) and search.complete
    assert rp.aborted_transactions(1, 10) == type(search)((aborted,), True)
    # Spark's planning sees it too (the manifest lists it; no .txnindex object exists)
    from lakelog.tiering.remote_scan import has_txn_index, remote_aborted_transactions
    assert has_txn_index(m, 0) and remote_aborted_transactions(store, TOPIC, 0, m, 0) == [aborted]
    log.close()


def test_manifests_without_later_aborts_fall_back_to_later_txnindex_objects(tmp_path, store, tier):
    """An entry written before `later_aborts` existed (None) makes the reader walk the later
    segments' `.txnindex` objects, and answer incomplete when it runs out of them."""
    import dataclasses

    from lakelog.index.transaction_index import AbortedTxn
    from lakelog.logstore.record_batch import Record, build_batch
    from lakelog.tiering import manifest_codec

    log = make_log(tmp_path)
    now = int(time.time() * 1000)
    log.append_as_leader(build_batch([Record(0, now, b"k", b"v")], producer_id=9, producer_epoch=0,
                                     base_sequence=0, is_transactional=True), 1)
    log.roll()
    fill_log(log, 3, leader_epoch=1)
    marker = log.append_control(9, 0, False, 0, 1)  # 10: ABORT, in segment 1
    log.roll()
    fill_log(log, 1, leader_epoch=1)
    hw = log.log_end_offset
    log.update_high_watermark(hw)
    rp = tier.partition(TOPIC, 0)
    rp.copy_segments(log, 1, hw)
    aborted = AbortedTxn(9, 0, marker, marker + 1)
    old = rp.meta.load()
    legacy = dataclasses.replace(old, segments=tuple(dataclasses.replace(s, later_aborts=None) for s in old.segments))
    assert manifest_codec.decode(manifest_codec.encode(legacy)) == legacy
    assert b"later_aborts" not in manifest_codec.encode(legacy)
    assert manifest_codec.decode(manifest_codec.encode(old)) == old
    store.put(f"{TOPIC}-0/manifest.json", manifest_codec.encode(legacy))
    fresh = make_tier(store, **{"remote.log.metadata.max.age.ms": 0})
    try:
        search = fresh.partition(TOPIC, 0).aborted_transactions(0, 1)
        assert search == type(search)((aborted,), True)  # found in segment 1's .txnindex, its LSO ends it
    finally:
        fresh.close()
    log.close()
