"""Recording Spark job runs in the remote tier (tiering/job_runs.py) as they happen.

`recorded_run` wraps `run_job`: the record is written RUNNING when the run starts (or claimed from
QUEUED, for a run asked for through a node), rewritten as tasks finish (at most every
PROGRESS_WRITE_MS, and every HEARTBEAT_MS by a heartbeat thread while a long task runs), and
written SUCCEEDED with the totals and rows, or FAILED with the error, at the end. Recording never
fails a run: a store error while writing the record is logged to stderr and the run goes on.
`serve_queued` runs the QUEUED requests a scheduler finds.

A cancel asked for a RUNNING run (`tiering.job_runs.cancel_run`, the console's Cancel) is a request
object the heartbeat thread looks for every HEARTBEAT_MS: once seen, it cancels the application's
Spark jobs (at every heartbeat until the run ends: a job between two Spark actions starts another),
the next progress report raises `RunCancelled` (which also cancels the task group it waits on), and
the run is written CANCELLED. A run that finishes before the cancel takes effect is SUCCEEDED.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from typing import Callable

from lakelog.tiering import job_runs as jr
from lakelog.tiering.errors import TieringError
from lakelog.tiering.remote_scan import JOB_STORE_TIMEOUT_KEY, job_store_timeout_ms, open_remote

PROGRESS_WRITE_MS = 1_000


class RunCancelled(Exception):
    """The run was cancelled (through a node: the console's Cancel) while it ran."""


def runner_name(role: str) -> str:
    return f"{role}@{socket.gethostname()}:{os.getpid()}"


class _Recorder:
    def __init__(self, store, run: jr.JobRun, spark=None) -> None:
        self.store = store
        self.run = run
        self.spark = spark
        #: The cancel request ({"by", "at_ms"}) once the heartbeat has seen one.
        self.cancel: dict | None = None
        self.lock = threading.Lock()
        self.last_write = 0.0
        self.stop = threading.Event()
        self.beat = threading.Thread(target=self._heartbeat, name="job-run-heartbeat", daemon=True)

    def write(self, force: bool = False) -> None:
        with self.lock:
            now = time.monotonic()
            if not force and (now - self.last_write) * 1000 < PROGRESS_WRITE_MS:
                return
            self.last_write = now
            self.run.heartbeat_ms = jr.now_ms()
            try:
                jr.write_run(self.store, self.run)
            except (TieringError, OSError) as e:
                print(f"lakelog jobs: could not record run {self.run.id}: {e}", file=sys.stderr, flush=True)

    def _heartbeat(self) -> None:
        while not self.stop.wait(jr.HEARTBEAT_MS / 1000):
            self.check_cancel()
            self.write(force=True)

    def check_cancel(self) -> None:
        """Look for a cancel request; once there is one, cancel the Spark jobs running."""
        if self.cancel is None:
            try:
                self.cancel = jr.read_cancel_request(self.store, self.run.id)
            except (TieringError, OSError) as e:
                print(f"lakelog jobs: could not look for a cancel of run {self.run.id}: {e}", file=sys.stderr,
                      flush=True)
                return
            if self.cancel is not None:
                with self.lock:
                    self.run.add_log(f"cancel asked by {self.cancel['by']}; stopping")
        if self.cancel is not None and self.spark is not None and not self.stop.is_set():
            self.spark.sparkContext.cancelAllJobs()

    def on_plan(self, n: int) -> None:
        with self.lock:
            self.run.tasks_total = n
            self.run.add_log(f"planned {n} task(s) over {len(self.run.topics or []) or 'every'} topic(s)")
        self.write(force=True)

    def on_progress(self, done: int) -> None:
        if self.cancel is not None:
            raise RunCancelled(f"cancelled by {self.cancel['by']}")
        with self.lock:
            self.run.tasks_done = done
        self.write()

    def clear_cancel(self) -> None:
        try:
            jr.clear_cancel_request(self.store, self.run.id)
        except (TieringError, OSError) as e:
            print(f"lakelog jobs: could not delete the cancel request of run {self.run.id}: {e}", file=sys.stderr,
                  flush=True)


def recorded_run(spark, job: str, remote: str, *, run: jr.JobRun | None = None, requested_by: str = "",
                 runner: str = "", progress: Callable[[int], None] | None = None,
                 on_plan: Callable[[int], None] | None = None, keep: int = jr.MAX_KEPT, **kwargs):
    """`run_job(spark, job, remote, **kwargs)` with its record kept in the remote tier; returns the
    JobSummary (and raises what run_job raises, after recording the failure). `run` is a claimed
    (RUNNING) record; without it a new record is written."""
    from lakelog.spark_log.jobs import run_job

    # The record's own calls have the run's deadline too (`--config remote.job.store.timeout.ms`).
    store = open_remote(remote, job_store_timeout_ms((kwargs.get("overrides") or {}).get(JOB_STORE_TIMEOUT_KEY)))
    try:
        if run is None:
            at = jr.now_ms()
            run = jr.JobRun(jr.new_run_id(at), job, kwargs.get("topics") or None, jr.RunState.RUNNING,
                            requested_by or runner, at, started_ms=at, heartbeat_ms=at, runner=runner)
            run.add_log(f"started by {runner}", at)
        rec = _Recorder(store, run, spark)
        rec.write(force=True)
        rec.beat.start()

        def plan_hook(n: int) -> None:
            rec.on_plan(n)
            if on_plan:
                on_plan(n)

        def progress_hook(done: int) -> None:
            rec.on_progress(done)
            if progress:
                progress(done)

        try:
            summary = run_job(spark, job, remote, progress=progress_hook, on_plan=plan_hook, **kwargs)
        except BaseException as e:
            rec.stop.set()
            cancelled = rec.cancel is not None
            with rec.lock:
                run.move(jr.RunState.CANCELLED if cancelled else jr.RunState.FAILED)
                run.finished_ms = jr.now_ms()
                run.seconds = round((run.finished_ms - (run.started_ms or run.finished_ms)) / 1000, 3)
                if cancelled:
                    run.add_log(f"cancelled by {rec.cancel['by']}")
                else:
                    run.error = f"{type(e).__name__}: {e}"[:jr.MAX_LINE_CHARS]
                    run.add_log(f"failed: {run.error}")
            rec.write(force=True)
            if cancelled:
                rec.clear_cancel()
                raise RunCancelled(f"run {run.id} cancelled by {rec.cancel['by']}") from None
            raise
        rec.stop.set()
        rec.clear_cancel()  # a cancel that came too late (the run had done its work), if any
        with rec.lock:
            run.move(jr.RunState.SUCCEEDED)
            run.finished_ms = jr.now_ms()
            run.seconds = round(summary.seconds, 3)
            run.totals = dict(summary.totals)
            run.topics = run.topics or list(summary.topics)
            run.set_rows(summary.rows)
            run.tasks_done = run.tasks_total if run.tasks_total is not None else run.tasks_done
            run.add_log(f"succeeded in {summary.seconds:.1f}s: {len(summary.topics)} topic(s), totals {summary.totals}")
        rec.write(force=True)
        try:
            jr.prune_runs(store, keep)
        except (TieringError, OSError) as e:
            print(f"lakelog jobs: could not prune old run records: {e}", file=sys.stderr, flush=True)
        return summary
    finally:
        store.close()


def serve_queued(spark, remote: str, runner: str, overrides: dict[str, str] | None = None,
                 should_stop: Callable[[], bool] = lambda: False) -> int:
    """Run every QUEUED run this runner can claim, oldest first; returns how many ran."""
    store = open_remote(remote, job_store_timeout_ms((overrides or {}).get(JOB_STORE_TIMEOUT_KEY)))
    try:
        ids = jr.queued_runs(store)
        ran = 0
        for run_id in ids:
            if should_stop():
                break
            run = jr.claim_run(store, run_id, runner)
            if run is None:
                continue  # another scheduler took it
            try:
                summary = recorded_run(spark, run.job, remote, run=run, runner=runner, topics=run.topics,
                                       overrides=dict(overrides or {}))
                print(f"lakelog jobs schedule: {run.job} (run {run.id}, asked by {run.requested_by}) "
                      f"{summary.totals} in {summary.seconds:.1f}s", file=sys.stderr, flush=True)
            except RunCancelled as e:  # recorded as CANCELLED; the scheduler goes on
                print(f"lakelog jobs schedule: {run.job} (run {run.id}): {e}", file=sys.stderr, flush=True)
            except Exception as e:  # recorded as FAILED; the scheduler goes on
                print(f"lakelog jobs schedule: {run.job} (run {run.id}) failed: {e}", file=sys.stderr, flush=True)
            ran += 1
        return ran
    finally:
        store.close()
