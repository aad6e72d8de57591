"""Benchmarks of the Spark side: the `lakelog` data source and the jobs over the remote tier.

Every figure is a ratio against a baseline measured in the same run, in the same Spark session,
over the same rows in the same store (the filesystem store, and moto's S3 server through S3A),
Spark `local[*]`; each timing is the best of `--repeat` runs after a warm-up, lakelog and baseline
alternating. Every record's value is distinct (seeded pseudo-random printable bytes of the stated
size), so the Parquet copy holds as many value bytes as the log and its dictionary cannot store one
value for all rows:

  scan value      `spark.read.format("lakelog")` with `sum(length(value))`       target >= 0.8x
                  vs the same query over the same rows stored as Parquet in the same store
  count()         `count()` of the data source (the JVM reader: pushed into the scan, answered from
                  the manifests' record counts; also timed reading every byte) vs `count()` of the
                  Parquet copy                                                 target >= 0.5x
  sync-tables     a first `sync-tables` of the topic (Delta table + `<topic>_latest`) vs a plain
                  Parquet -> Delta append of the same rows, partitioned the same way
  compaction      `compaction --force` (MB of `.log` per second) vs a plain Spark latest value per
                  key over the Parquet copy, written back as Parquet
  rebuild-index   `rebuild-index --all` vs Spark tasks that only read the same `.log` objects

On S3 every baseline reads the `bench` bucket through S3A's classic input stream, as the `lakelog`
reader reads its tier: each scan GETs its objects from the store. Hadoop 3.5's default S3A stream (the
analytics accelerator's) keeps what it read in the JVM's memory for a few seconds: a Parquet file read
again within ~2 s sends no GET at all (counted at the S3 server), after a 5 s pause it reads the store
again. Timed back to back, a baseline on that stream would measure memory, not the store. The scan
rows also time a copy of the Parquet rows in the `bench-aal` bucket through the default stream, back
to back (from its memory) and after a pause (from the store), and say so in their notes.

    .venv/bin/python bench/spark.py [--records N] [--value-bytes B] [--stores fs,s3] [--no-write] [--note "..."]
    .venv/bin/python bench/spark.py --jobs-only [--partitions P] [--compaction-task-bytes B] ...

Writes the "spark" section of docs/benchmarks.md; with `--jobs-only` (compaction and rebuild-index
only), the "spark-jobs" section.
"""

from __future__ import annotations

import argparse
import datetime as dt
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.harness import MB, OtherCpu, conditions, git_revision, load_average, machine_info, markdown_table, rewrite_section, text_table  # noqa: E402
from lakelog.infra.config import LogConfig  # noqa: E402
from lakelog.logstore.log import PartitionLog  # noqa: E402
from lakelog.logstore.record_batch import Record, build_batch  # noqa: E402
from lakelog.tiering.config import TieringConfig  # noqa: E402
from lakelog.tiering.fs_store import FileSystemStore  # noqa: E402
from lakelog.tiering.manager import RemoteTier  # noqa: E402
from lakelog.tiering.topics import TopicDescriptor, write_topic_descriptor  # noqa: E402

DOC_PATH = ROOT / "docs" / "benchmarks.md"
SECTION = "spark"
TOPIC = "bench"
PARTITIONS = 4
CONFIGS = {"cleanup.policy": "compact", "segment.bytes": str(8 * 1024 * 1024), "index.interval.bytes": "4096",
           "min.cleanable.dirty.ratio": "0.0"}


def build_remote(root: Path, records: int, value_bytes: int, keys: int, partitions: int = PARTITIONS
                 ) -> tuple[str, int]:
    """A compacted topic of `records` keyed records over `partitions` partitions, tiered into a
    filesystem store under root/remote; returns (remote URL, bytes of .log objects)."""
    rng = random.Random(1)
    store = FileSystemStore(root / "remote")
    tier = RemoteTier(store, TieringConfig({"remote.log.copy.max.segments.per.round": 100_000}))
    cfg = LogConfig({**CONFIGS, "segment.bytes": str(4 * 1024 * 1024), "retention.ms": "-1"})
    per = records // partitions
    for p in range(partitions):
        log = PartitionLog(root / "local" / f"{TOPIC}-{p}", cfg)
        ts = 1_700_000_000_000
        for start in range(0, per, 200):
            recs = [Record(i, ts + start + i, f"key-{rng.randrange(keys)}".encode(), distinct_value(rng, value_bytes))
                    for i in range(min(200, per - start))]
            log.append_as_leader(build_batch(recs), 1)
        log.roll()
        tier.partition(TOPIC, p).copy_segments(log, 1, log.log_end_offset)
        log.close()
    write_topic_descriptor(store, TopicDescriptor(TOPIC, None, partitions, CONFIGS))
    size = sum(i.size for i in store.list("") if i.key.endswith(".log"))
    shutil.rmtree(root / "local")
    return (root / "remote").as_uri(), size


# 64 printable characters: a value drawn from them carries 6 bits per byte, which neither
# Parquet's dictionary nor snappy's LZ77 matches can shrink much (log lines and JSON compress
# better; this keeps the baseline from reading fewer bytes than the log holds).
_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
_TEXT = bytes(_ALPHABET[b % 64] for b in range(256))


def distinct_value(rng: random.Random, value_bytes: int) -> bytes:
    """`value_bytes` seeded pseudo-random printable bytes: every record's value differs, so the
    Parquet copy stores (and its scan reads) as many value bytes as the log does."""
    return rng.randbytes(value_bytes).translate(_TEXT)


# The baselines' S3 bucket is read through S3A's classic stream (see the module's docstring); the
# `bench-aal` bucket keeps S3A's default stream, for the notes.
S3_CONF = {"spark.hadoop.fs.s3a.bucket.bench.input.stream.type": "classic"}
AAL_BUCKET = "bench-aal"
AAL_PAUSE_S = 6.0  # longer than the default stream keeps what it read (its cleanup runs every 5 s)


def default_stream_note(spark, pq, url: str, query, repeat: int) -> str:
    """The Parquet rows of `pq` copied to `url` (in the `bench-aal` bucket) and read with `query`
    through S3A's default stream: best of `repeat` back to back, then once after a pause; a note
    with both rates."""
    pq.write.mode("overwrite").parquet(url)
    aal = spark.read.parquet(url)
    n = aal.count()
    query(aal)  # the first read of the copy
    warm = best({"warm": lambda: query(aal)}, repeat)["warm"]
    time.sleep(AAL_PAUSE_S)
    t = time.perf_counter()
    query(aal)
    cold = time.perf_counter() - t
    return (f"the same Parquet through S3A's default (analytics) stream: back to back, from its memory, "
            f"{n / warm:,.0f} rows/s; after a {AAL_PAUSE_S:.0f} s pause, from the store, {n / cold:,.0f} rows/s")


def stored_bytes(spark, url: str) -> int:
    """Bytes of every file under `url` (a Parquet copy), through Hadoop's FileSystem."""
    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(url.replace("s3://", "s3a://", 1))
    fs = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    return int(fs.getContentSummary(path).getLength())


def _read_task(args):
    """Baseline: read one segment's .log object."""
    remote, topic, partition, base, sid, size = args
    from lakelog.tiering.remote_scan import open_remote

    return len(open_remote(remote).get_range(f"{topic}-{partition}/{base:020d}-{sid}.log", 0, size))


def copy_store(src_url: str, dst_url: str) -> None:
    """Every object of one remote root into another (a fresh copy for a job that rewrites it)."""
    from lakelog.tiering.remote_scan import open_remote

    src, dst = open_remote(src_url), open_remote(dst_url)
    try:
        for info in src.list(""):
            dst.put(info.key, src.get_range(info.key, 0, info.size) if info.size else b"")
    finally:
        src.close()
        dst.close()


def best(cases: dict, repeat: int) -> dict[str, float]:
    """Best wall time of each case over `repeat` alternating rounds."""
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeat):
        for name, fn in cases.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    return {name: min(v) for name, v in times.items()}


def run_store(spark, label: str, remote_src: str, fresh, parquet_root: str, log_bytes: int, args,
              rows: list[list[str]], where: list[str]) -> None:
    from pyspark.sql import functions as F

    from lakelog.spark_log.jobs import run_job

    df = spark.read.format("lakelog").option("remote", remote_src).option("topic", TOPIC).load()
    narrow = spark.read.format("lakelog").schema("offset BIGINT").option("remote", remote_src) \
        .option("topic", TOPIC).load()
    parquet = parquet_root + "/rows"
    df.write.mode("overwrite").parquet(parquet)
    pq = spark.read.parquet(parquet)
    n = pq.count()
    pq_mb = stored_bytes(spark, parquet) / MB
    if args.jobs_only:
        return run_jobs(spark, label, pq, parquet_root, fresh, log_bytes, args, rows)

    # -- scan touching value, and count()
    t = best({"lakelog": lambda: df.agg(F.sum(F.length("value"))).collect(),
              "parquet": lambda: pq.agg(F.sum(F.length("value"))).collect()}, args.repeat)
    aal = ""
    if parquet_root.startswith("s3a://"):
        aal = "; " + default_stream_note(spark, pq, f"s3a://{AAL_BUCKET}/parquet",
                                         lambda d: d.agg(F.sum(F.length("value"))).collect(), args.repeat)
    rows.append([f"{label}: scan value (rows/s)", f"{n / t['lakelog']:,.0f}", f"{n / t['parquet']:,.0f}",
                 f"{t['parquet'] / t['lakelog']:.2f}x",
                 f"{n:,} rows, `sum(length(value))`; target 0.8x; the Parquet copy is {pq_mb:.0f} MB" + aal])
    t = best({"lakelog": lambda: df.count(), "narrow": lambda: narrow.count(), "parquet": lambda: pq.count()},
             args.repeat)
    rows.append([f"{label}: count() (rows/s)", f"{n / t['lakelog']:,.0f}", f"{n / t['parquet']:,.0f}",
                 f"{t['parquet'] / t['lakelog']:.2f}x",
                 f"target 0.5x; through `.schema(\"offset BIGINT\")`: {n / t['narrow']:,.0f} rows/s = "
                 f"{t['parquet'] / t['narrow']:.2f}x"])

    # -- sync-tables vs a plain Parquet -> Delta append
    delta = parquet_root + "/delta-baseline"
    t0 = time.perf_counter()
    (pq.withColumn("date", F.date_from_unix_date(F.floor(F.unix_millis("timestamp") / 86_400_000).cast("int")))
     .write.format("delta").mode("append").partitionBy("partition", "date").save(delta))
    base_s = time.perf_counter() - t0
    remote = fresh("sync")
    t0 = time.perf_counter()
    sync = run_job(spark, "sync-tables", remote)
    sync_s = time.perf_counter() - t0
    added = sync.totals["rows_added"]
    rows.append([f"{label}: sync-tables (rows/s)", f"{added / sync_s:,.0f}", f"{n / base_s:,.0f}",
                 f"{base_s / sync_s:.2f}x", f"{added:,} rows; includes rewriting `{TOPIC}_latest`"])

    run_jobs(spark, label, pq, parquet_root, fresh, log_bytes, args, rows)


def run_jobs(spark, label: str, pq, parquet_root: str, fresh, log_bytes: int, args, rows: list[list[str]]) -> None:
    """compaction and rebuild-index against their baselines over the same rows."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from lakelog.spark_log.jobs import run_job
    from lakelog.tiering.remote_scan import load_manifest, open_remote

    job_config = {"compaction.task.max.bytes": str(args.compaction_task_bytes)} if args.compaction_task_bytes else {}
    # -- compaction vs a plain latest-value-per-key rewrite
    w = Window.partitionBy("partition", "key").orderBy(F.col("offset").desc())
    t0 = time.perf_counter()
    (pq.withColumn("_r", F.row_number().over(w)).where("_r = 1").drop("_r")
     .write.mode("overwrite").parquet(parquet_root + "/latest-baseline"))
    base_s = time.perf_counter() - t0
    remote = fresh("compaction")
    t0 = time.perf_counter()
    summary = run_job(spark, "compaction", remote, force=True, delete_delay_ms=0, overrides=job_config)
    comp_s = time.perf_counter() - t0
    rows.append([f"{label}: compaction (MB/s of log)", f"{log_bytes / MB / comp_s:.1f}", f"{log_bytes / MB / base_s:.1f}",
                 f"{base_s / comp_s:.2f}x",
                 f"records {summary.totals['records_read']:,} -> {summary.totals['records_kept']:,}; "
                 f"{_tasks(spark, summary.spark_job_groups)} tasks (map, rewrite)"])

    # -- rebuild-index vs raw read
    remote = fresh("rebuild")
    store = open_remote(remote)
    tasks = [(remote, TOPIC, p, s.base_offset, s.segment_id, s.size_in_bytes)
             for p in range(args.partitions) for s in load_manifest(store, TOPIC, p).copy_finished]
    store.close()
    t0 = time.perf_counter()
    read = sum(spark.sparkContext.parallelize(tasks, len(tasks)).map(_read_task).collect())
    raw_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    rb = run_job(spark, "rebuild-index", remote, rebuild_all=True)
    rebuild_s = time.perf_counter() - t0
    assert read == log_bytes
    rows.append([f"{label}: rebuild-index --all (MB/s)", f"{log_bytes / MB / rebuild_s:.1f}",
                 f"{log_bytes / MB / raw_s:.1f}", f"{raw_s / rebuild_s:.2f}x",
                 f"{rb.totals['segments']} segments; tasks {rb.phases['tasks_s']:.1f} s, the _remote_index "
                 f"Delta table {rb.phases['table_s']:.1f} s"])


def _tasks(spark, groups: list[str]) -> str:
    """Tasks Spark ran in each job group (its status tracker), as "a + b"."""
    from lakelog.spark_log.jobs import completed_tasks

    tracker = spark.sparkContext.statusTracker()
    return " + ".join(str(completed_tasks(tracker, g)) for g in groups) or "0"


def store_copiers(work: Path, src: Path):
    """Two functions that give each measured run its own copy of the built remote tier: one under
    `work` on the filesystem, one in the `bench` bucket from `s3://bench/pristine`; each returns its URL."""
    counter = iter(range(1_000_000))

    def fresh_fs(name: str) -> str:
        dst = work / f"{name}-{next(counter)}"
        shutil.copytree(src / "remote", dst / "remote")
        return (dst / "remote").as_uri()

    def fresh_s3(name: str) -> str:
        url = f"s3://bench/{name}-{next(counter)}"
        copy_store("s3://bench/pristine", url)
        return url

    return fresh_fs, fresh_s3


def spark_run_line(started: dt.datetime, seconds: float, machine: dict[str, str], stores: list[str]) -> str:
    """The opening of a Spark bench report: when, how long, which commit, the machine and the stores."""
    return (f"Run {started:%Y-%m-%d %H:%M} UTC, {seconds:.0f} s, commit {git_revision(ROOT)}; {machine['nproc']} CPUs "
            f"({machine['cpu']}), {machine['memory']}, {machine['python']}; local Spark `local[*]`; stores: "
            f"{', '.join(stores)}" + (" (s3: moto's S3 server through S3A)" if "s3" in stores else ""))


def run_source(spark, label: str, remote_src: str, parquet_root: str, args, rows: list[list[str]], s3=None) -> None:
    """The data source alone: the JVM reader (`lakelog`), the Python reader (`lakelog_python`,
    the reference) and Parquet over the same rows in the same store."""
    from pyspark.sql import functions as F

    from lakelog.spark_log.jvm_source import PYTHON_SOURCE_NAME

    def source(fmt: str, schema: str | None = None):
        r = spark.read.format(fmt)
        if schema:
            r = r.schema(schema)
        return r.option("remote", remote_src).option("topic", TOPIC).load()

    jvm, py = source("lakelog"), source(PYTHON_SOURCE_NAME)
    # the JVM reader reading 2 segments at once ahead of its decoder (off by default): what it gains,
    # in the same run
    ahead = spark.read.format("lakelog").option("prefetchSegments", "2").option("remote", remote_src) \
        .option("topic", TOPIC).load()
    parquet = parquet_root + "/rows"
    jvm.write.mode("overwrite").parquet(parquet)
    pq = spark.read.parquet(parquet)
    n = pq.count()
    pq_mb = stored_bytes(spark, parquet) / MB
    agg = F.sum(F.length("value"))
    expect = pq.agg(agg).collect()
    asked = ""
    if s3 is not None:  # the requests one scan and one count() send, counted at the S3 server
        s3.requests()
        assert jvm.agg(agg).collect() == expect
        scan_req = s3.requests()
        assert jvm.count() == n
        count_req = s3.requests()
        pq.agg(agg).collect()
        pq_req = s3.requests()
        asked = (f"; requests of one scan: {_requests(scan_req)}, of one count(): {_requests(count_req)}; "
                 f"of one Parquet scan (the baseline): {pq_req.get('GET', 0)} GET, {pq_req.get('HEAD', 0)} HEAD")
    assert jvm.agg(agg).collect() == expect and jvm.count() == n
    t = best({"jvm": lambda: jvm.agg(agg).collect(), "parquet": lambda: pq.agg(agg).collect(),
              "ahead": lambda: ahead.agg(agg).collect(),
              # the driver's planning alone (listing, manifests, splits): a new query's input partitions
              "planning": lambda: jvm.select("value").rdd.getNumPartitions()}, args.repeat)
    t["python"] = best({"python": lambda: py.agg(agg).collect()}, 1)["python"] if args.python_reader else None
    if s3 is not None:
        asked += "; " + default_stream_note(spark, pq, f"s3a://{AAL_BUCKET}/{parquet.rsplit('/', 2)[-2]}",
                                            lambda d: d.agg(agg).collect(), args.repeat)
    rows.append([f"{label}: scan value (rows/s)", f"{n / t['jvm']:,.0f}", _rate(n, t['python']),
                 f"{n / t['parquet']:,.0f}", f"**{t['parquet'] / t['jvm']:.2f}x**", _ratio(t['parquet'], t['python']),
                 f"`sum(length(value))`; target 0.8x; the Parquet copy is {pq_mb:.0f} MB; reading ahead "
                 f"(`prefetchSegments=2`): {t['parquet'] / t['ahead']:.2f}x; planning alone "
                 f"{t['planning'] * 1000:,.0f} ms{asked}"])
    # count() pushed into the scan adds up the manifests' record counts; reading every byte, in the same run
    read_all = spark.read.format("lakelog").option("countFromManifest", "false").option("remote", remote_src) \
        .option("topic", TOPIC).load()
    assert read_all.count() == n
    t = best({"jvm": lambda: jvm.count(), "parquet": lambda: pq.count(), "read": lambda: read_all.count()},
             args.repeat)
    t["python"] = best({"python": lambda: py.count()}, 1)["python"] if args.python_reader else None
    rows.append([f"{label}: count() (rows/s)", f"{n / t['jvm']:,.0f}", _rate(n, t['python']),
                 f"{n / t['parquet']:,.0f}", f"**{t['parquet'] / t['jvm']:.2f}x**", _ratio(t['parquet'], t['python']),
                 "target 0.5x; pushed into the scan: the manifests' record counts, no `.log` read; reading and "
                 f"checking every byte (`countFromManifest=false`): {t['parquet'] / t['read']:.2f}x"])
    lo = n // 2
    pushed = jvm.where(F.col("offset").between(lo // 4, lo // 4 + 999))
    t = best({"jvm": lambda: pushed.count(),
              "parquet": lambda: pq.where(F.col("offset").between(lo // 4, lo // 4 + 999)).count()}, args.repeat)
    rows.append([f"{label}: `offset BETWEEN` 1,000 per partition", f"{t['jvm'] * 1000:,.0f} ms", "",
                 f"{t['parquet'] * 1000:,.0f} ms", f"{t['parquet'] / t['jvm']:.2f}x", "",
                 "pushed to the JVM reader: segments by the manifest, first batch by the offset index"])


def _requests(counts: dict[str, int]) -> str:
    keyed = sum(v for k, v in counts.items() if k.startswith("GET ."))
    return ", ".join(f"{counts.get(k, 0)} {k}" for k in ("GET .log", "HEAD .log", "GET .json", "HEAD .json")) + \
        f", {counts.get('GET', 0) - keyed} LIST ({counts.get('GET', 0)} GET, {counts.get('HEAD', 0)} HEAD in all)"


def _rate(n: int, seconds: float | None) -> str:
    return "not run" if seconds is None else f"{n / seconds:,.0f}"


def _ratio(base: float, seconds: float | None) -> str:
    return "" if seconds is None else f"{base / seconds:.2f}x"


def source_main(args, stores: list[str]) -> int:
    """`--source-only`: the data source's scans (JVM, Python, Parquet) for each `--value-bytes`,
    on each store; writes the "spark-source" section."""
    from lakelog.spark_log.session import remote_session

    started = dt.datetime.now(dt.timezone.utc)
    others = OtherCpu()
    load_before = load_average()
    work = Path(tempfile.mkdtemp(prefix="lakelog-bench-spark-source-", dir=args.dir))
    rows: list[list[str]] = []
    sizes = [int(v) for v in str(args.value_bytes).split(",")]
    counts = [int(v) for v in str(args.records).split(",")]
    counts += [counts[-1]] * (len(sizes) - len(counts))
    built: list[str] = []
    s3 = None
    try:
        if "s3" in stores:
            import os

            from tests.support.s3server import S3Server

            s3 = S3Server().start()
            os.environ.update(s3.env())
            s3.create_bucket("bench")
            s3.create_bucket(AAL_BUCKET)
        spark = remote_session("s3://bench/x" if s3 else (work / "x").as_uri(), app_name="lakelog-bench-source",
                               conf={"spark.ui.showConsoleProgress": "false", **(S3_CONF if s3 else {})})
        spark.sparkContext.setLogLevel("ERROR")
        for size, records in zip(sizes, counts):
            src = work / f"v{size}"
            print(f"building {records} records of {size} B ...", flush=True)
            remote_src, log_bytes = build_remote(src, records, size, args.keys)
            built.append(f"{records:,} records of {size} B values: {log_bytes / MB:.0f} MB of `.log`")
            if "fs" in stores:
                print("  filesystem store ...", flush=True)
                run_source(spark, f"fs, {size} B", remote_src, (work / f"fs-parquet-{size}").as_uri(), args, rows)
            if s3 is not None:
                print("  S3 (moto) ...", flush=True)
                copy_store(remote_src, f"s3://bench/v{size}")
                run_source(spark, f"s3, {size} B", f"s3://bench/v{size}", f"s3a://bench/parquet-{size}", args, rows,
                           s3=s3)
            shutil.rmtree(src, ignore_errors=True)
        spark.stop()
    finally:
        if s3 is not None:
            s3.stop()
        shutil.rmtree(work, ignore_errors=True)
    seconds = (dt.datetime.now(dt.timezone.utc) - started).total_seconds()
    headers = ["benchmark", "JVM reader", "Python reader", "Parquet (same run)", "JVM / Parquet", "Python / Parquet",
               "notes"]
    print(text_table(headers, rows))
    if not args.no_write:
        m = machine_info(args.dir)
        body = "\n".join([
            "## The `lakelog` data source: JVM reader, Python reader, Parquet (`bench/spark.py --source-only`)", "",
            spark_run_line(started, seconds, m, stores) +
            f"; over {args.keys:,} keys in {PARTITIONS} partitions, 4 MiB "
            f"segments ({'; '.join(built)}). Best of {args.repeat} after a first run for the JVM reader and "
            f"Parquet, one run for the Python reader (where run). Load average {load_before} at the start, {load_average()} "
            f"at the end; " + conditions(m["nproc"], others.cpus(), args.note), "",
            markdown_table(headers, rows),
        ])
        rewrite_section(DOC_PATH, "spark-source", body)
        print("wrote the 'spark-source' section of docs/benchmarks.md")
    return 0


def decode_profile(remote_src: str) -> str:
    """Where the data source's time goes in one task: decoding one segment with every column."""
    from lakelog.tiering.remote_scan import iter_segment_arrow, load_manifest, open_remote

    store = open_remote(remote_src)
    try:
        seg = load_manifest(store, TOPIC, 0).copy_finished[0]
        sum(k for k, _ in iter_segment_arrow(store, TOPIC, 0, seg))  # warm-up: imports, page cache
        t = time.perf_counter()
        store.get_range(f"{TOPIC}-0/{seg.base_offset:020d}-{seg.segment_id}.log", 0, seg.size_in_bytes)
        get_s = time.perf_counter() - t
        t = time.perf_counter()
        n = sum(k for k, _ in iter_segment_arrow(store, TOPIC, 0, seg))
        all_s = time.perf_counter() - t
        t = time.perf_counter()
        sum(k for k, _ in iter_segment_arrow(store, TOPIC, 0, seg, columns=["offset"]))
        off_s = time.perf_counter() - t
    finally:
        store.close()
    return (f"one segment ({seg.size_in_bytes / MB:.0f} MB, {n:,} rows) in one Python process: GET {get_s:.3f} s, "
            f"GET + native decode of every column {all_s:.3f} s ({n / all_s:,.0f} rows/s), of the offsets only "
            f"{off_s:.3f} s")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", default="1000000", help="records; with --source-only, one per --value-bytes")
    ap.add_argument("--python-reader", action="store_true", help="--source-only: also time the Python reader")
    ap.add_argument("--value-bytes", default="100", help="value size; with --source-only, a list: 100,1024")
    ap.add_argument("--source-only", action="store_true", help="only the data source's scans (JVM, Python, Parquet)")
    ap.add_argument("--keys", type=int, default=40_000)
    ap.add_argument("--partitions", type=int, default=PARTITIONS)
    ap.add_argument("--jobs-only", action="store_true", help="only compaction and rebuild-index (section spark-jobs)")
    ap.add_argument("--compaction-task-bytes", type=int, default=0,
                    help="compaction.task.max.bytes of the compaction job (default: the key's default)")
    ap.add_argument("--stores", default="fs,s3")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--dir", default="/tmp")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--note", default="")
    args = ap.parse_args(argv)
    stores = [s.strip() for s in args.stores.split(",") if s.strip()]
    if args.source_only:
        return source_main(args, stores)
    args.value_bytes = int(args.value_bytes)
    args.records = int(args.records)

    from lakelog.spark_log.jobs import run_job
    from lakelog.spark_log.session import remote_session

    started = dt.datetime.now(dt.timezone.utc)
    others = OtherCpu()
    load_before = load_average()
    work = Path(tempfile.mkdtemp(prefix="lakelog-bench-spark-", dir=args.dir))
    rows: list[list[str]] = []
    where: list[str] = []
    s3 = None
    try:
        src = work / "pristine"
        print(f"building {args.records} records ...", flush=True)
        remote_src, log_bytes = build_remote(src, args.records, args.value_bytes, args.keys, args.partitions)
        if "s3" in stores:
            sys.path.insert(0, str(ROOT))
            from tests.support.s3server import S3Server
            import os

            s3 = S3Server().start()
            os.environ.update(s3.env())
            s3.create_bucket("bench")
            s3.create_bucket(AAL_BUCKET)
            copy_store(remote_src, "s3://bench/pristine")
        spark = remote_session("s3://bench/x" if s3 else remote_src, app_name="lakelog-bench",
                               conf={"spark.ui.showConsoleProgress": "false", **(S3_CONF if s3 else {})})
        spark.sparkContext.setLogLevel("ERROR")
        fresh_fs, fresh_s3 = store_copiers(work, src)

        # Warm-up: a JVM and Python workers that have run a job once.
        run_job(spark, "retention", fresh_fs("warm"), overrides={"cleanup.policy": "compact,delete", "retention.ms": "-1"})
        if args.jobs_only:  # the first Delta write of a JVM loads Delta's classes: not the commit's cost
            from lakelog.spark_log.jobs import write_remote_index_table

            write_remote_index_table(spark, fresh_fs("warm-delta"), [])
        where.append(decode_profile(remote_src))
        if "fs" in stores:
            print("filesystem store ...", flush=True)
            run_store(spark, "fs", remote_src, fresh_fs, (work / "fs-parquet").as_uri(), log_bytes, args, rows, where)
        if s3 is not None:
            print("S3 (moto) ...", flush=True)
            run_store(spark, "s3", "s3://bench/pristine", fresh_s3, "s3a://bench/parquet", log_bytes, args, rows, where)
        spark.stop()
    finally:
        if s3 is not None:
            s3.stop()
        shutil.rmtree(work, ignore_errors=True)

    seconds = (dt.datetime.now(dt.timezone.utc) - started).total_seconds()
    headers = ["benchmark", "Lakelog", "baseline (same run)", "ratio", "notes"]
    print(text_table(headers, rows))
    print("\n".join(where))
    if not args.no_write:
        m = machine_info(args.dir)
        body = "\n".join([
            "## Spark jobs and the data source (`bench/spark.py`)", "",
            spark_run_line(started, seconds, m, stores) + ". " +
            f"{args.records:,} records of {args.value_bytes} B values over {args.keys:,} keys in {args.partitions} "
            f"partitions ({log_bytes / MB:.0f} MB of remote `.log` objects). Load average {load_before} at the "
            f"start, {load_average()} at the end; " + conditions(m["nproc"], others.cpus(), args.note), "",
            markdown_table(headers, rows), "",
            "Where the time goes: " + "; ".join(where) + ".",
        ])
        section = "spark-jobs" if args.jobs_only else SECTION
        if args.jobs_only:
            body = body.replace("## Spark jobs and the data source (`bench/spark.py`)",
                                "## Spark jobs: compaction and rebuild-index (`bench/spark.py --jobs-only`)")
        rewrite_section(DOC_PATH, section, body)
        print(f"wrote the '{section}' section of docs/benchmarks.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
