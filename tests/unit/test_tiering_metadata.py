"""Manifest commits: compare-and-swap races between writers, leader-epoch fencing, topic-id fencing."""

from __future__ import annotations

import threading

import pytest

from lakelog.tiering import manifest_transitions
from lakelog.tiering.errors import (
    FencedLeaderEpochError,
    ManifestConflictError,
    ManifestInvariantError,
    PreconditionFailedError,
    RemotePartitionDeletedError,
    TopicIdMismatchError,
)
from lakelog.tiering.fs_store import FileSystemStore
from lakelog.tiering.manifest_model import RemoteSegment, SegmentState
from lakelog.tiering.metadata import ManifestStore
from tests.support.tiering import InstrumentedStore

S = SegmentState


def seg(base: int, end: int, n: int | None = None) -> RemoteSegment:
    return RemoteSegment(f"{(n if n is not None else base):032x}", base, end, 1000, 10, (), S.COPY_STARTED, 1)


def add_and_finish(base: int, end: int, epoch: int, n: int | None = None):
    s = seg(base, end, n)
    return lambda m: manifest_transitions.finish_copy(manifest_transitions.start_copy(m, s), s.segment_id, epoch=epoch, now_ms=1)


@pytest.fixture
def store(tmp_path):
    return InstrumentedStore(FileSystemStore(tmp_path / "remote"))


def writer(store, **kw) -> ManifestStore:
    return ManifestStore(store, "orders", 0, sleep=lambda s: None, **kw)


def test_first_commit_creates_the_manifest_and_later_ones_replace_it(store):
    a = writer(store)
    m = a.commit(1, add_and_finish(0, 9, 1))
    assert (m.generation, m.leader_epoch, m.end_offset) == (1, 1, 9)
    assert store.count("put_if_absent") == 1
    m = a.commit(1, add_and_finish(10, 19, 1))
    assert (m.generation, m.end_offset) == (2, 19)
    assert store.count("put_if_match") == 1
    assert writer(store).load() == m  # what another process reads


def test_a_change_that_changes_nothing_writes_nothing(store):
    a = writer(store)
    a.commit(1, add_and_finish(0, 9, 1))
    puts = store.count()
    assert a.commit(1, lambda m: manifest_transitions.finish_copy(m, f"{0:032x}", epoch=1, now_ms=2)).generation == 1
    assert store.count() == puts


def test_racing_writers_the_loser_rereads_and_reapplies_its_change(store):
    a, b = writer(store), writer(store)
    a.commit(1, add_and_finish(0, 9, 1))
    b.load()
    a.commit(1, mf_set_checkpoint(5))  # b's cached etag is now stale
    m = b.commit(1, add_and_finish(10, 19, 1))
    assert b.conflicts == 1
    assert m.end_offset == 19 and m.cleaner_checkpoint == 5  # a's change kept, b's applied on top
    assert writer(store).load() == m


def mf_set_checkpoint(offset):
    return lambda m: manifest_transitions.set_cleaner_checkpoint(m, offset)


def test_racing_writers_the_loser_gives_up_when_its_change_is_no_longer_valid(store):
    """Two writers race to add the same next range: one wins, the other's retry finds the range
    taken and refuses (no duplicate)."""
    a, b = writer(store), writer(store)
    a.commit(1, add_and_finish(0, 9, 1))
    b.load()
    a.commit(1, add_and_finish(10, 19, 1, n=1))
    with pytest.raises(ManifestInvariantError, match="continue"):
        b.commit(1, add_and_finish(10, 19, 1, n=2))
    m = writer(store).load()
    assert [s.segment_id for s in m.copy_finished] == [f"{0:032x}", f"{1:032x}"]


def test_concurrent_threads_all_land_without_losing_an_update(store):
    writers = [writer(store, max_attempts=1000) for _ in range(6)]
    writers[0].commit(1, add_and_finish(0, 9, 1))
    barrier = threading.Barrier(len(writers))

    def run(w: ManifestStore, k: int):
        barrier.wait()
        for i in range(10):
            w.commit(1, lambda m: manifest_transitions.set_cleaner_checkpoint(m, (m.cleaner_checkpoint or 0) + 1))

    threads = [threading.Thread(target=run, args=(w, k)) for k, w in enumerate(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    m = writer(store).load()
    assert m.cleaner_checkpoint == 60 and m.generation == 61


def test_a_stale_leader_epoch_is_fenced(store):
    old, new = writer(store), writer(store)
    old.commit(3, add_and_finish(0, 9, 3))
    new.commit(4, lambda m: manifest_transitions.claim(m, 4))
    with pytest.raises(FencedLeaderEpochError, match="epoch 3 is fenced"):
        old.commit(3, add_and_finish(10, 19, 3))
    m = writer(store).load()
    assert m.leader_epoch == 4 and m.end_offset == 9
    # equal or higher epochs may commit; the manifest's epoch never goes down
    assert new.commit(4, add_and_finish(10, 19, 4)).end_offset == 19
    assert new.commit(7, mf_set_checkpoint(1)).leader_epoch == 7


def test_fencing_applies_after_a_lost_race_too(store):
    zombie, leader = writer(store), writer(store)
    zombie.commit(2, add_and_finish(0, 9, 2))
    leader.load()
    leader.commit(5, lambda m: manifest_transitions.claim(m, 5))
    # the zombie's cache still says epoch 2: its PUT loses the race, the re-read fences it
    with pytest.raises(FencedLeaderEpochError):
        zombie.commit(2, add_and_finish(10, 19, 2))


def test_conflicts_are_bounded(store):
    a = writer(store, max_attempts=3)
    a.commit(1, add_and_finish(0, 9, 1))
    store.fail("put_if_match", error=PreconditionFailedError("lost"), times=None)
    with pytest.raises(ManifestConflictError):
        a.commit(1, mf_set_checkpoint(1))
    assert a.conflicts == 3


def test_topic_id_fencing_and_tombstones(store):
    old = ManifestStore(store, "orders", 0, topic_id="A")
    old.commit(1, add_and_finish(0, 9, 1))
    with pytest.raises(TopicIdMismatchError):
        ManifestStore(store, "orders", 0, topic_id="B").commit(9, mf_set_checkpoint(1))
    old.commit(1, lambda m: manifest_transitions.mark_deleted(m, epoch=1, now_ms=1), force=True, allow_deleted=True)
    with pytest.raises(RemotePartitionDeletedError):
        old.commit(5, mf_set_checkpoint(1))
    with pytest.raises(RemotePartitionDeletedError):
        ManifestStore(store, "orders", 0, topic_id="A").commit(5, mf_set_checkpoint(1))
    # a new incarnation takes over the tombstone with a fresh manifest
    new = ManifestStore(store, "orders", 0, topic_id="B")
    m = new.commit(0, add_and_finish(0, 4, 0))
    assert (m.topic_id, m.deleted, m.end_offset, m.leader_epoch) == ("B", False, 4, 0)
    assert m.generation > 2


def test_corrupt_manifest_is_refused_not_overwritten(store):
    a = writer(store)
    a.commit(1, add_and_finish(0, 9, 1))
    path = store.inner.root / "orders-0" / "manifest.json"
    raw = bytearray(path.read_bytes())
    raw[raw.index(b'"end_offset":9') + 13] = ord("8")
    path.write_bytes(bytes(raw))
    from lakelog.tiering.errors import ManifestFormatError
    with pytest.raises(ManifestFormatError, match="CRC"):
        writer(store).load()
