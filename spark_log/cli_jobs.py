"""`lakelog jobs run|schedule|list|package`: Spark jobs over the remote tier from the command line.

`run` checks the topics and configs before a JVM starts, then runs one job with a progress bar and
prints its summary; `schedule` runs the jobs at intervals and the runs asked for through a node
until SIGINT/SIGTERM; `package` writes what `spark-submit` needs. pyspark is imported only when a
command runs.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from pathlib import Path

from lakelog.spark_log.cli_common import QUIET_CONF, CommandError, key_value


#: Default intervals of `lakelog jobs schedule` (seconds); `--every JOB=SECONDS` overrides, 0 disables.
DEFAULT_INTERVALS_S = {"retention": 300, "compaction": 600, "rebuild-index": 0, "sync-tables": 300}


def _session(remote: str, master: str | None, app: str):
    from lakelog.spark_log.session import remote_session

    spark = remote_session(remote, app_name=app, master=master, conf=QUIET_CONF)
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _progress_runner(total_hint: str):
    """A rich progress bar fed by `run_job`'s plan and per-task callbacks (stderr, so stdout stays clean)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        console=Console(stderr=True), transient=False)
    state = {}

    def on_plan(n: int) -> None:
        state["task"] = progress.add_task(total_hint, total=n)

    def on_row(done: int) -> None:
        if "task" in state:
            progress.update(state["task"], completed=done)

    return progress, on_plan, on_row


def _print_summary(summary, out=sys.stdout) -> None:
    print(f"lakelog jobs run {summary.job}: {len(summary.topics)} topic(s), {summary.seconds:.1f}s", file=out)
    for row in summary.rows:
        if summary.job in ("compaction", "retention"):
            what = row["action"] + (f" ({row['reason']})" if row.get("reason") else "")
            extra = ""
            if row["action"] == "compacted":
                extra = (f" records {row['records_read']} -> {row['records_kept']}, segments "
                         f"{row['segments_replaced']} -> {row['segments_written']}")
            elif row["action"] == "expired":
                extra = f" {row['segments_expired']} segment(s), log start offset {row['log_start_offset']}"
            print(f"  {row['topic']}-{row['partition']}: {what}{extra}", file=out)
        elif summary.job == "rebuild-index":
            if "segment_id" not in row:  # a partition it did not work on: as compaction and retention print it
                print(f"  {row['topic']}-{row['partition']}: {row['action']} ({row['reason']})", file=out)
            elif row.get("index_action") != "ok":
                print(f"  {row['topic']}-{row['partition']} segment {row.get('base_offset', '?')} "
                      f"{row['segment_id']}: {row['index_action']} {row.get('detail', '')}".rstrip(), file=out)
        else:
            print(f"  {row['topic']}: +{row['rows_added']} rows -> {row['table']}", file=out)
    print(f"  totals: {json.dumps(summary.totals, sort_keys=True)}", file=out)


def cmd_jobs_run(args: argparse.Namespace) -> int:
    from lakelog.spark_log.jobs import plan
    from lakelog.spark_log.runs import recorded_run, runner_name
    from lakelog.tiering.remote_scan import JOB_STORE_TIMEOUT_KEY, job_store_timeout_ms, open_remote

    config = dict(args.config or [])
    # check the topics and configs before a JVM starts, with the run's deadline on each call
    store = open_remote(args.remote, job_store_timeout_ms(config.get(JOB_STORE_TIMEOUT_KEY)))
    try:
        plan(store, args.job, args.topic, config)
    except ValueError as e:
        raise CommandError(str(e)) from None
    finally:
        store.close()
    spark = _session(args.remote, args.master, f"lakelog-{args.job}")
    try:
        progress, on_plan, on_row = _progress_runner(args.job)
        with progress:
            summary = recorded_run(spark, args.job, args.remote, runner=runner_name("lakelog jobs run"),
                                   topics=args.topic, overrides=dict(args.config or []), force=args.force,
                                   rebuild_all=args.all, progress=on_row, on_plan=on_plan,
                                   delete_delay_ms=args.delete_delay_ms)
        _print_summary(summary)
        corrupt = [r for r in summary.rows if r.get("index_action") == "corrupt-log"]
        return 2 if corrupt else 0
    finally:
        spark.stop()


def cmd_jobs_list(args: argparse.Namespace) -> int:
    from lakelog.tiering.job_runs import JOB_NAMES
    from lakelog.spark_log.jobs import __doc__ as doc

    lines = doc.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("    ") and line.split()[0] in JOB_NAMES)
    for line in lines[start:]:  # the docstring's indented list of the jobs, up to its blank line
        if not line.strip():
            break
        print(line)
    return 0


def cmd_jobs_schedule(args: argparse.Namespace) -> int:
    """Run the jobs at their intervals, and the runs asked for through a node (QUEUED records in the
    remote tier, looked for every --poll-ms), until SIGINT/SIGTERM (one Spark session, one run at a
    time). Every run is recorded in the remote tier (spark_log/runs.py)."""
    from lakelog.tiering.job_runs import JOB_NAMES
    from lakelog.spark_log.runs import recorded_run, runner_name, serve_queued
    from lakelog.tiering import job_runs
    from lakelog.tiering.remote_scan import JOB_STORE_TIMEOUT_KEY, job_store_timeout_ms, open_remote

    intervals = dict(DEFAULT_INTERVALS_S)
    for job, seconds in args.every or []:
        if job not in JOB_NAMES:
            raise SystemExit(f"lakelog jobs schedule: unknown job {job!r}")
        intervals[job] = float(seconds)
    active = {j: s for j, s in intervals.items() if s > 0}
    if not 100 <= args.poll_ms <= 600_000:
        raise CommandError("--poll-ms must be between 100 and 600000")
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    runner = runner_name("lakelog jobs schedule")
    store = open_remote(args.remote, job_store_timeout_ms(dict(args.config or []).get(JOB_STORE_TIMEOUT_KEY)))
    spark = _session(args.remote, args.master, "lakelog-scheduler")
    next_run = {j: time.monotonic() for j in active}
    timed = ", ".join(f"{j} every {s:g}s" for j, s in active.items()) or "no timed jobs"
    print(f"lakelog jobs schedule: {timed}; runs asked for through the nodes every {args.poll_ms} ms; over "
          f"{args.remote}", file=sys.stderr, flush=True)
    runs = 0

    def beat() -> None:
        try:
            job_runs.write_scheduler_heartbeat(store, runner, active)
        except Exception as e:  # the heartbeat only informs the console
            print(f"lakelog jobs schedule: could not write the heartbeat: {e}", file=sys.stderr, flush=True)

    def beat_loop() -> None:  # also while a long run holds the main loop
        while not stop.wait(job_runs.HEARTBEAT_MS / 1000):
            beat()

    beat()
    threading.Thread(target=beat_loop, name="scheduler-heartbeat", daemon=True).start()
    try:
        while not stop.is_set():
            try:
                runs += serve_queued(spark, args.remote, runner, dict(args.config or []), stop.is_set)
            except Exception as e:  # the store is unreachable: try again at the next poll
                print(f"lakelog jobs schedule: could not read the queued runs: {e}", file=sys.stderr, flush=True)
            if args.max_runs and runs >= args.max_runs:
                return 0
            due = sorted((t, j) for j, t in next_run.items() if t <= time.monotonic())
            for _, job in due:
                if stop.is_set():
                    break
                try:
                    summary = recorded_run(spark, job, args.remote, runner=runner, overrides=dict(args.config or []))
                    print(f"lakelog jobs schedule: {job} {json.dumps(summary.totals, sort_keys=True)} "
                          f"in {summary.seconds:.1f}s", file=sys.stderr, flush=True)
                except Exception as e:  # a failed run is reported and retried at the next interval
                    print(f"lakelog jobs schedule: {job} failed: {e}", file=sys.stderr, flush=True)
                next_run[job] = time.monotonic() + active[job]
                runs += 1
                if args.max_runs and runs >= args.max_runs:
                    return 0
            wait = min([t - time.monotonic() for t in next_run.values()] + [args.poll_ms / 1000])
            stop.wait(max(0.1, wait))
    finally:
        stop.set()
        try:
            spark.stop()
        except Exception:  # Ctrl-C reaches the JVM too (same process group): it may be gone already
            pass
        store.close()
    return 0


def cmd_jobs_package(args: argparse.Namespace) -> int:
    """Write Lakelog's packages as a zip for `spark-submit --py-files` and print a command line."""
    import shlex

    from lakelog.spark_log.session import DELTA_CONF, jar_settings, s3a_conf, write_packages_zip

    out_dir = Path(args.output).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    zip_path = write_packages_zip(out_dir / "lakelog_packages.zip")
    # What executors (and this driver) import beyond pyspark and pyarrow, and the native decoder:
    # `--files`, loaded by the tasks (spark_log/executor_deps.py, native.py).
    import shutil

    from lakelog.spark_log.executor_deps import DEPS_ZIP, write_deps_zip
    from lakelog.spark_log.native import native_extension_path

    files = [write_deps_zip(out_dir / DEPS_ZIP)]
    native = native_extension_path()
    if native is not None:
        files.append(Path(shutil.copy(native, out_dir / native.name)))
    script = out_dir / "lakelog_job.py"
    script.write_text("import sys\nfrom lakelog.spark_log.jobs import main\nsys.exit(main())\n")
    master = args.master or "local[*]"
    # The driver's class path (and, on a cluster, LAKELOG_EXECUTOR_JARS_DIR or spark.jars): see session.py.
    conf = jar_settings(master)
    conf.update(DELTA_CONF)
    if args.remote.startswith(("s3://", "s3a://")):
        conf.update(s3a_conf())
    cmd = ["spark-submit", "--master", master, "--py-files", str(zip_path),
           "--files", ",".join(str(f) for f in files)]
    for k, v in conf.items():
        if "secret" in k or "access.key" in k or "credentials.provider" in k:
            continue  # credentials come from the environment on the cluster (S3A's default chain), never a command line
        cmd += ["--conf", f"{k}={v}"]
    cmd += [str(script), "JOB", "--remote", args.remote]
    print(f"wrote {zip_path} and {script}", file=sys.stderr)
    print(" ".join(shlex.quote(c) for c in cmd))
    return 0


def add_commands(sub, add, remote: argparse.ArgumentParser) -> None:
    """Add `jobs` and its commands (`remote`: the options every Spark command takes, spark_log/cli.py)."""
    from lakelog.tiering.job_runs import JOB_NAMES

    jobs = sub.add_parser("jobs", help="Spark jobs over the remote tier: compaction, retention, rebuild-index, sync-tables")
    jsub = jobs.add_subparsers(dest="jobs_command", required=True)
    run = add(jsub, "run", "jobs run", cmd_jobs_run, parents=[remote], help="run one job now")
    run.add_argument("job", choices=JOB_NAMES, metavar="NAME", help=" | ".join(JOB_NAMES))
    run.add_argument("--topic", action="append", metavar="T", help="only this topic (repeatable; default all)")
    run.add_argument("--force", action="store_true", help="compaction: clean even below min.cleanable.dirty.ratio")
    run.add_argument("--all", action="store_true", help="rebuild-index: rebuild every index, not only missing or damaged ones")
    run.add_argument("--delete-delay-ms", type=int, metavar="MS",
                     help="override remote.segment.delete.delay.ms for replaced or expired segments")
    schedule = add(jsub, "schedule", "jobs schedule", cmd_jobs_schedule, parents=[remote],
                   help="run the jobs at intervals until Ctrl-C (the same entry points work from cron or Airflow)")
    schedule.add_argument("--every", action="append", type=key_value, metavar="JOB=SECONDS",
                          help="interval of a job (0 disables); defaults: " +
                               ", ".join(f"{j}={s}" for j, s in DEFAULT_INTERVALS_S.items()))
    schedule.add_argument("--max-runs", type=int, default=0, metavar="N", help="stop after N job runs (0: never)")
    schedule.add_argument("--poll-ms", type=int, default=2000, metavar="MS",
                          help="how often to look for runs asked for through a node's /jobs/runs (100-600000)")
    add(jsub, "list", "jobs list", cmd_jobs_list, help="list the jobs")
    package = add(jsub, "package", "jobs package", cmd_jobs_package, parents=[remote],
                  help="write Lakelog's packages for spark-submit --py-files and print the spark-submit command")
    package.add_argument("--output", default="dist", metavar="DIR", help="where to write the zip (default ./dist)")
