"""The orphan rule and a partition's sweep (tiering/orphans.py), shared by the leader's sweep and
the rebuild-index job: segment objects of unknown or DELETE_FINISHED segments go; objects of
COPY_FINISHED and DELETE_STARTED segments, and objects that are not segment objects, stay."""

from __future__ import annotations

from lakelog.infra.config import LogConfig
from lakelog.logstore.log import PartitionLog
from lakelog.tiering.config import TieringConfig
from lakelog.tiering.fs_store import FileSystemStore
from lakelog.logstore.segment import INDEX_SUFFIX, TIME_INDEX_SUFFIX
from lakelog.tiering.layout import segment_key, segment_keys
from lakelog.tiering.manager import RemoteTier
from lakelog.tiering.manifest_model import SegmentState
from lakelog.tiering.metadata import ManifestStore
from lakelog.tiering.orphans import orphan_keys, sweep_orphans
from tests.support.tiering import fill_log

TOPIC = "orders"


def test_only_objects_no_live_entry_owns_are_swept(tmp_path):
    store = FileSystemStore(tmp_path / "remote")
    tier = RemoteTier(store, TieringConfig({"remote.segment.delete.delay.ms": 3_600_000,
                                            "remote.log.copy.max.segments.per.round": 1000}))
    log = PartitionLog(tmp_path / "log" / f"{TOPIC}-0",
                       LogConfig({"segment.bytes": 2048, "index.interval.bytes": 256, "retention.ms": -1}))
    fill_log(log, 80, leader_epoch=1)
    rp = tier.partition(TOPIC, 0)
    rp.copy_segments(log, 1, log.log_end_offset)
    segs = ManifestStore(store, TOPIC, 0).load().copy_finished
    assert len(segs) >= 4
    # segs[0]: expired and deleted (DELETE_FINISHED); segs[1]: expired, its delay not over (DELETE_STARTED).
    total = sum(s.size_in_bytes for s in segs)
    rp.enforce_retention(1, retention_ms=-1, retention_bytes=total - segs[0].size_in_bytes, now_ms=1_000)
    rp.cleanup(1, now_ms=1_000 + 3_600_000)
    rp.enforce_retention(1, retention_ms=-1, retention_bytes=total - segs[0].size_in_bytes - segs[1].size_in_bytes,
                         now_ms=2 * 3_600_000)
    m = ManifestStore(store, TOPIC, 0).load()
    assert m.segment(segs[0].segment_id).state == SegmentState.DELETE_FINISHED
    assert m.segment(segs[1].segment_id).state == SegmentState.DELETE_STARTED
    late = [segment_key(TOPIC, 0, segs[0].base_offset, segs[0].segment_id, s) for s in (INDEX_SUFFIX, TIME_INDEX_SUFFIX)]
    unknown = segment_keys(TOPIC, 0, segs[-1].end_offset + 1, "e" * 32)
    for key in late + unknown + [f"{TOPIC}-0/notes.txt"]:
        store.put(key, b"x")
    before = {o.key for o in store.list(f"{TOPIC}-0/")}

    assert sorted(orphan_keys(sorted(before), m)) == sorted(late + unknown)
    deleted, manifest = sweep_orphans(store, TOPIC, 0)
    assert sorted(deleted) == sorted(late + unknown) and manifest == m
    after = {o.key for o in store.list(f"{TOPIC}-0/")}
    assert after == before - set(late + unknown)
    owned = {k for s in segs[1:] for k in segment_keys(TOPIC, 0, s.base_offset, s.segment_id)}
    assert owned <= after and f"{TOPIC}-0/notes.txt" in after
    # The leader's sweep follows the same rule: nothing left for it.
    assert rp.sweep_orphans() == []
    assert sweep_orphans(store, TOPIC, 0)[0] == []
