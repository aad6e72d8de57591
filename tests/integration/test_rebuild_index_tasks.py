"""rebuild-index on local Spark over runs of segments (tiering/index_rebuild_tasks.py): fewer
Spark tasks than segments, `rebuild.task.max.bytes` bounding each, one manifest compare-and-swap
per partition's run when the indexes change, and the same indexes and `_remote_index` rows as
one task per segment."""

from __future__ import annotations

import pytest

from lakelog.infra.config import ConfigError
from lakelog.spark_log.jobs import run_job
from lakelog.spark_log.session import remote_session
from lakelog.logstore.segment import INDEX_SUFFIX, TIME_INDEX_SUFFIX
from lakelog.tiering.layout import segment_key
from lakelog.tiering.remote_scan import load_manifest
from lakelog.tiering.topics import TopicDescriptor, write_topic_descriptor
from tests.integration.test_remote_compaction import TOPIC, build_remote

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def spark():
    session = remote_session(None, app_name="lakelog-rebuild-tasks-test")
    yield session
    session.stop()


def _tasks_ran(spark, groups: list[str]) -> int:
    tracker = spark.sparkContext.statusTracker()
    done = 0
    for g in groups:
        for j in tracker.getJobIdsForGroup(g):
            info = tracker.getJobInfo(j)
            for sid in (info.stageIds if info else []):
                st = tracker.getStageInfo(sid)
                done += st.numCompletedTasks if st else 0
    return done


def _objects(store, segs):
    return {segment_key(TOPIC, 0, s.base_offset, s.segment_id, x): store.get(
        segment_key(TOPIC, 0, s.base_offset, s.segment_id, x))[0] for s in segs for x in (INDEX_SUFFIX, TIME_INDEX_SUFFIX)}


def test_rebuild_index_runs_segments_in_few_tasks_with_one_manifest_write(tmp_path, spark):
    store, _, _, _ = build_remote(tmp_path, batches=400, log_cfg={"cleanup.policy": "delete"})
    write_topic_descriptor(store, TopicDescriptor(TOPIC, None, 1, {"index.interval.bytes": "512"}))
    remote = (tmp_path / "remote").as_uri()
    segs = load_manifest(store, TOPIC, 0).copy_finished
    assert len(segs) >= 6
    originals = _objects(store, segs)
    lost = segment_key(TOPIC, 0, segs[3].base_offset, segs[3].segment_id, INDEX_SUFFIX)
    store.delete(lost)

    # Default bound: these small segments are one task (before: one task per segment).
    summary = run_job(spark, "rebuild-index", remote)
    assert summary.totals == {"segments": len(segs), "ok": len(segs) - 1, "rebuilt": 1}, summary.totals
    assert _tasks_ran(spark, summary.spark_job_groups) == 1
    assert _objects(store, segs) == originals
    table = spark.read.format("delta").load(f"{remote}/tables/_remote_index").orderBy("base_offset").collect()
    assert [(r["segment_id"], r["base_offset"], r["end_offset"], r["index_action"]) for r in table] == \
        [(s.segment_id, s.base_offset, s.end_offset, "rebuilt" if i == 3 else "ok") for i, s in enumerate(segs)]

    # A bound of about two segments: a task per two segments, the same rows and objects.
    bound = max(s.size_in_bytes for s in segs) * 2
    summary = run_job(spark, "rebuild-index", remote, rebuild_all=True, overrides={"rebuild.task.max.bytes": str(bound)})
    assert summary.totals == {"segments": len(segs), "rebuilt": len(segs)}, summary.totals
    ran = _tasks_ran(spark, summary.spark_job_groups)
    assert len(segs) / 2 <= ran < len(segs), ran
    assert _objects(store, segs) == originals
    rows = sorted(summary.rows, key=lambda r: r["base_offset"])
    assert [r["segment_id"] for r in rows] == [s.segment_id for s in segs]

    # index.interval.bytes changed: every segment's manifest entry changes, in ONE manifest write
    # (one run: one task here), not one per segment.
    generation = load_manifest(store, TOPIC, 0).generation
    summary = run_job(spark, "rebuild-index", remote, rebuild_all=True, overrides={"index.interval.bytes": "64"})
    assert summary.totals == {"segments": len(segs), "manifest-updated": len(segs)}, summary.totals
    after = load_manifest(store, TOPIC, 0)
    assert after.generation == generation + 1
    assert all(a.index_bytes > s.index_bytes for a, s in zip(after.copy_finished, segs))

    with pytest.raises(ConfigError, match="rebuild.task.max.bytes"):
        run_job(spark, "rebuild-index", remote, overrides={"rebuild.task.max.bytes": "10"})


def _versions(store) -> list[str]:
    return [o.key for o in store.list("tables/_remote_index/_delta_log/") if o.key.endswith(".json")]


def test_a_run_that_finds_the_same_rows_leaves_the_remote_index_table_as_it_is(tmp_path, spark):
    store, _, _, _ = build_remote(tmp_path, batches=150, log_cfg={"cleanup.policy": "delete"})
    write_topic_descriptor(store, TopicDescriptor(TOPIC, None, 1, {"index.interval.bytes": "512"}))
    remote = (tmp_path / "remote").as_uri()
    segs = load_manifest(store, TOPIC, 0).copy_finished
    path = f"{remote}/tables/_remote_index"

    run_job(spark, "rebuild-index", remote)
    assert len(_versions(store)) == 1
    first = sorted(tuple(r) for r in spark.read.format("delta").load(path).collect())
    # Nothing changed in the tier: the same rows, so no new Delta version.
    summary = run_job(spark, "rebuild-index", remote)
    assert summary.totals == {"segments": len(segs), "ok": len(segs)}
    assert len(_versions(store)) == 1
    assert sorted(tuple(r) for r in spark.read.format("delta").load(path).collect()) == first

    # A lost index: the row says "rebuilt", so the table is written; and --all rows differ again.
    store.delete(segment_key(TOPIC, 0, segs[0].base_offset, segs[0].segment_id, INDEX_SUFFIX))
    run_job(spark, "rebuild-index", remote)
    assert len(_versions(store)) == 2
    actions = {r["segment_id"]: r["index_action"] for r in spark.read.format("delta").load(path).collect()}
    assert actions == {s.segment_id: "rebuilt" if i == 0 else "ok" for i, s in enumerate(segs)}
    run_job(spark, "rebuild-index", remote, rebuild_all=True)
    run_job(spark, "rebuild-index", remote, rebuild_all=True)
    assert len(_versions(store)) == 3
    # Another writer's commit after ours (a user's DELETE): the next run writes the table again.
    spark.sql(f"DELETE FROM delta.`{path}` WHERE base_offset = {segs[1].base_offset}")
    assert len(_versions(store)) == 4
    run_job(spark, "rebuild-index", remote, rebuild_all=True)
    assert len(_versions(store)) == 5
    assert spark.read.format("delta").load(path).count() == len(segs)
