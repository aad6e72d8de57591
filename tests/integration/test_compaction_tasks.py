"""Compaction of one partition spread over several tasks (compaction/remote_split.py, run as Spark
stages by spark_log/compaction_job.py): the result equals the one-task round's
(`compact_partition`), more than one Spark task works on one partition, and the offset map keeps
its configured bound by mapping a prefix, as the one-task round does."""

from __future__ import annotations

import shutil

import pyarrow as pa
import pytest

from lakelog.compaction.bounded_map import TABLE_OVERHEAD_BYTES, entry_bytes
from lakelog.compaction.errors import OffsetMapTooSmallError
from lakelog.compaction.remote import compact_partition
from lakelog.infra.config import ConfigError
from lakelog.compaction.remote_split import (
    PartialMap,
    _from_ipc,
    _to_ipc,
    map_segments,
    merge_partials,
    open_round,
    rewrite_run,
)
from lakelog.tiering.fs_store import FileSystemStore
from lakelog.tiering.remote_scan import load_manifest
from lakelog.tiering.topics import TopicDescriptor, write_topic_descriptor
from tests.integration.test_remote_compaction import DAY, TOPIC, build_remote, config, reference, remote_records

COMPACT = {"cleanup.policy": "compact", "segment.bytes": "12000", "index.interval.bytes": "512"}


def _partial(first: int, pairs: list[tuple[bytes, int]], cut: int | None = None, full: bool = False) -> PartialMap:
    table = pa.table({"key": pa.array([k for k, _ in pairs], pa.binary()),
                      "offset": pa.array([o for _, o in pairs], pa.int64())})
    return PartialMap(first, _to_ipc(table), cut, full)


def test_merged_maps_keep_the_latest_offset_and_stop_where_the_bound_is_reached():
    a = _partial(0, [(b"a", 3), (b"b", 5)])
    b = _partial(10, [(b"a", 12), (b"c", 11)])
    merged, end = merge_partials([a, b], start_offset=0, end_offset=20, max_bytes=1 << 20)
    assert dict(zip(merged.keys.to_pylist(), merged.offsets.to_pylist())) == {b"a": 12, b"b": 5, b"c": 11}
    assert end == 20
    # A bound that holds the first run's keys but not both runs': the map ends where the second run starts.
    merged, end = merge_partials([a, b], start_offset=0, end_offset=20, max_bytes=2 * entry_bytes(1) + TABLE_OVERHEAD_BYTES)
    assert dict(zip(merged.keys.to_pylist(), merged.offsets.to_pylist())) == {b"a": 3, b"b": 5}
    assert end == 10
    # A run that stopped inside (its own bound, or the end of the dirty section) ends the map there.
    merged, end = merge_partials([a, _partial(10, [(b"d", 10)], cut=11, full=True), b], start_offset=0,
                                 end_offset=20, max_bytes=1 << 20)
    assert end == 11 and sorted(merged.keys.to_pylist()) == [b"a", b"b", b"d"]
    with pytest.raises(OffsetMapTooSmallError):
        merge_partials([_partial(0, [], cut=0, full=True)], start_offset=0, end_offset=20, max_bytes=100)


def _split_round(store, cfg, *, now_ms, task_bytes, map_bytes=1 << 30, force=False):
    """A split round driven without Spark: the same steps the job's stages run, in this process."""
    r = open_round(store, TOPIC, 0, cfg, owner="test", now_ms=now_ms, force=force, delete_delay_ms=0,
                   max_map_bytes=map_bytes, task_max_bytes=task_bytes)
    if not hasattr(r, "merge"):
        return r, 0, 0
    segs = {s.segment_id: s for s in load_manifest(store, TOPIC, 0).segments}
    s = r.section
    runs = r.map_tasks()
    r.merge([map_segments(store, TOPIC, 0, [segs[i] for i, _, _ in run], start_offset=s.first_dirty,
                          end_offset=s.uncleanable, max_bytes=map_bytes,
                          max_uncompressed_bytes=cfg.max_uncompressed_batch_bytes,
                          pieces=[(lo, hi) for _, lo, hi in run]) for run in runs])
    segs = {s.segment_id: s for s in load_manifest(store, TOPIC, 0).segments}
    results = [rewrite_run(store, TOPIC, 0, [[segs[i] for i in g] for g in t.groups], t.ids, r.map_ipc(), r.map_end,
                           cfg, now_ms) for t in r.rewrites]
    return r.finish(results), len(runs), len(r.rewrites)


@pytest.mark.parametrize("lag", [0, 1], ids=["no-lag", "min.compaction.lag.ms"])
@pytest.mark.parametrize("task_bytes", [9000, 1500], ids=["segment-runs", "segment-pieces"])
def test_a_split_round_equals_the_one_task_round(tmp_path, lag, task_bytes):
    """Tombstones, delete horizons and min.compaction.lag.ms through several rounds: the records
    after each split round are the one-task round's, and so are the cleaner checkpoints. With
    compaction.task.max.bytes below the segments' size (4,000 B), each segment's map work is cut
    into pieces at its offset index (index.interval.bytes 512), one or more map tasks each."""
    store, _, _, written = build_remote(tmp_path, batches=500, keys=60)
    segments = load_manifest(store, TOPIC, 0).copy_finished
    if task_bytes < 4000:
        assert max(s.size_in_bytes for s in segments) > 2 * task_bytes
    twin = FileSystemStore(shutil.copytree(tmp_path / "remote", tmp_path / "twin"))
    before = remote_records(store)
    end = load_manifest(store, TOPIC, 0).end_offset
    boundary_ts = written[len(written) * 2 // 3][1]
    now = 2_000_000
    cfg = config(**({"min.compaction.lag.ms": now - boundary_ts} if lag else {}))
    report, maps, rewrites = _split_round(store, cfg, now_ms=now, task_bytes=task_bytes)
    one = compact_partition(twin, TOPIC, 0, cfg, owner="test", now_ms=now, delete_delay_ms=0)
    assert report.action == one.action == "compacted", (report, one)
    assert maps > 1 and rewrites > 1
    if task_bytes < 4000:
        assert maps > 2 * len(segments), (maps, len(segments))
    assert remote_records(store) == remote_records(twin)
    assert load_manifest(store, TOPIC, 0).cleaner_checkpoint == load_manifest(twin, TOPIC, 0).cleaner_checkpoint
    if not lag:
        assert remote_records(store) == reference(before, end + 1, drop_tombstones=False)
    assert report.records_read == one.records_read and report.records_kept == one.records_kept
    # After delete.retention.ms the tombstones go, in both.
    later = now + DAY + 1
    report, _, _ = _split_round(store, cfg, now_ms=later, task_bytes=task_bytes, force=True)
    compact_partition(twin, TOPIC, 0, cfg, owner="test", now_ms=later, delete_delay_ms=0, force=True)
    assert remote_records(store) == remote_records(twin)
    if not lag:
        assert remote_records(store) == reference(before, end + 1, drop_tombstones=True)
    # Nothing left to drop: the split round writes nothing.
    ids = [s.segment_id for s in load_manifest(store, TOPIC, 0).copy_finished]
    again, _, _ = _split_round(store, cfg, now_ms=later + 1, task_bytes=task_bytes, force=True)
    assert again.action == "none" and again.reason == "nothing to drop", again
    assert [s.segment_id for s in load_manifest(store, TOPIC, 0).copy_finished] == ids
    assert not [s for s in load_manifest(store, TOPIC, 0).segments if s.is_staged]


def test_a_segment_whose_offset_index_is_damaged_is_mapped_whole(tmp_path):
    """The offset index is derived data: a large segment whose `.index` object does not match its
    manifest entry is one map task's work instead of failing the round; the records after the
    round are still the one-task round's."""
    store, _, _, _ = build_remote(tmp_path, batches=300, keys=40)
    twin = FileSystemStore(shutil.copytree(tmp_path / "remote", tmp_path / "twin"))
    segments = load_manifest(store, TOPIC, 0).copy_finished
    for index in (tmp_path / "remote").rglob("*.index"):
        index.write_bytes(b"\xff" * 8 + index.read_bytes()[8:])
    cfg = config()
    report, maps, _ = _split_round(store, cfg, now_ms=2_000_000, task_bytes=1500, force=True)
    compact_partition(twin, TOPIC, 0, cfg, owner="test", now_ms=2_000_000, delete_delay_ms=0, force=True)
    assert report.action == "compacted" and maps == len(segments), (report, maps)
    assert remote_records(store) == remote_records(twin)


def test_a_bounded_map_compacts_a_prefix_and_the_next_round_the_rest(tmp_path):
    """More distinct keys than compaction.offset.map.max.bytes holds: a round maps a prefix (its
    checkpoint lands before the end, below it every key is at its latest), the next rounds go on."""
    store, _, _, _ = build_remote(tmp_path, batches=3000, keys=6000, tombstone_every=10_000)
    before = remote_records(store)
    end = load_manifest(store, TOPIC, 0).end_offset
    cfg = config()
    bound = 64 * 1024  # about 3,400 keys of `key-NNNN`: fewer than the partition holds
    seg = load_manifest(store, TOPIC, 0).copy_finished[0]
    one = map_segments(store, TOPIC, 0, [seg], start_offset=0, end_offset=end + 1, max_bytes=bound,
                       max_uncompressed_bytes=cfg.max_uncompressed_batch_bytes)
    assert one.cut_offset is None  # one small segment fits
    report, _, _ = _split_round(store, cfg, now_ms=2_000_000, task_bytes=9000, map_bytes=bound)
    checkpoint = load_manifest(store, TOPIC, 0).cleaner_checkpoint
    assert report.action == "compacted" and 0 < checkpoint < end + 1, (report, checkpoint)
    assert report.extra["map_keys"] * 17 <= bound
    assert remote_records(store) == reference(before, checkpoint, drop_tombstones=False)
    rounds = 1
    while load_manifest(store, TOPIC, 0).cleaner_checkpoint < end + 1:
        _split_round(store, cfg, now_ms=2_000_000 + rounds, task_bytes=9000, map_bytes=bound, force=True)
        rounds += 1
        assert rounds < 10
    # Each round compacted its own dirty section: every key's latest record is there, every
    # record kept is the latest of its key within the round that mapped it.
    after = remote_records(store)
    assert {k: o for o, _, k, _ in after}.items() >= {k: o for o, _, k, _ in before}.items()
    assert len(after) < len(before)


def test_a_map_task_merges_its_chunks_in_linear_work(tmp_path, monkeypatch):
    """A map task over many small decoded chunks (most keys new in each): the same map as over one
    chunk, with the rows its merges aggregated counted (not timed): a small multiple of the keyed
    records, where merging every chunk into the whole map would take chunks x map size. Bounded,
    it stops where a chunk no longer fits, at a chunk's first batch, within the bound."""
    from lakelog.compaction import vectorized
    from lakelog.compaction.bounded_map import map_bytes

    if not vectorized.available():
        pytest.fail("the native decoder is not built (make native)")
    store, _, _, _ = build_remote(tmp_path, batches=3000, keys=6000, tombstone_every=10_000)
    cfg = config()
    segments = load_manifest(store, TOPIC, 0).copy_finished
    end = segments[-1].end_offset + 1

    def mapped(max_bytes):
        return map_segments(store, TOPIC, 0, segments, start_offset=0, end_offset=end, max_bytes=max_bytes,
                            max_uncompressed_bytes=cfg.max_uncompressed_batch_bytes)

    whole = mapped(1 << 30)
    monkeypatch.setattr(vectorized, "CHUNK_ROWS", 64)
    chunked = mapped(1 << 30)
    assert chunked.cut_offset is None and chunked.records == whole.records > 5000
    assert _from_ipc(chunked.map_ipc).sort_by("key").equals(_from_ipc(whole.map_ipc).sort_by("key"))
    chunks = chunked.records // 64
    keys = _from_ipc(whole.map_ipc).num_rows
    assert chunks > 50 and keys > 3000
    assert chunked.rows_grouped <= 3 * chunked.records, (chunked.rows_grouped, chunked.records)
    assert chunked.rows_grouped * 10 < chunks * keys // 2
    bound = map_bytes(_from_ipc(whole.map_ipc).column("key")) * 2 // 3  # two thirds of the run's keys
    cut = mapped(bound)
    table = _from_ipc(cut.map_ipc)
    assert cut.full and 0 < cut.cut_offset < end and map_bytes(table.column("key")) <= bound
    assert max(table.column("offset").to_pylist()) < cut.cut_offset
    # The map never held more than the bound (merged map + chunk maps waiting), though the run's
    # keys take more; unbounded it held them all.
    assert 0 < cut.peak_map_bytes <= bound < whole.peak_map_bytes
    # The chunks wait until the bound forces a merge: a few merges of the map, not one per chunk.
    assert cut.rows_grouped * 3 < (cut.records // 64) * table.num_rows // 2, (cut.rows_grouped, table.num_rows)


def test_a_map_task_at_the_smallest_bound_maps_a_prefix_of_distinct_keys(tmp_path):
    """Every key distinct, compaction.offset.map.max.bytes at its minimum (64 KiB): the task
    decodes chunks sized by the bound (remote_split.map_chunk_rows), so its map ends inside the
    run with the keys below the cut, instead of at the run's start because the first chunk's
    keys alone passed the bound (which failed the round)."""
    from lakelog.compaction import vectorized
    from lakelog.compaction.bounded_map import map_bytes
    from lakelog.compaction.remote_split import map_chunk_rows

    if not vectorized.available():
        pytest.fail("the native decoder is not built (make native)")
    assert map_chunk_rows(128 << 20) == vectorized.CHUNK_ROWS and map_chunk_rows(64 * 1024) == 128
    store, _, _, written = build_remote(tmp_path, batches=3000, keys=10_000_000, tombstone_every=10_000)
    cfg = config()
    segments = load_manifest(store, TOPIC, 0).copy_finished
    end = segments[-1].end_offset + 1
    bound = 64 * 1024
    cut = map_segments(store, TOPIC, 0, segments, start_offset=0, end_offset=end, max_bytes=bound,
                       max_uncompressed_bytes=cfg.max_uncompressed_batch_bytes)
    table = _from_ipc(cut.map_ipc)
    assert cut.full and 0 < cut.cut_offset < end
    assert 0 < cut.peak_map_bytes <= bound and map_bytes(table.column("key")) <= bound
    below = {k: o for o, _, k, _ in written if o < cut.cut_offset}
    assert dict(zip(table.column("key").to_pylist(), table.column("offset").to_pylist())) == below


# ---------------------------------------------------------------------------------------------
# the job on Spark


@pytest.fixture(scope="module")
def spark(spark_s3):
    from lakelog.spark_log.session import remote_session

    session = remote_session("s3://lakelog-spark/x", app_name="lakelog-compaction-tasks-test")
    yield session
    session.stop()


@pytest.mark.spark
def test_the_job_spreads_one_partition_over_several_tasks_and_equals_the_one_task_round(tmp_path, spark):
    from lakelog.spark_log.jobs import run_job

    store, _, _, _ = build_remote(tmp_path, batches=600, keys=50)
    write_topic_descriptor(store, TopicDescriptor(TOPIC, None, 1, COMPACT))
    before = remote_records(store)
    m0 = load_manifest(store, TOPIC, 0)
    assert len(m0.copy_finished) >= 10
    twin = FileSystemStore(shutil.copytree(tmp_path / "remote", tmp_path / "twin"))
    one = compact_partition(twin, TOPIC, 0, config(**{"segment.bytes": 12000}), owner="test", delete_delay_ms=0)

    summary = run_job(spark, "compaction", (tmp_path / "remote").as_uri(), delete_delay_ms=0,
                      overrides={"compaction.task.max.bytes": "9000"})
    assert summary.totals["compacted"] == 1, summary
    assert remote_records(store) == remote_records(twin) == reference(before, m0.end_offset + 1,
                                                                      drop_tombstones=False)
    assert load_manifest(store, TOPIC, 0).cleaner_checkpoint == load_manifest(twin, TOPIC, 0).cleaner_checkpoint
    assert summary.rows[0]["records_kept"] == one.records_kept
    # Spark's own account of the tasks: the map stage and the rewrite stage of this one partition
    # each ran more than one task.
    tracker = spark.sparkContext.statusTracker()
    assert len(summary.spark_job_groups) == 2
    for group in summary.spark_job_groups:
        stages = [tracker.getStageInfo(s) for j in tracker.getJobIdsForGroup(group)
                  for s in tracker.getJobInfo(j).stageIds]
        assert sum(s.numCompletedTasks for s in stages) > 1, (group, stages)
    again = run_job(spark, "compaction", (tmp_path / "remote").as_uri(), delete_delay_ms=0,
                    overrides={"compaction.task.max.bytes": "9000"})
    assert again.totals["compacted"] == 0 and again.rows[0]["reason"] == "nothing dirty"
    with pytest.raises(ConfigError, match="compaction.task.max.bytes"):
        run_job(spark, "compaction", (tmp_path / "remote").as_uri(), overrides={"compaction.task.max.bytes": "10"})


@pytest.mark.spark
def test_the_map_stage_runs_in_waves_and_a_partition_whose_map_ended_gets_no_more_map_tasks(tmp_path, spark):
    """compaction.map.tasks.per.wave bounds the task maps the driver holds: the map stage runs as
    one Spark job per wave, with the same records after the round as the one-task round. With a
    map bound that the first runs fill, the later runs' map tasks never run: the map ends where
    the first run that does not fit starts, and the next rounds compact the rest."""
    from lakelog.spark_log.jobs import run_job

    store, _, _, _ = build_remote(tmp_path / "a", batches=600, keys=50)
    write_topic_descriptor(store, TopicDescriptor(TOPIC, None, 1, COMPACT))
    twin = FileSystemStore(shutil.copytree(tmp_path / "a" / "remote", tmp_path / "twin"))
    compact_partition(twin, TOPIC, 0, config(**{"segment.bytes": 12000}), owner="test", delete_delay_ms=0)
    summary = run_job(spark, "compaction", (tmp_path / "a" / "remote").as_uri(), delete_delay_ms=0,
                      overrides={"compaction.task.max.bytes": "9000", "compaction.map.tasks.per.wave": "2"})
    extra = summary.rows[0]["extra"]
    assert summary.totals["compacted"] == 1 and extra["map_tasks"] > 4, summary
    assert extra["map_tasks_merged"] == extra["map_tasks"]
    assert len(summary.spark_job_groups) == -(-extra["map_tasks"] // 2) + 1  # the map waves, then the rewrite
    assert remote_records(store) == remote_records(twin)

    store, _, _, _ = build_remote(tmp_path / "b", batches=3000, keys=6000, tombstone_every=10_000)
    write_topic_descriptor(store, TopicDescriptor(TOPIC, None, 1, COMPACT))
    before = remote_records(store)
    end = load_manifest(store, TOPIC, 0).end_offset + 1
    bound = 64 * 1024  # about 3,400 keys of `key-NNNN`: fewer than the partition holds
    overrides = {"compaction.task.max.bytes": "9000", "compaction.map.tasks.per.wave": "1",
                 "compaction.offset.map.max.bytes": str(bound)}
    summary = run_job(spark, "compaction", (tmp_path / "b" / "remote").as_uri(), delete_delay_ms=0,
                      overrides=overrides)
    extra = summary.rows[0]["extra"]
    checkpoint = load_manifest(store, TOPIC, 0).cleaner_checkpoint
    assert summary.totals["compacted"] == 1 and 0 < checkpoint < end, (summary, checkpoint)
    assert extra["map_tasks_merged"] < extra["map_tasks"], extra
    assert len(summary.spark_job_groups) == extra["map_tasks_merged"] + 1
    assert extra["map_keys"] * 17 <= bound
    assert remote_records(store) == reference(before, checkpoint, drop_tombstones=False)


@pytest.mark.spark
def test_a_run_takes_its_partitions_in_groups_and_equals_the_one_task_rounds(tmp_path, spark, monkeypatch):
    """compaction.partitions.per.group bounds the partitions whose maps the driver holds: with a
    group of 2, a run over 5 partitions works on partitions {0, 1}, then {2, 3}, then {4} (every
    Spark job's tasks belong to one group, and only that group's leases are held while it runs),
    and each partition's records after the run are those of the one-task round."""
    import json
    import time

    from lakelog.spark_log import jobs
    from lakelog.tiering.lease import lease_key

    partitions = 5
    for p in range(partitions):
        build_remote(tmp_path, batches=300, keys=40, partition=p, seed=p)
    store = FileSystemStore(tmp_path / "remote")
    write_topic_descriptor(store, TopicDescriptor(TOPIC, None, partitions, COMPACT))
    twin = FileSystemStore(shutil.copytree(tmp_path / "remote", tmp_path / "twin"))
    for p in range(partitions):
        compact_partition(twin, TOPIC, p, config(**{"segment.bytes": 12000}), owner="test", delete_delay_ms=0)

    seen: list[tuple[set[int], set[int]]] = []  # per Spark job: (its tasks' partitions, leases held)
    run_tasks = jobs._run_tasks

    def spying(spark_, fn, tasks, progress, job_groups=None):
        now = int(time.time() * 1000)
        held = set()
        for p in range(partitions):
            path = tmp_path / "remote" / lease_key(TOPIC, p)
            if path.exists() and json.loads(path.read_bytes())["expires_ms"] > now:
                held.add(p)
        seen.append(({t[3] for t in tasks}, held))  # (remote, store timeout, topic, partition, ...)
        return run_tasks(spark_, fn, tasks, progress, job_groups)

    monkeypatch.setattr(jobs, "_run_tasks", spying)
    summary = jobs.run_job(spark, "compaction", (tmp_path / "remote").as_uri(), delete_delay_ms=0,
                           overrides={"compaction.task.max.bytes": "9000", "compaction.partitions.per.group": "2"})
    assert summary.totals["compacted"] == partitions, summary
    groups = [{0, 1}, {2, 3}, {4}]
    # Each group: one map wave (its map tasks are fewer than compaction.map.tasks.per.wave), then
    # its rewrite stage; the next group's leases are taken only once the previous are released.
    assert seen == [(g, g) for g in groups for _ in ("map", "rewrite")], seen
    assert len(summary.spark_job_groups) == 2 * len(groups)
    for p in range(partitions):
        assert remote_records(store, p) == remote_records(twin, p)
        assert load_manifest(store, TOPIC, p).cleaner_checkpoint == load_manifest(twin, TOPIC, p).cleaner_checkpoint
    with pytest.raises(ConfigError, match="compaction.partitions.per.group"):
        jobs.run_job(spark, "compaction", (tmp_path / "remote").as_uri(),
                     overrides={"compaction.partitions.per.group": "0"})


@pytest.mark.spark
def test_the_job_spreads_one_large_segments_map_work_over_several_tasks(tmp_path, spark):
    """Segments of ~30 KB and compaction.task.max.bytes of 9,000: each segment's map work is cut at
    its offset index into pieces, more map tasks than segments, and the records after the run are
    the one-task round's."""
    from lakelog.spark_log.jobs import run_job

    store, _, _, _ = build_remote(tmp_path, batches=1200, keys=80, log_cfg={"segment.bytes": 30_000})
    write_topic_descriptor(store, TopicDescriptor(TOPIC, None, 1, COMPACT))
    segments = load_manifest(store, TOPIC, 0).copy_finished
    assert len(segments) >= 2 and min(s.size_in_bytes for s in segments) > 2 * 9000
    twin = FileSystemStore(shutil.copytree(tmp_path / "remote", tmp_path / "twin"))
    compact_partition(twin, TOPIC, 0, config(**{"segment.bytes": 12000}), owner="test", delete_delay_ms=0)
    summary = run_job(spark, "compaction", (tmp_path / "remote").as_uri(), delete_delay_ms=0,
                      overrides={"compaction.task.max.bytes": "9000"})
    extra = summary.rows[0]["extra"]
    assert summary.totals["compacted"] == 1, summary
    assert extra["map_tasks"] >= 3 * len(segments) and extra["map_tasks_merged"] == extra["map_tasks"], extra
    assert remote_records(store) == remote_records(twin)
    assert load_manifest(store, TOPIC, 0).cleaner_checkpoint == load_manifest(twin, TOPIC, 0).cleaner_checkpoint
