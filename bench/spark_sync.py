"""sync-tables against a plain Parquet -> Delta append of the same rows, and where its time goes.

The rows are `bench/spark.py`'s (a compacted topic, distinct seeded values, tiered into a filesystem
store and copied to moto's S3 server); one Spark session `local[*]` for both stores. Per store and
round, alternating: the baseline appends the topic's rows, read from a Parquet copy in the same
store, to a new Delta table partitioned by `partition` and `date` (the table sync-tables writes);
Lakelog runs a first `sync-tables` on a fresh copy of the remote tier (which also writes
`<topic>_latest`, the topic being compacted). Best of `--repeat` rounds after a warm-up; target
>= 0.5x.

On S3 the baseline reads its Parquet through S3A's classic input stream, set for its bucket only
(`spark.hadoop.fs.s3a.bucket.bench-classic.input.stream.type=classic`), as the Lakelog JVM reader
reads the tier. Hadoop 3.5's default S3A stream (the analytics accelerator) keeps what it read in
JVM memory for a few seconds: a Parquet file read again within ~2 s sends no GET at all, so a
baseline timed right after the same rows were read (the Parquet copy's own write and count) reads
from memory, not from the store. The baseline through the default stream (its copy in the `bench`
bucket) is timed in the same rounds and reported beside it.

Where the time goes, from the same runs (tables.py's steps timed by wrapping them):
  append    the Delta append of the new rows (`_append_typed`), which also reads, decodes and
            caches them
  count     the rows added, from the append commit's metrics (`appended_rows`: the Delta log's
            newest commit files, read from the store)
  latest    writing `<topic>_latest` whole (`write_latest_table`: the first sync of a compacted topic)
  rest      planning: the job's topic list, the tables' existence checks, the manifests' check
            that there is something to append
and, apart, a read of the same rows through the `lakelog` source with the sync's date column into
Spark's `noop` sink: the scan alone.

    .venv/bin/python bench/spark_sync.py [--records N] [--stores fs,s3] [--repeat R] [--no-write] [--note "..."]

Writes the "spark-sync" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.harness import OtherCpu, conditions, load_average, machine_info, markdown_table, rewrite_section, text_table  # noqa: E402
from bench.spark import PARTITIONS, TOPIC, build_remote, copy_store, spark_run_line, store_copiers  # noqa: E402

DOC_PATH = ROOT / "docs" / "benchmarks.md"
SECTION = "spark-sync"


class StepTimes:
    """Wall time spent inside tables.py's append and latest-table steps while installed."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self._saved: dict[str, object] = {}

    def __enter__(self):
        from lakelog.spark_log import tables

        for step, name in (("append", "_append_typed"), ("count", "appended_rows"),
                           ("latest", "write_latest_table"), ("latest", "merge_latest_table")):
            original = getattr(tables, name)
            self._saved[name] = original

            def timed(*a, _original=original, _step=step, **kw):
                t = time.perf_counter()
                try:
                    return _original(*a, **kw)
                finally:
                    self.seconds[_step] = self.seconds.get(_step, 0.0) + time.perf_counter() - t

            setattr(tables, name, timed)
        return self

    def __exit__(self, *exc):
        from lakelog.spark_log import tables

        for name, original in self._saved.items():
            setattr(tables, name, original)


#: The bucket of the S3 baseline's Parquet copy, read through S3A's classic input stream.
CLASSIC_BUCKET = "bench-classic"
CLASSIC_STREAM_CONF = {f"spark.hadoop.fs.s3a.bucket.{CLASSIC_BUCKET}.input.stream.type": "classic"}


def run_store(spark, label: str, pristine: str, fresh, parquet_root: str, repeat: int,
              default_stream_root: str | None = None) -> list[list[str]]:
    """The rows of one store; with `default_stream_root` (S3), a second baseline from a Parquet copy
    there, read through S3A's default input stream, timed in the same rounds and reported beside."""
    from pyspark.sql import functions as F

    from lakelog.spark_log.jobs import run_job

    def with_date(df):
        return df.withColumn("date", F.date_from_unix_date(F.floor(F.unix_millis("timestamp") / 86_400_000).cast("int")))

    roots = [parquet_root] + ([default_stream_root] if default_stream_root else [])
    for root in roots:
        spark.read.format("lakelog").option("remote", pristine).option("topic", TOPIC).load() \
            .write.mode("overwrite").parquet(root + "/rows")
    n = spark.read.parquet(parquet_root + "/rows").count()
    base, base_default, sync, scan, steps = [], [], [], [], []
    for r in range(repeat + 1):  # round 0 warms up
        if default_stream_root:
            t = time.perf_counter()
            with_date(spark.read.parquet(default_stream_root + "/rows")).write.format("delta").mode("append") \
                .partitionBy("partition", "date").save(f"{default_stream_root}/delta-{r}")
            bd = time.perf_counter() - t
        t = time.perf_counter()
        with_date(spark.read.parquet(parquet_root + "/rows")).write.format("delta").mode("append") \
            .partitionBy("partition", "date").save(f"{parquet_root}/delta-{r}")
        b = time.perf_counter() - t
        remote = fresh("sync")
        with StepTimes() as st:
            t = time.perf_counter()
            summary = run_job(spark, "sync-tables", remote)
            s = time.perf_counter() - t
        assert summary.totals["rows_added"] == n, (summary.totals, n)
        t = time.perf_counter()
        with_date(spark.read.format("lakelog").option("remote", remote).option("topic", TOPIC).load()) \
            .write.format("noop").mode("overwrite").save()
        sc = time.perf_counter() - t
        print(f"{label} round {r}: baseline {b:.1f} s" + (f" (default stream {bd:.1f} s)" if default_stream_root else "")
              + f", sync {s:.1f} s {st.seconds}, scan {sc:.1f} s", flush=True)
        if r:
            base.append(b)
            if default_stream_root:
                base_default.append(bd)
            sync.append(s)
            scan.append(sc)
            steps.append(st.seconds)
    i = min(range(len(sync)), key=sync.__getitem__)
    best_base, best_sync, st = min(base), sync[i], steps[i]
    rest = best_sync - st.get("append", 0.0) - st.get("count", 0.0) - st.get("latest", 0.0)
    stream = " through S3A's classic stream" if default_stream_root else ""
    out = [
        [f"{label}: sync-tables (rows/s)", f"{n / best_sync:,.0f}", f"{n / best_base:,.0f}",
         f"{best_base / best_sync:.2f}x",
         f"{n:,} rows, target 0.5x; best of {repeat}: sync {best_sync:.1f} s (every round: "
         f"{', '.join(f'{x:.1f}' for x in sync)} s), Parquet -> Delta{stream} {best_base:.1f} s "
         f"({', '.join(f'{x:.1f}' for x in base)} s)"],
        [f"{label}: where the sync's {best_sync:.1f} s went", "", "", "",
         f"Delta append (read + decode + cache included) {st.get('append', 0.0):.1f} s, rows from its commit "
         f"{st.get('count', 0.0):.2f} s, `{TOPIC}_latest` {st.get('latest', 0.0):.1f} s, planning {rest:.1f} s; "
         f"the scan alone (into `noop`) {min(scan):.1f} s"],
    ]
    if default_stream_root:
        out.insert(1, [f"{label}: the same against S3A's default input stream", f"{n / best_sync:,.0f}",
                       f"{n / min(base_default):,.0f}", f"{min(base_default) / best_sync:.2f}x",
                       f"Parquet -> Delta read through Hadoop 3.5's default (analytics) stream, which may serve a "
                       f"re-read from JVM memory: {min(base_default):.1f} s "
                       f"({', '.join(f'{x:.1f}' for x in base_default)} s)"])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=400_000)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--keys", type=int, default=40_000)
    ap.add_argument("--stores", default="fs,s3")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--dir", default="/tmp")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--note", default="")
    args = ap.parse_args(argv)
    stores = [s.strip() for s in args.stores.split(",") if s.strip()]

    from lakelog.spark_log.jvm_source import jar_path, jvm_source_loaded
    from lakelog.spark_log.session import remote_session

    started = dt.datetime.now(dt.timezone.utc)
    others = OtherCpu()
    load_before = load_average()
    work = Path(tempfile.mkdtemp(prefix="lakelog-bench-sync-", dir=args.dir))
    rows: list[list[str]] = []
    s3 = None
    try:
        src = work / "pristine"
        print(f"building {args.records} records ...", flush=True)
        remote_src, log_bytes = build_remote(src, args.records, args.value_bytes, args.keys)
        if "s3" in stores:
            from tests.support.s3server import S3Server

            s3 = S3Server().start()
            os.environ.update(s3.env())
            s3.create_bucket("bench")
            s3.create_bucket(CLASSIC_BUCKET)
            copy_store(remote_src, "s3://bench/pristine")
        spark = remote_session("s3://bench/x" if s3 else remote_src, app_name="lakelog-bench-sync",
                               conf={"spark.ui.showConsoleProgress": "false", **CLASSIC_STREAM_CONF})
        spark.sparkContext.setLogLevel("ERROR")
        reader = "the JVM reader" if jvm_source_loaded(spark) else "the Python reader (no jar: `make jvm`)"
        fresh_fs, fresh_s3 = store_copiers(work, src)

        if "fs" in stores:
            rows += run_store(spark, "fs", remote_src, fresh_fs, (work / "fs-parquet").as_uri(), args.repeat)
        if s3 is not None:
            rows += run_store(spark, "s3", "s3://bench/pristine", fresh_s3, f"s3a://{CLASSIC_BUCKET}/parquet",
                              args.repeat, default_stream_root="s3a://bench/parquet")
        spark.stop()
    finally:
        if s3 is not None:
            s3.stop()
        shutil.rmtree(work, ignore_errors=True)

    seconds = (dt.datetime.now(dt.timezone.utc) - started).total_seconds()
    headers = ["benchmark", "Lakelog", "baseline (same run)", "ratio", "notes"]
    print(text_table(headers, rows))
    if not args.no_write:
        m = machine_info(args.dir)
        body = "\n".join([
            "## sync-tables against a Parquet -> Delta append (`bench/spark_sync.py`)", "",
            spark_run_line(started, seconds, m, stores) + f"; sync-tables read through {reader} (jar "
            f"{'built' if jar_path() else 'absent'}). " +
            f"{args.records:,} records of {args.value_bytes} B values over {args.keys:,} keys in {PARTITIONS} "
            f"partitions ({log_bytes / 1e6:.0f} MB of remote `.log` objects), a compacted topic (the first "
            f"sync also writes `{TOPIC}_latest`). Load average {load_before} at the start, {load_average()} "
            f"at the end; " + conditions(m["nproc"], others.cpus(), args.note), "",
            markdown_table(headers, rows),
        ])
        rewrite_section(DOC_PATH, SECTION, body)
        print(f"wrote the '{SECTION}' section of docs/benchmarks.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
