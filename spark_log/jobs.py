"""Lakelog's Spark jobs over the remote tier: the runner behind `lakelog jobs run NAME` and
`spark-submit spark_log/jobs.py NAME ...`.

    compaction      compacted topics: latest value per key, each partition's round spread over map
                    tasks (key -> latest offset per run of segments, merged) and rewrite tasks
                    (per run of segment groups), one manifest swap per partition
                    (spark_log/compaction_job.py, compaction/remote_split.py)
    retention       retention.ms / retention.bytes by whole remote segments, one task per partition
    rebuild-index   regenerate .index / .timeindex (missing or damaged ones, or all with --all),
                    each task over runs of segments (tiering/index_rebuild_tasks.py), one manifest
                    CAS per run, under the partitions' leases, orphan objects swept first
                    (spark_log/rebuild_job.py); writes the remote index Delta table
                    `<remote>/tables/_remote_index`
    sync-tables     each topic into the Delta table `<remote>/tables/<topic>` (spark_log/tables.py)

Topics and their configs: every topic with manifests under the remote root (or `--topic`), with
the configs the nodes publish in `_topics/<topic>.json`, overridden by `--config KEY=VALUE`.
Compaction runs on topics whose `cleanup.policy` includes compact, retention on those whose policy
includes delete.

Every job is idempotent (a second run right after the first changes nothing); the jobs that
change the tier (compaction, retention, rebuild-index) take each partition's job lease (two runs
never work on one partition at once; the loser reports the partition "skipped"); every job
changes manifests only through their compare-and-swap, so it is safe while the nodes keep
tiering. Tasks carry only names and plain data; executors open the store themselves
from the remote URL and the usual AWS environment.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterable

from lakelog.infra.config import LogConfig
from lakelog.tiering.remote_scan import (
    REMOTE_INDEX_TABLE,
    job_store_timeout,
    open_remote,
    remote_partitions,
    tables_path,
)
from lakelog.tiering.topics import read_topic_descriptor
from lakelog.tiering.job_runs import JOB_NAMES  # the run records (tiering/job_runs.py) name the same jobs

REMOTE_ENV = "LAKELOG_REMOTE"
#: The run's `--config` key that bounds each object-store call of its driver (tiering/config.py).
JOB_STORE_TIMEOUT_KEY = "remote.job.store.timeout.ms"


@dataclass
class JobSummary:
    """What a job run did, for the CLI's summary and for tests."""

    job: str
    remote: str
    topics: list[str] = field(default_factory=list)
    rows: list[dict] = field(default_factory=list)  # one per partition / segment / table
    seconds: float = 0.0
    totals: dict = field(default_factory=dict)
    phases: dict = field(default_factory=dict)  # seconds per phase, where a job has several
    spark_job_groups: list[str] = field(default_factory=list)  # the Spark job groups its tasks ran in


def topic_configs(store, topics: Iterable[str], overrides: dict[str, str]) -> dict[str, dict[str, str]]:
    """Configs per topic: the published descriptor, then `overrides` (only keys a topic may have)."""
    out = {}
    for t in topics:
        d = read_topic_descriptor(store, t)
        cfg = dict(d.configs) if d else {}
        cfg.update(overrides)
        LogConfig({k: v for k, v in cfg.items()})  # raises ConfigError on an unknown key or bad value
        out[t] = cfg
    return out


def _policy(cfg: dict[str, str]) -> set[str]:
    return {p.strip() for p in cfg.get("cleanup.policy", "delete").split(",")}


# ---------------------------------------------------------------------------------------------
# tasks (run in executors: top-level functions of plain arguments)


def _executor_store(remote: str):
    """The remote store in a task: the application's shipped packages (boto3 for S3, the codecs)
    and the native decoder made importable first (executors may have only pyspark and pyarrow)."""
    from lakelog.spark_log.native import prepare_executor

    prepare_executor()
    return open_remote(remote)


def _retention_task(args: tuple) -> dict:
    remote, topic, partition, cfg, owner, _force, delete_delay_ms = args
    from lakelog.compaction.remote import expire_partition

    store = _executor_store(remote)
    try:
        return asdict(expire_partition(store, topic, partition, LogConfig(cfg), owner=owner,
                                       delete_delay_ms=delete_delay_ms))
    finally:
        store.close()


def _rebuild_task(args: tuple) -> list[dict]:
    """One rebuild-index task: its runs of segments (tiering/index_rebuild_tasks.py), a row each."""
    remote, runs, mode = args
    from lakelog.tiering.index_rebuild_tasks import rebuild_run

    store = _executor_store(remote)
    try:
        return [row for run in runs for row in rebuild_run(store, run, mode=mode)]
    finally:
        store.close()


# ---------------------------------------------------------------------------------------------
# the runner


def completed_tasks(tracker, group: str) -> int:
    """Tasks finished so far by the Spark jobs of job group `group` (`tracker`: the context's
    statusTracker())."""
    done = 0
    for job_id in tracker.getJobIdsForGroup(group):
        info = tracker.getJobInfo(job_id)
        for stage_id in (info.stageIds if info else []):
            stage = tracker.getStageInfo(stage_id)
            done += stage.numCompletedTasks if stage else 0
    return done


def _run_tasks(spark, fn: Callable[[tuple], dict], tasks: list[tuple], progress: Callable[[int], None] | None,
               job_groups: list[str] | None = None) -> list[dict]:
    """Run one Spark task per element of `tasks` (all in one job, in parallel) and return their
    rows; `progress(done)` is called with the number of finished tasks as they finish. The job's
    group is appended to `job_groups`."""
    if not tasks:
        return []
    sc = spark.sparkContext
    group = f"lakelog-{uuid.uuid4().hex}"
    if job_groups is not None:
        job_groups.append(group)
    out: dict = {}

    def collect() -> None:
        try:
            sc.setJobGroup(group, "lakelog job", interruptOnCancel=True)
            out["rows"] = sc.parallelize(tasks, len(tasks)).map(fn).collect()
        except BaseException as e:  # handed to the caller's thread
            out["error"] = e

    worker = threading.Thread(target=collect, name=group, daemon=True)
    worker.start()
    tracker = sc.statusTracker()
    while worker.is_alive():
        worker.join(0.5)
        if progress:
            try:
                progress(min(completed_tasks(tracker, group), len(tasks)))
            except BaseException:  # the hook stops the run (a cancelled run): so do its Spark tasks
                sc.cancelJobGroup(group)
                worker.join(30)
                raise
    if "error" in out:
        raise out["error"]
    if progress:
        progress(len(tasks))
    return out["rows"]


def plan(store, job: str, topics: list[str] | None, overrides: dict[str, str]) -> tuple[list[str], dict, dict]:
    """(topics, partitions per topic, configs per topic) a job works on."""
    overrides = {k: v for k, v in overrides.items() if k != JOB_STORE_TIMEOUT_KEY}  # the run's, not a topic's
    found = remote_partitions(store)
    names = [t for t in (topics or list(found))]
    missing = [t for t in names if t not in found]
    if topics and missing:
        raise ValueError(f"no remote data for topic(s) {', '.join(missing)} under {store.url}")
    configs = topic_configs(store, names, overrides)
    if job == "compaction":
        names = [t for t in names if "compact" in _policy(configs[t])]
    elif job == "retention":
        names = [t for t in names if "delete" in _policy(configs[t])]
    return names, {t: found[t] for t in names}, configs


#: Spark's own default for spark.sql.shuffle.partitions: a value nobody chose for this cluster.
SPARK_DEFAULT_SHUFFLE_PARTITIONS = "200"
DELTA_SNAPSHOT_PARTITIONS = "spark.databricks.delta.snapshotPartitions"


def size_shuffle_partitions(spark) -> int:
    """Shuffle partitions from the cluster's cores (2 per core, at least 2) when nobody set them:
    Spark's 200 (or a session's 50) on a few executor cores is mostly task overhead for the
    sync's and the latest table's shuffles. A value set in the session is kept; returns the value."""
    current = spark.conf.get("spark.sql.shuffle.partitions")
    if current != SPARK_DEFAULT_SHUFFLE_PARTITIONS:
        return int(current)
    wanted = max(2, 2 * int(spark.sparkContext.defaultParallelism))
    spark.conf.set("spark.sql.shuffle.partitions", str(wanted))
    # Delta replays a table's log with 50 tasks unless told: the same sizing.
    if spark.conf.get(DELTA_SNAPSHOT_PARTITIONS, None) in (None, "50"):
        spark.conf.set(DELTA_SNAPSHOT_PARTITIONS, str(wanted))
    return wanted


def run_job(spark, job: str, remote: str, *, topics: list[str] | None = None, overrides: dict[str, str] | None = None,
            force: bool = False, rebuild_all: bool = False, delete_delay_ms: int | None = None,
            progress: Callable[[int], None] | None = None, on_plan: Callable[[int], None] | None = None) -> JobSummary:
    """Run `job` over the remote tier at `remote` with `spark`; see the module docstring.

    `overrides` may hold `remote.job.store.timeout.ms`: the deadline of each object-store call the
    driver makes during the run (tasks in executors take `JOB_STORE_TIMEOUT_ENV` or the default)."""
    overrides = dict(overrides or {})
    store_timeout = overrides.pop(JOB_STORE_TIMEOUT_KEY, None)
    with job_store_timeout(store_timeout):
        return _run_job(spark, job, remote, topics=topics, overrides=overrides, force=force, rebuild_all=rebuild_all,
                        delete_delay_ms=delete_delay_ms, progress=progress, on_plan=on_plan)


def _run_job(spark, job: str, remote: str, *, topics: list[str] | None, overrides: dict[str, str],
             force: bool, rebuild_all: bool, delete_delay_ms: int | None,
             progress: Callable[[int], None] | None, on_plan: Callable[[int], None] | None) -> JobSummary:
    if job not in JOB_NAMES:
        raise ValueError(f"unknown job {job!r}; jobs: {', '.join(JOB_NAMES)}")
    started = time.monotonic()
    summary = JobSummary(job, remote)
    size_shuffle_partitions(spark)
    store = open_remote(remote)
    try:
        from lakelog.compaction.config import split_overrides

        # The compaction job's own keys beside topic keys (a schedule passes one --config to every job).
        job_keys, overrides = split_overrides(overrides or {})
        from lakelog.tiering.index_rebuild_tasks import split_rebuild_overrides

        rebuild_keys, overrides = split_rebuild_overrides(overrides)
        names, partitions, configs = plan(store, job, topics, overrides)
        summary.topics = names
        owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        if job in ("compaction", "retention"):
            from lakelog.tiering.config import TieringConfig

            delay = TieringConfig().remote_segment_delete_delay_ms if delete_delay_ms is None else delete_delay_ms
            if job == "compaction":
                from lakelog.spark_log.compaction_job import run_compaction

                summary.rows = run_compaction(spark, _run_tasks, store, remote, names, partitions, configs,
                                              owner=owner, force=force, delete_delay_ms=delay, job_config=job_keys,
                                              progress=progress, on_plan=on_plan,
                                              job_groups=summary.spark_job_groups)
            else:
                tasks = [(remote, t, p, configs[t], owner, force, delay) for t in names for p in partitions[t]]
                if on_plan:
                    on_plan(len(tasks))
                summary.rows = _run_tasks(spark, _retention_task, tasks, progress, summary.spark_job_groups)
        elif job == "rebuild-index":
            from lakelog.spark_log.rebuild_job import run_rebuild
            from lakelog.tiering.index_rebuild_tasks import RebuildJobConfig

            # Under each partition's job lease, like the other jobs (spark_log/rebuild_job.py).
            summary.rows, extra_totals = run_rebuild(
                spark, _run_tasks, _rebuild_task, write_remote_index_table, store, remote, names, partitions, configs,
                owner=owner, rebuild_all=rebuild_all,
                max_task_bytes=RebuildJobConfig(rebuild_keys).rebuild_task_max_bytes, progress=progress,
                on_plan=on_plan, job_groups=summary.spark_job_groups, phases=summary.phases)
        else:
            from lakelog.spark_log.tables import sync_topic

            if on_plan:
                on_plan(len(names))
            for t in names:
                row = sync_topic(spark, remote, t, configs[t], partitions[t], owner=owner)
                summary.rows.append(row)
                if progress:
                    progress(len(summary.rows))
    finally:
        store.close()
    summary.seconds = time.monotonic() - started
    summary.totals = _totals(job, summary.rows)
    if job == "rebuild-index":
        summary.totals.update(extra_totals)
    return summary


def _totals(job: str, rows: list[dict]) -> dict:
    def total(key: str) -> int:
        return sum(int(r.get(key) or 0) for r in rows)

    if job == "compaction":
        return {"partitions": len(rows), "compacted": sum(r["action"] == "compacted" for r in rows),
                "skipped": sum(r["action"] == "skipped" for r in rows), "records_read": total("records_read"),
                "records_kept": total("records_kept"), "bytes_read": total("bytes_read"),
                "bytes_written": total("bytes_written"), "segments_replaced": total("segments_replaced")}
    if job == "retention":
        return {"partitions": len(rows), "segments_expired": total("segments_expired"),
                "skipped": sum(r["action"] == "skipped" for r in rows), "objects_deleted": total("objects_deleted")}
    if job == "rebuild-index":
        actions: dict[str, int] = {}
        segments = [r for r in rows if "segment_id" in r]  # not the rows of skipped partitions
        for r in segments:
            actions[r.get("index_action", "?")] = actions.get(r.get("index_action", "?"), 0) + 1
        return {"segments": len(segments), **actions}
    return {"topics": len(rows), "rows_added": total("rows_added")}


REMOTE_INDEX_SCHEMA = ("topic STRING, partition INT, segment_id STRING, base_offset BIGINT, end_offset BIGINT, "
                       "min_timestamp BIGINT, max_timestamp BIGINT, size_in_bytes BIGINT, batch_count BIGINT, "
                       "first_leader_epoch INT, last_leader_epoch INT, leader_epochs STRING, state STRING, "
                       "index_action STRING, detail STRING")


REMOTE_INDEX_WRITE_CONF = {"spark.databricks.delta.snapshotPartitions": "1",
                           "spark.databricks.delta.writeChecksumFile.enabled": "false"}


def write_remote_index_table(spark, remote: str, rows: list[dict]) -> bool:
    """Replace `<remote>/tables/_remote_index` with `rows` (one per remote segment); leave it as it
    is when its latest commit already holds exactly these rows (spark_log/remote_index_table.py:
    a fingerprint in the commit's userMetadata). True when the table was written.

    The rows go to the JVM as one Arrow table (a local relation): built from Python rows, the
    DataFrame's write ran Python workers to unpickle them, which cost ~2 s of a 2.5 s commit on a
    loaded 2-CPU machine against ~0.5 s from Arrow (`docs/benchmarks.md`, spark-jobs)."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import _parse_datatype_string

    from lakelog.spark_log.delta_commits import session_conf
    from lakelog.spark_log.remote_index_table import rows_fingerprint, table_state

    path = tables_path(remote, REMOTE_INDEX_TABLE)
    schema = _parse_datatype_string(REMOTE_INDEX_SCHEMA)
    fingerprint = rows_fingerprint(REMOTE_INDEX_SCHEMA, schema.fieldNames(), rows)
    store = open_remote(remote)
    try:
        exists, latest = table_state(store)
        if latest == fingerprint:
            return False
    finally:
        store.close()
    table = pa.Table.from_pylist([{c: r.get(c) for c in schema.fieldNames()} for r in rows],
                                 schema=to_arrow_schema(schema))
    df = spark.createDataFrame(table).coalesce(1)  # one small Parquet file per topic, one write task

    def save(mode: str) -> None:
        (df.write.format("delta").mode(mode).option("overwriteSchema", "true")
         .option("userMetadata", fingerprint).partitionBy("topic").save(path))

    # A table of one row per segment: Delta's log replay in one task rather than the session's
    # snapshotPartitions (sized for topic tables), and no post-commit checksum file (readers do
    # without it). Overwriting an existing table: median 9.6 -> 5.9 s at load ~12 (benchmarks.md).
    with session_conf(spark, REMOTE_INDEX_WRITE_CONF):
        if exists:
            save("overwrite")
        else:
            # No table yet: create it (no search for files to remove: ~1/3 of a fresh write at
            # load ~13, docs/benchmarks.md); a run that created it meanwhile -> overwrite theirs.
            try:
                save("errorifexists")
            except Exception:  # noqa: BLE001 - any failure: the overwrite below raises a real one again
                save("overwrite")
    return True


# ---------------------------------------------------------------------------------------------
# spark-submit entry point


def _job_list(text: str) -> list[str]:
    jobs = [j.strip() for j in text.split(",") if j.strip()]
    unknown = [j for j in jobs if j not in JOB_NAMES]
    if not jobs or unknown:
        raise argparse.ArgumentTypeError(f"unknown job(s) {', '.join(unknown) or text!r}; jobs: {', '.join(JOB_NAMES)}")
    return jobs


def main(argv: list[str] | None = None) -> int:
    """`spark-submit ... lakelog_job.py NAME[,NAME...] --remote URL [--topic T] [--config K=V] [--force]`
    (`lakelog jobs package` writes the script and the `--py-files` zip and prints the command).
    Several jobs, comma-separated, run in that order in one application (one JVM and executor
    start for all of them); `--config` applies to each."""
    parser = argparse.ArgumentParser(prog="lakelog-job")
    parser.add_argument("job", type=_job_list, metavar="JOB[,JOB...]", help=f"of: {', '.join(JOB_NAMES)}")
    parser.add_argument("--remote", default=os.environ.get(REMOTE_ENV))
    parser.add_argument("--topic", action="append")
    parser.add_argument("--config", action="append", default=[])
    parser.add_argument("--force", action="store_true")
    parser.add_argument("--all", action="store_true")
    args = parser.parse_args(argv)
    if not args.remote:
        parser.error("--remote URL (or LAKELOG_REMOTE) is required")
    from pyspark.sql import SparkSession

    from lakelog.spark_log.session import ship_packages

    # spark-submit's settings
    spark = SparkSession.builder.appName(f"lakelog-{'+'.join(args.job)}").getOrCreate()
    ship_packages(spark)
    # This driver may be a Python with only pyspark and pyarrow too: `--files lakelog_deps.zip`.
    from lakelog.spark_log.executor_deps import load_shipped_deps

    load_shipped_deps()
    from lakelog.spark_log.datasource import register

    register(spark)
    overrides = dict(kv.split("=", 1) for kv in args.config)
    try:
        for job in args.job:
            summary = run_job(spark, job, args.remote, topics=args.topic, overrides=overrides, force=args.force,
                              rebuild_all=args.all)
            print(f"lakelog {job}: {summary.totals} in {summary.seconds:.1f}s", flush=True)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
