"""The compaction job as Spark stages: a partition's round spread over several tasks.

`compaction/remote_split.py` has the steps and their rules; this module runs them for every
partition of a job run, in groups of at most compaction.partitions.per.group partitions (in
topic, partition order), each group through every step before the next group starts:

  driver     open each partition's round (its lease, its dirty section)
  stage 1    map tasks, one per run of dirty segments (<= compaction.task.max.bytes; a larger
             segment cut into pieces at its offset index's entries) of every partition:
             partial key -> latest offset maps; in waves of at most
             compaction.map.tasks.per.wave tasks, each wave's maps merged into the partitions'
             maps (bounded) before the next; a partition whose map ended gets no more tasks
  driver     per partition: the merged map, stage the rewrite placeholders (one CAS),
             broadcast the merged map
  stage 2    rewrite tasks, one per run of segment groups of every partition
  driver     per partition: ONE swap CAS, the cleaner checkpoint, due deletions; leases released

So the driver holds the maps of one group's partitions (at most compaction.offset.map.max.bytes
each) and of one wave of map tasks, whatever the number of partitions in the run.

The driver renews every held lease while the stages run; a partition whose lease was lost is
not committed (reported "skipped"), and its staged placeholders are abandoned by the next round.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Callable

from lakelog.infra.config import LogConfig
# As jobs.py: only what executors import before `prepare_executor` made the shipped packages
# importable; the compaction modules are imported inside the functions.
from lakelog.tiering.remote_scan import load_manifest, open_remote

#: How often the driver renews the leases of the rounds in flight (their TTL is 10 minutes).
LEASE_RENEW_INTERVAL_S = 60.0


def _executor_store(remote: str, timeout_ms: int):
    """The remote store in a task, with the run's deadline on each call (from the task's arguments)."""
    from lakelog.spark_log.native import prepare_executor

    prepare_executor()
    return open_remote(remote, timeout_ms)


def _segments(store, topic: str, partition: int, ids: list[str]):
    m = load_manifest(store, topic, partition)
    segments = [m.segment(i) for i in ids]
    missing = [i for i, s in zip(ids, segments) if s is None]
    if missing:  # the round's lease keeps jobs away, and nodes only append or expire (DELETE_STARTED stays)
        raise RuntimeError(f"{topic}-{partition}: segments {missing} left the manifest during a compaction round")
    return segments


def _map_task(args: tuple):
    remote, timeout_ms, topic, partition, pieces, start, end, max_bytes, max_uncompressed = args
    from lakelog.compaction.remote_split import map_segments

    store = _executor_store(remote, timeout_ms)
    try:
        segments = _segments(store, topic, partition, [i for i, _, _ in pieces])
        return map_segments(store, topic, partition, segments, start_offset=start, end_offset=end,
                            max_bytes=max_bytes, max_uncompressed_bytes=max_uncompressed,
                            pieces=[(lo, hi) for _, lo, hi in pieces])
    finally:
        store.close()


def _rewrite_task(args: tuple):
    remote, timeout_ms, topic, partition, groups, ids, map_broadcast, map_end, cfg, now_ms = args
    from lakelog.compaction.remote_split import rewrite_run

    store = _executor_store(remote, timeout_ms)
    try:
        segments = {s.segment_id: s for s in _segments(store, topic, partition, [i for g in groups for i in g])}
        return rewrite_run(store, topic, partition, [[segments[i] for i in g] for g in groups], ids,
                           map_broadcast.value, map_end, LogConfig(cfg), now_ms)
    finally:
        store.close()


def run_compaction(spark, run_tasks: Callable, store, remote: str, names: list[str], partitions: dict,
                   configs: dict, *, owner: str, force: bool, delete_delay_ms: int, job_config: dict[str, str],
                   progress: Callable[[int], None] | None = None, on_plan: Callable[[int], None] | None = None,
                   job_groups: list[str] | None = None, store_timeout_ms: int | None = None) -> list[dict]:
    """One compaction round of every partition of `names`; one report row per partition.

    `run_tasks(spark, fn, tasks, progress, job_groups)` runs one Spark job (jobs.py's runner);
    `store_timeout_ms` is the run's deadline on each object-store call, carried by every task
    (None: the declared default)."""
    from lakelog.compaction.config import CompactionJobConfig
    from lakelog.compaction.remote_common import PartitionReport
    from lakelog.compaction.remote_split import SplitRound, open_round
    from lakelog.tiering.errors import LeaseHeldError

    jc = CompactionJobConfig(job_config)
    keys = [(t, p) for t in names for p in partitions[t]]
    if on_plan:
        on_plan(len(keys))
    rows: dict[tuple[str, int], dict] = {}
    rounds: dict[tuple[str, int], SplitRound] = {}  # the group in flight's rounds only
    renewed = [time.monotonic()]

    def renew_all(_done: int) -> None:
        if time.monotonic() - renewed[0] >= LEASE_RENEW_INTERVAL_S:
            renewed[0] = time.monotonic()
            for key, r in list(rounds.items()):
                try:
                    r.renew()
                except LeaseHeldError as e:  # nothing committed yet: the next holder abandons our staging
                    del rounds[key]
                    r.report.action, r.report.reason = "skipped", f"lease lost: {e}"
                    rows[key] = asdict(r.report)
        if progress:
            progress(len(rows))

    def run_group(group: list[tuple[str, int]]) -> None:
        """Every step of a round for the partitions of one group; their leases are taken here and
        released (or their rounds finished) before the next group opens any."""
        for t, p in group:
            r = open_round(store, t, p, LogConfig(configs[t]), owner=owner, force=force, delete_delay_ms=delete_delay_ms,
                           max_map_bytes=jc.compaction_offset_map_max_bytes,
                           task_max_bytes=jc.compaction_task_max_bytes)
            if isinstance(r, PartitionReport):
                rows[(t, p)] = asdict(r)
            else:
                rounds[(t, p)] = r

        # stage 1: the partial maps, in waves of at most compaction.map.tasks.per.wave tasks; each
        # wave's maps are merged (in offset order: collect keeps the tasks' order, and a wave is a
        # prefix of what is left) before the next, so the driver never holds every task's map.
        pending = [((t, p), ids) for (t, p), r in rounds.items() for ids in r.map_tasks()]
        while pending := [task for task in pending if task[0] in rounds]:  # a lost lease drops its round
            wave, pending = pending[:jc.compaction_map_tasks_per_wave], pending[jc.compaction_map_tasks_per_wave:]
            map_args = []
            for (t, p), ids in wave:
                r = rounds[(t, p)]
                map_args.append((remote, store_timeout_ms, t, p, ids, r.section.first_dirty, r.section.uncleanable, r.max_map_bytes,
                                 r.config.max_uncompressed_batch_bytes))
            for ((t, p), _), partial in zip(wave, run_tasks(spark, _map_task, map_args, renew_all, job_groups)):
                if (t, p) in rounds and rounds[(t, p)].add_partial(partial):
                    ended = (t, p)
                    pending = [task for task in pending if task[0] != ended]  # its later runs stay dirty
        for key, r in list(rounds.items()):
            r.merge()

        # stage 2: the rewrites, against each partition's merged map
        sc = spark.sparkContext
        broadcasts = {key: sc.broadcast(r.map_ipc()) for key, r in rounds.items() if r.rewrites}
        try:
            rewrite_args, rewrite_of = [], []
            for (t, p), r in rounds.items():
                for task in r.rewrites:
                    rewrite_args.append((remote, store_timeout_ms, t, p, task.groups, task.ids, broadcasts[(t, p)], r.map_end,
                                         configs[t], r.job.now))
                    rewrite_of.append((t, p))
            results: dict[tuple[str, int], list] = {key: [] for key in rounds}
            for key, result in zip(rewrite_of, run_tasks(spark, _rewrite_task, rewrite_args, renew_all, job_groups)):
                results[key].append(result)
        finally:
            for b in broadcasts.values():
                b.destroy()
        for key, r in list(rounds.items()):
            del rounds[key]
            rows[key] = asdict(r.finish(results.get(key, [])))

    try:
        # compaction.partitions.per.group bounds the partitions whose maps the driver holds at once.
        size = jc.compaction_partitions_per_group
        for first in range(0, len(keys), size):
            run_group(keys[first:first + size])
    finally:
        for r in rounds.values():  # a failed stage: nothing committed, staging abandoned next round
            r.release()
    if progress:
        progress(len(keys))
    return [rows[key] for key in keys if key in rows]
