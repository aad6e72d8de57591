"""How rebuild-index cuts its work into tasks (runs of segments, tiering/index_rebuild_tasks.py)
and the work of one task: one manifest read and at most ONE manifest compare-and-swap per run,
the rows and the stored objects as the per-segment rebuild makes them."""

from __future__ import annotations

from typing import NamedTuple

import pytest

from lakelog.infra.config import ConfigError
from lakelog.tiering.index_rebuild import rebuild_segment
from lakelog.tiering.index_rebuild_tasks import RebuildJobConfig, RebuildRun, plan_rebuild_tasks, rebuild_run
from lakelog.logstore.segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX
from lakelog.tiering.layout import manifest_key, segment_key
from lakelog.tiering.remote_scan import load_manifest
from tests.integration.test_remote_compaction import TOPIC, build_remote

MIB = 1024 * 1024


class Seg(NamedTuple):
    segment_id: str
    size_in_bytes: int


def _partitions(count: int, per: int, size: int):
    return [("t", p, 4096, [Seg(f"{p}-{i}", size) for i in range(per)]) for p in range(count)]


def _flat(tasks):
    return [(r.topic, r.partition, sid) for task in tasks for r in task for sid in r.segment_ids]


def test_segments_are_cut_into_one_task_per_core_in_order_within_the_bound():
    parts = _partitions(4, 8, 4 * MIB)  # the bench's shape: 32 segments of 4 MiB in 4 partitions
    tasks = plan_rebuild_tasks(parts, max_bytes=128 * MIB, cores=2)
    assert len(tasks) == 2
    assert _flat(tasks) == [("t", p, s.segment_id) for _, p, _, segs in parts for s in segs]  # all, in order, once
    # each task holds two whole partitions, one run (one manifest CAS at most) per partition
    assert [[(r.partition, len(r.segment_ids)) for r in task] for task in tasks] == [[(0, 8), (1, 8)], [(2, 8), (3, 8)]]
    assert all(isinstance(r, RebuildRun) and r.index_interval_bytes == 4096 for task in tasks for r in task)

    # The bound holds over the cores: 10 MiB per task at most -> 2 segments of 4 MiB each.
    tasks = plan_rebuild_tasks(parts, max_bytes=10 * MIB, cores=2)
    assert len(tasks) == 16 and all(sum(len(r.segment_ids) for r in t) == 2 for t in tasks)
    # A segment larger than the bound is a task of its own.
    tasks = plan_rebuild_tasks([("t", 0, 1, [Seg("a", 1 * MIB), Seg("big", 50 * MIB), Seg("c", 1 * MIB)])],
                               max_bytes=10 * MIB, cores=1)
    assert [[sid for r in t for sid in r.segment_ids] for t in tasks] == [["a"], ["big"], ["c"]]
    # Little data is one task whatever the cores (a second Python worker would cost more than it reads).
    tasks = plan_rebuild_tasks(_partitions(3, 2, 10_000), max_bytes=128 * MIB, cores=8)
    assert len(tasks) == 1 and len(_flat(tasks)) == 6
    # Uneven partitions over 3 cores: 3 tasks, each within one segment of a third of the bytes.
    parts = [("t", 0, 1, [Seg(f"a{i}", 3 * MIB) for i in range(10)]), ("u", 0, 1, [Seg(f"b{i}", 5 * MIB) for i in range(3)])]
    tasks = plan_rebuild_tasks(parts, max_bytes=1 << 40, cores=3)
    sizes = [sum({"a": 3, "b": 5}[sid[0]] for r in t for sid in r.segment_ids) for t in tasks]
    assert len(tasks) == 3 and sum(sizes) == 45 and all(abs(s - 15) <= 5 for s in sizes), sizes
    assert plan_rebuild_tasks([], max_bytes=MIB, cores=2) == []
    assert RebuildJobConfig().rebuild_task_max_bytes == 128 * MIB
    with pytest.raises(ConfigError, match="rebuild.task.max.bytes"):
        RebuildJobConfig({"rebuild.task.max.bytes": "10"})


class CountingStore:
    """The store, counting the manifest writes (the compare-and-swap PUTs)."""

    def __init__(self, store) -> None:
        self.store = store
        self.manifest_writes = 0

    def __getattr__(self, name):
        return getattr(self.store, name)

    def put_if_match(self, key, data, etag):
        self.manifest_writes += key == manifest_key(TOPIC, 0)
        return self.store.put_if_match(key, data, etag)


def test_a_run_commits_its_changed_indexes_with_one_manifest_write(tmp_path):
    base, _, _, _ = build_remote(tmp_path, batches=400, log_cfg={"cleanup.policy": "delete"})
    store = CountingStore(base)
    segs = load_manifest(store, TOPIC, 0).copy_finished
    assert len(segs) >= 4
    run = RebuildRun(TOPIC, 0, 512, tuple(s.segment_id for s in segs) + ("no-such-segment",))

    rows = rebuild_run(store, run, mode="all")  # the uploader's interval: the same objects, no CAS
    assert [r["index_action"] for r in rows] == ["rebuilt"] * len(segs) + ["gone"]
    assert [r["segment_id"] for r in rows] == list(run.segment_ids)
    assert all(r["batch_count"] > 0 and r["base_offset"] == s.base_offset for r, s in zip(rows, segs))
    assert store.manifest_writes == 0

    # index.interval.bytes changed since the upload: every segment's indexes differ -> ONE CAS for all.
    rows = rebuild_run(store, run._replace(index_interval_bytes=64), mode="all")
    assert [r["index_action"] for r in rows[:-1]] == ["manifest-updated"] * len(segs)
    assert store.manifest_writes == 1
    after = {s.segment_id: s for s in load_manifest(store, TOPIC, 0).copy_finished}
    for s in segs:
        for suffix, size, crc in ((INDEX_SUFFIX, "index_bytes", "index_crc32c"),
                                  (TIME_INDEX_SUFFIX, "time_index_bytes", "time_index_crc32c")):
            data = store.get(segment_key(TOPIC, 0, s.base_offset, s.segment_id, suffix))[0]
            assert len(data) == getattr(after[s.segment_id], size) and getattr(after[s.segment_id], size) > 0
        assert after[s.segment_id].index_bytes > s.index_bytes  # an entry every 64 bytes, not 512
    # the manifest's record is what a per-segment rebuild at that interval finds: nothing left to do
    assert all(rebuild_segment(store, TOPIC, 0, after[s.segment_id], index_interval_bytes=64).index_action == "ok"
               for s in segs)
    assert store.manifest_writes == 1


def test_a_corrupt_log_in_a_run_is_reported_and_the_others_are_rebuilt(tmp_path):
    store, _, _, _ = build_remote(tmp_path, batches=400, log_cfg={"cleanup.policy": "delete"})
    segs = load_manifest(store, TOPIC, 0).copy_finished
    bad = segs[1]
    log_key = segment_key(TOPIC, 0, bad.base_offset, bad.segment_id, LOG_SUFFIX)
    data = bytearray(store.get(log_key)[0])
    data[len(data) // 2] ^= 0x40
    store.put(log_key, bytes(data))
    index_key = segment_key(TOPIC, 0, bad.base_offset, bad.segment_id, INDEX_SUFFIX)
    before = store.get(index_key)[0]
    rows = rebuild_run(store, RebuildRun(TOPIC, 0, 64, tuple(s.segment_id for s in segs)), mode="all")
    actions = [r["index_action"] for r in rows]
    assert actions[1] == "corrupt-log" and log_key in rows[1]["detail"]
    assert actions[:1] + actions[2:] == ["manifest-updated"] * (len(segs) - 1)
    assert store.get(index_key)[0] == before  # nothing written from damaged bytes, nor recorded
    assert load_manifest(store, TOPIC, 0).segment(bad.segment_id).index_bytes == bad.index_bytes
