"""How the `rebuild-index` job cuts its work into Spark tasks, and the work of one task.

Each Spark task costs a Python worker round trip (tenths of a second on a busy machine), which is
more than rebuilding one segment's indexes takes (a GET, a CRC-checked walk and two PUTs: ~20 ms
for 4 MB), so a task rebuilds a RUN of segments rather than one (as Spark packs small files, and as
the data source groups segments up to `maxPartitionBytes`):

  * `plan_rebuild_tasks` cuts the partitions' COPY_FINISHED segments, in order, into as few tasks
    as keep every core busy: when `rebuild.task.max.bytes` alone would leave cores idle, into
    `min(cores, ceil(total / MIN_TASK_BYTES))` shares of about equal bytes; then (and otherwise)
    into runs of whole segments of at most `rebuild.task.max.bytes` of `.log` per task (a segment
    larger than that is a task of its own). A task may
    hold the end of one partition and the start of the next; each partition's share of it is a
    `RebuildRun`.
  * `rebuild_run` (in the task) reads the run's manifest once, rebuilds each segment
    (index_rebuild.py: every check stays per segment, a corrupt `.log` is reported, never
    indexed) and records the index objects that changed with ONE manifest compare-and-swap for
    the run, not one per segment.

Tasks carry plain tuples (topic, partition, index.interval.bytes, segment ids); no pyspark here.
"""

from __future__ import annotations

import math
from typing import Iterable, NamedTuple, Sequence

from lakelog.infra.config import ConfigDef, TypedConfig
from lakelog.tiering.index_rebuild import IndexUpdate, SegmentIndexRow, commit_index_updates, rebuild_segment_objects
from lakelog.tiering.manifest_model import RemoteSegment, SegmentState
from lakelog.tiering.metadata import ManifestStore
from lakelog.tiering.store import ObjectStore

MIB = 1024 * 1024

REBUILD_JOB_CONFIG = (
    ConfigDef()
    .define("rebuild.task.max.bytes", int, 128 * MIB,
            "Most bytes of remote .log one rebuild-index task reads: a partition's COPY_FINISHED segments "
            "are rebuilt by tasks over runs of whole segments of at most this size (fewer when the cores "
            "are fewer), each run's manifest changes committed with one compare-and-swap.",
            min=1024, max=1 << 40, unit="bytes")
)

#: A task is not cut smaller than this to give every core one (Spark's spark.sql.files.openCostInBytes
#: plays the same part): below it a second Python worker costs more than the bytes it would read.
MIN_TASK_BYTES = 4 * MIB


class RebuildJobConfig(TypedConfig):
    """Validated rebuild-index job settings (`rebuild.task.max.bytes` -> `cfg.rebuild_task_max_bytes`)."""

    DEFINITION = REBUILD_JOB_CONFIG


def split_rebuild_overrides(overrides: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(rebuild-index job keys, the other keys) of a job run's `--config` overrides."""
    job = {k: v for k, v in overrides.items() if k in REBUILD_JOB_CONFIG.keys}
    return job, {k: v for k, v in overrides.items() if k not in job}


class RebuildRun(NamedTuple):
    """Segments of one partition that one task rebuilds (the manifest's order)."""

    topic: str
    partition: int
    index_interval_bytes: int
    segment_ids: tuple[str, ...]


def plan_rebuild_tasks(partitions: Iterable[tuple[str, int, int, Sequence[RemoteSegment]]], *, max_bytes: int,
                       cores: int) -> list[list[RebuildRun]]:
    """`partitions` as (topic, partition, index.interval.bytes, segments in order), cut into the
    tasks described above; each task is a list of runs (one per partition it touches)."""
    items = [(t, p, i, s) for t, p, i, segs in partitions for s in segs]
    if not items:
        return []
    total = sum(s.size_in_bytes for *_, s in items)
    bound = math.ceil(total / max_bytes)
    n = max(bound, min(max(1, cores), math.ceil(total / MIN_TASK_BYTES), len(items)), 1)
    shares: list[list[tuple]] = [items]
    if n > bound:
        # More cores than the bound needs: segment i goes to the share its midpoint falls in when
        # `total` is cut into n equal shares (contiguous, each within a segment of total / n).
        shares = [[] for _ in range(n)]
        before = 0
        for item in items:
            size = item[3].size_in_bytes
            shares[min(n - 1, int((before + size / 2) * n / total) if total else 0)].append(item)
            before += size
    tasks: list[list[tuple]] = []
    for share in shares:  # the hard bound: whole segments up to max_bytes per task
        current: list[tuple] = []
        size = 0
        for item in share:
            if current and size + item[3].size_in_bytes > max_bytes:
                tasks.append(current)
                current, size = [], 0
            current.append(item)
            size += item[3].size_in_bytes
        if current:
            tasks.append(current)
    out = []
    for task in tasks:
        runs: list[RebuildRun] = []
        for t, p, interval, s in task:
            if runs and (runs[-1].topic, runs[-1].partition) == (t, p):
                runs[-1] = runs[-1]._replace(segment_ids=runs[-1].segment_ids + (s.segment_id,))
            else:
                runs.append(RebuildRun(t, p, interval, (s.segment_id,)))
        out.append(runs)
    return out


def rebuild_run(store: ObjectStore, run: RebuildRun, *, mode: str = "missing") -> list[dict]:
    """Rebuild the indexes of `run`'s segments (one manifest read, at most one manifest CAS);
    returns one row per segment: a `SegmentIndexRow` as a dict, or {topic, partition, segment_id,
    index_action: "gone"} for a segment no longer COPY_FINISHED (compacted or expired since the
    job was planned)."""
    run = RebuildRun(*run)
    manifest = ManifestStore(store, run.topic, run.partition).load()
    live = {s.segment_id: s for s in manifest.segments if s.state == SegmentState.COPY_FINISHED}
    rows: list[SegmentIndexRow | dict] = []
    pending: list[tuple[SegmentIndexRow, IndexUpdate]] = []
    for segment_id in run.segment_ids:
        seg = live.get(segment_id)
        if seg is None:
            rows.append(_gone(run, segment_id))
            continue
        row, update = rebuild_segment_objects(store, run.topic, run.partition, seg,
                                              index_interval_bytes=run.index_interval_bytes, mode=mode)
        rows.append(row)
        if update is not None:
            pending.append((row, update))
    commit_index_updates(store, run.topic, run.partition, pending)
    return [_gone(run, r.segment_id) if isinstance(r, SegmentIndexRow) and r.index_action == "gone"
            else r.to_dict() if isinstance(r, SegmentIndexRow) else r for r in rows]


def _gone(run: RebuildRun, segment_id: str) -> dict:
    return {"topic": run.topic, "partition": run.partition, "segment_id": segment_id, "index_action": "gone"}
