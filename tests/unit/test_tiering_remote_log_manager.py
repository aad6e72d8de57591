"""The remote log manager's bounded pool (ingest_api/broker/remote_log_manager.py) and the sweep of data
that topic deletions left in the remote tier (RemoteTier.sweep_deleted_topics), on the filesystem
store."""

from __future__ import annotations

import threading

import pytest

from lakelog.infra.config import LogConfig
from lakelog.ingest_api.broker.remote_log_manager import RemoteLogManagerPool
from lakelog.logstore.log import PartitionLog
from lakelog.tiering.config import TieringConfig
from lakelog.tiering.fs_store import FileSystemStore
from lakelog.tiering.layout import segment_keys
from lakelog.tiering.manager import RemoteTier, parse_partition_dir
from tests.support.tiering import InstrumentedStore, fill_log

#: Bound of every wait in these tests (never reached when the code is right).
WAIT_S = 10


# ---------------------------------------------------------------------------------------------
# the pool


def test_a_round_runs_partitions_in_parallel_up_to_the_pool_size():
    threads = 4
    barrier = threading.Barrier(threads, timeout=WAIT_S)  # broken unless 4 tasks run at once
    lock = threading.Lock()
    running, peak, done = [0], [0], []

    def task(p: int) -> None:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        try:
            if p < threads:
                barrier.wait()
        finally:
            with lock:
                running[0] -= 1
                done.append(p)

    pool = RemoteLogManagerPool(threads, task)
    try:
        assert pool.run_round(range(12), threading.Event()) == 12
    finally:
        pool.close()
    assert sorted(done) == list(range(12))
    assert peak[0] == threads  # the first four met at the barrier; never more than four at once


def test_a_failing_or_slow_partition_does_not_hold_the_others():
    release = threading.Event()
    done = []

    def task(p: int) -> None:
        if p == 0:
            raise RuntimeError("store down for this partition")
        if p == 1:
            assert release.wait(WAIT_S)
        done.append(p)
        if len(done) == 3:  # partitions 2, 3, 4 finished while 1 was still blocked
            release.set()

    pool = RemoteLogManagerPool(2, task)
    try:
        assert pool.run_round(range(5), threading.Event()) == 5
    finally:
        pool.close()
    assert sorted(done) == [1, 2, 3, 4] and done[-1] == 1


def test_stopping_cancels_what_has_not_started():
    stopping = threading.Event()
    started = []
    gate = threading.Event()

    def task(p: int) -> None:
        started.append(p)
        stopping.set()
        gate.wait(WAIT_S)

    pool = RemoteLogManagerPool(1, task)
    try:
        finished = pool.run_round(range(10), stopping)
    finally:
        gate.set()
        pool.close()
    assert started == [0] and finished <= 1


def test_the_pool_needs_a_thread():
    with pytest.raises(ValueError):
        RemoteLogManagerPool(0, lambda p: None)


# ---------------------------------------------------------------------------------------------
# the sweep of deleted topics


@pytest.fixture
def store(tmp_path):
    return InstrumentedStore(FileSystemStore(tmp_path / "remote"))


def tiered(tmp_path, tier, topic: str, topic_id: str, partition: int = 0) -> None:
    log = PartitionLog(tmp_path / "logs" / f"{topic}-{partition}-{topic_id}",
                       LogConfig({"segment.bytes": 2048, "retention.ms": -1}))
    fill_log(log, 20, leader_epoch=1)
    tier.partition(topic, partition, topic_id=topic_id).copy_segments(log, 1, log.log_end_offset)
    log.close()


def segment_objects(store, topic: str, partition: int = 0) -> list[str]:
    return [o.key for o in store.list(f"{topic}-{partition}/") if not o.key.endswith("manifest.json")]


def test_partition_dirs_are_parsed_back():
    assert parse_partition_dir("orders-0") == ("orders", 0)
    assert parse_partition_dir("my-topic-12") == ("my-topic", 12)
    assert parse_partition_dir("orders") is None
    assert parse_partition_dir("orders-x") is None
    assert parse_partition_dir("-3") is None


def test_the_sweep_deletes_only_deleted_topics_after_the_grace_period(tmp_path, store):
    tier = RemoteTier(store, TieringConfig({"remote.segment.delete.delay.ms": 0}))
    with tier:
        tiered(tmp_path, tier, "kept", "id-kept")
        tiered(tmp_path, tier, "gone", "id-gone")
        tiered(tmp_path, tier, "gone", "id-gone", partition=1)
        tiered(tmp_path, tier, "reborn", "id-old")  # deleted, then created again under a new id
        live = {"kept": "id-kept", "reborn": "id-new"}
        now = max(o.last_modified_ms for o in store.list(""))
        # inside the grace period: nothing is deleted
        early = tier.sweep_deleted_topics(live, grace_ms=60_000, now_ms=now + 1_000)
        assert not early.deleted and sorted(early.too_recent) == ["gone-0/", "gone-1/", "reborn-0/"]
        assert segment_objects(store, "gone") and segment_objects(store, "reborn")
        report = tier.sweep_deleted_topics(live, grace_ms=60_000, now_ms=now + 61_000)
        assert sorted(report.deleted) == ["gone-0/", "gone-1/", "reborn-0/"] and not report.errors
        assert report.partitions_examined == 4
        assert not segment_objects(store, "gone") and not segment_objects(store, "gone", 1)
        assert not segment_objects(store, "reborn")
        assert segment_objects(store, "kept"), "a live topic's data is never touched"
        # the tombstones stay; the new incarnation takes the name over
        assert tier.partition("gone", 0).manifest(max_age_ms=0).deleted
        log = PartitionLog(tmp_path / "logs" / "reborn-new", LogConfig({"segment.bytes": 2048, "retention.ms": -1}))
        fill_log(log, 20, leader_epoch=1)
        rp = tier.partition("reborn", 0, topic_id="id-new")
        assert rp.copy_segments(log, 1, log.log_end_offset).uploaded
        assert rp.manifest(max_age_ms=0).topic_id == "id-new"
        log.close()
        # a second sweep has nothing left to do, and leaves the new incarnation alone
        again = tier.sweep_deleted_topics(live, grace_ms=0, now_ms=now + 120_000)
        assert not again.deleted and segment_objects(store, "reborn")


def test_the_sweep_deletes_orphan_objects_without_a_manifest(tmp_path, store):
    tier = RemoteTier(store, TieringConfig())
    with tier:
        keys = segment_keys("lost", 3, 0, "a" * 32)
        for k in keys:
            store.put(k, b"left behind")
        report = tier.sweep_deleted_topics({}, grace_ms=0, now_ms=10**13)
        assert report.deleted == ["lost-3/"] and report.objects_deleted == len(keys)
        assert not segment_objects(store, "lost", 3)


def test_a_store_error_is_reported_and_the_next_sweep_retries(tmp_path, store):
    tier = RemoteTier(store, TieringConfig({"remote.segment.delete.delay.ms": 0}))
    with tier:
        tiered(tmp_path, tier, "gone", "id-gone")
        store.fail("delete")
        report = tier.sweep_deleted_topics({}, grace_ms=0, now_ms=10**13)
        assert report.errors and not report.deleted and segment_objects(store, "gone")
        report = tier.sweep_deleted_topics({}, grace_ms=0, now_ms=10**13)
        assert report.deleted == ["gone-0/"] and not segment_objects(store, "gone")
