"""The rebuild-index job's driver: per-partition job leases, the orphan sweep, the tasks, and the
rows of the `_remote_index` table.

  driver   per partition: take its job lease (tiering/lease.py, job "rebuild-index"), as compaction
           and retention do; a lease another run holds -> the partition is not touched (no object,
           no manifest written) and reported as they report it: a row {topic, partition,
           action: "skipped", reason: the lease error}, counted in totals["skipped"]
           then, under the lease: the orphan sweep (tiering/orphans.py: LIST, then the manifest,
           delete segment objects no live entry owns — e.g. indexes a run wrote after the leader
           had expired and deleted their segment), and the plan from that same manifest
  tasks    runs of segments (tiering/index_rebuild_tasks.py), one manifest CAS per run; the driver
           renews the held leases every LEASE_RENEW_INTERVAL_S while they run
  driver   leases released (whatever happened), then `_remote_index` written from the rows, with
           the rows a skipped partition had in the table before (it keeps the last run's view of
           that partition rather than losing it)

A lease lost while the tasks run (it expired and another run took it) cannot stop the tasks
already running for its partition; their manifest changes still go through the CAS. The partition
gets a row {action: "lease-lost", reason} beside its segment rows, and totals["lease_lost"].
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from lakelog.infra.config import LogConfig
from lakelog.spark_log.compaction_job import LEASE_RENEW_INTERVAL_S
from lakelog.tiering.remote_scan import REMOTE_INDEX_TABLE, tables_path

JOB = "rebuild-index"
#: Partitions whose lease and orphan sweep the driver handles at once (requests to the store).
LEASE_THREADS = 8


def skipped_row(topic: str, partition: int, action: str, reason: str) -> dict:
    """A partition's row in the job's summary (not a `_remote_index` row: it has no segment)."""
    return {"topic": topic, "partition": partition, "action": action, "reason": reason}


def run_rebuild(spark, run_tasks: Callable, task: Callable, write_table: Callable, store, remote: str,
                names: list[str], partitions: dict, configs: dict, *, owner: str, rebuild_all: bool, max_task_bytes: int, progress: Callable[[int], None] | None = None,
                on_plan: Callable[[int], None] | None = None, job_groups: list[str] | None = None,
                phases: dict | None = None, store_timeout_ms: int | None = None) -> tuple[list[dict], dict]:
    """Rebuild the indexes of every partition of `names` whose lease this run gets; returns (rows,
    extra totals). jobs.py's: `run_tasks(spark, fn, tasks, progress, job_groups)` the runner, `task`
    the Spark task over (remote, store_timeout_ms, runs, mode), `write_table(spark, remote, rows,
    store_timeout_ms)` the table writer. `store_timeout_ms`: the run's deadline on each
    object-store call, carried by every task (None: the declared default)."""
    from lakelog.tiering.errors import LeaseHeldError
    from lakelog.tiering.index_rebuild_tasks import plan_rebuild_tasks
    from lakelog.tiering.lease import acquire
    from lakelog.tiering.orphans import sweep_orphans

    phases = {} if phases is None else phases
    skipped: list[dict] = []
    lost: list[dict] = []
    leases: dict = {}
    orphans = 0
    t0 = time.monotonic()
    keys = [(t, p) for t in names for p in partitions[t]]

    def take(key: tuple[str, int]):
        """(lease or None, why not, orphans deleted, manifest) of one partition."""
        try:
            lease = acquire(store, *key, owner=owner, job=JOB)
        except LeaseHeldError as e:
            return None, str(e), [], None
        try:
            deleted, manifest = sweep_orphans(store, *key)
        except BaseException:
            lease.release()
            raise
        return lease, "", deleted, manifest

    try:
        held = []
        # Each partition's requests (lease GET + PUT, LIST, manifest GET) in parallel with the
        # others': sequential, they would cost ~4 round trips per partition before any task starts.
        with ThreadPoolExecutor(max(1, min(LEASE_THREADS, len(keys))), thread_name_prefix="rebuild-lease") as pool:
            failure: BaseException | None = None
            for key, future in zip(keys, [pool.submit(take, key) for key in keys]):
                try:
                    lease, why_not, deleted, manifest = future.result()
                except BaseException as e:  # noqa: BLE001 - raised below, once every lease is recorded
                    failure = failure or e
                    continue
                if lease is None:
                    skipped.append(skipped_row(*key, "skipped", why_not))
                    continue
                leases[key] = lease
                orphans += len(deleted)
                held.append((*key, LogConfig(configs[key[0]]).index_interval_bytes, manifest.copy_finished))
            if failure is not None:
                raise failure
        phases["leases_s"] = time.monotonic() - t0  # the leases taken and the orphan sweeps
        # Runs of segments per task, not one task per segment (see index_rebuild_tasks.py).
        planned = plan_rebuild_tasks(held, max_bytes=max_task_bytes, cores=int(spark.sparkContext.defaultParallelism))
        tasks = [(remote, store_timeout_ms, [tuple(r) for r in runs], "all" if rebuild_all else "missing")
                 for runs in planned]
        if on_plan:
            on_plan(len(tasks))
        renewed = [time.monotonic()]

        def renew_all(done: int) -> None:
            if time.monotonic() - renewed[0] >= LEASE_RENEW_INTERVAL_S:
                renewed[0] = time.monotonic()
                for key, lease in list(leases.items()):
                    try:
                        lease.renew()
                    except LeaseHeldError as e:
                        del leases[key]
                        lost.append(skipped_row(*key, "lease-lost", f"lease lost: {e}"))
            if progress:
                progress(done)

        t0 = time.monotonic()
        rows = [row for task_rows in run_tasks(spark, task, tasks, renew_all, job_groups)
                for row in task_rows]
        phases["tasks_s"] = time.monotonic() - t0
    finally:
        t0 = time.monotonic()
        if leases:
            with ThreadPoolExecutor(max(1, min(LEASE_THREADS, len(leases))), thread_name_prefix="rebuild-lease") as pool:
                list(pool.map(lambda lease: lease.release(), leases.values()))
        phases["leases_s"] = phases.get("leases_s", 0.0) + time.monotonic() - t0
    t0 = time.monotonic()
    table_rows = [r for r in rows if "segment_id" in r and "base_offset" in r]
    table_rows += previous_rows(spark, remote, [(r["topic"], r["partition"]) for r in skipped], store_timeout_ms)
    write_table(spark, remote, table_rows, store_timeout_ms)
    phases["table_s"] = time.monotonic() - t0
    extra = {}
    if skipped:
        extra["skipped"] = len(skipped)
    if lost:
        extra["lease_lost"] = len(lost)
    if orphans:
        extra["orphans_deleted"] = orphans
    return rows + skipped + lost, extra


def previous_rows(spark, remote: str, keys: list[tuple[str, int]], store_timeout_ms: int | None = None) -> list[dict]:
    """The `_remote_index` rows of the partitions `keys` as the table holds them now ([] when there
    is no table yet or no key)."""
    if not keys:
        return []
    from pyspark.sql import functions as F

    from lakelog.spark_log.remote_index_table import table_state
    from lakelog.tiering.remote_scan import open_remote

    store = open_remote(remote, store_timeout_ms)
    try:
        exists, _ = table_state(store)
    finally:
        store.close()
    if not exists:
        return []
    wanted = None
    for t, p in keys:
        one = (F.col("topic") == t) & (F.col("partition") == p)
        wanted = one if wanted is None else wanted | one
    try:
        df = spark.read.format("delta").load(tables_path(remote, REMOTE_INDEX_TABLE))
    except Exception as e:  # noqa: BLE001 - a listing that showed files but no table yet (a failed first write)
        if "is not a Delta table" in str(e):
            return []
        raise
    return [r.asDict() for r in df.where(wanted).collect()]
