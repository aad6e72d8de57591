"""The JVM reader over one large segment: cut across tasks (the default) against read in one task.

One topic partition whose remote tier is one (or a few) large segments (`--segment-bytes`, default
128 MiB, Kafka's usual `segment.bytes` range is 128 MiB - 1 GiB), distinct seeded values of
`--value-bytes`, tiered into a filesystem store and copied to moto's S3 server. In one Spark
session `local[*]`, per store, alternating, best of `--repeat` after a warm-up:

  cut     `spark.read.format("lakelog")` with the default planning: a segment larger than the group
          size (here the bytes spread over the cores) is cut into parts of consecutive offsets,
          one task each (spark_log/jvm/.../Planner.java `cut`)
  whole   the same with `minSplitBytes` = 1 TiB: each segment read by one task, as before the cut

both running `sum(length(value))`; the ratio is whole / cut time (above 1: the cut is faster). The
notes give the input partitions of each and, on S3, the GETs and the bytes their ranges asked for
(counted at the S3 server).

    .venv/bin/python bench/spark_split.py [--segment-bytes B] [--segments N] [--value-bytes V] [--stores fs,s3]
                                          [--repeat R] [--no-write] [--note "..."]

Writes the "spark-split" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.harness import OtherCpu, conditions, load_average, machine_info, markdown_table, rewrite_section, text_table  # noqa: E402
from bench.spark import best, copy_store, distinct_value, spark_run_line  # noqa: E402
from lakelog.infra.config import LogConfig  # noqa: E402
from lakelog.logstore.log import PartitionLog  # noqa: E402
from lakelog.logstore.record_batch import Record, build_batch  # noqa: E402
from lakelog.tiering.config import TieringConfig  # noqa: E402
from lakelog.tiering.fs_store import FileSystemStore  # noqa: E402
from lakelog.tiering.manager import RemoteTier  # noqa: E402
from lakelog.tiering.remote_scan import load_manifest  # noqa: E402

DOC_PATH = ROOT / "docs" / "benchmarks.md"
SECTION = "spark-split"
TOPIC = "split"
BATCH_RECORDS = 100


def build_remote(root: Path, segment_bytes: int, segments: int, value_bytes: int) -> tuple[str, int, list[int]]:
    """One partition of about `segments` x `segment_bytes` of batches, tiered into a filesystem
    store; returns (its URL, the records, the segments' sizes)."""
    rng = random.Random(14)
    store = FileSystemStore(root / "remote")
    tier = RemoteTier(store, TieringConfig({"remote.log.copy.max.segments.per.round": 100_000}))
    log = PartitionLog(root / "local" / f"{TOPIC}-0",
                       LogConfig({"segment.bytes": segment_bytes, "index.interval.bytes": 4096, "retention.ms": -1}))
    per_record = value_bytes + 30
    records = segments * segment_bytes // per_record - BATCH_RECORDS  # stays under the last segment's limit
    ts = 1_700_000_000_000
    for start in range(0, records, BATCH_RECORDS):
        recs = [Record(start + i, ts + start + i, b"key-%d" % (start + i), distinct_value(rng, value_bytes))
                for i in range(min(BATCH_RECORDS, records - start))]
        log.append_as_leader(build_batch(recs), 1)
    log.roll()
    tier.partition(TOPIC, 0).copy_segments(log, 1, log.log_end_offset)
    log.close()
    shutil.rmtree(root / "local")
    sizes = [s.size_in_bytes for s in load_manifest(store, TOPIC, 0).copy_finished]
    return (root / "remote").as_uri(), records, sizes


def run_store(spark, label: str, remote: str, records: int, repeat: int, s3=None) -> list[str]:
    from pyspark.sql import functions as F

    def df(**options):
        r = spark.read.format("lakelog").option("remote", remote).option("topic", TOPIC)
        for k, v in options.items():
            r = r.option(k, v)
        return r.load()

    cut, whole = df(), df(minSplitBytes=str(1 << 40))
    agg = F.sum(F.length("value"))
    expect = whole.agg(agg).collect()
    assert cut.agg(agg).collect() == expect and cut.count() == whole.count() == records
    tasks = {"cut": cut.select("value").rdd.getNumPartitions(), "whole": whole.select("value").rdd.getNumPartitions()}
    asked = ""
    if s3 is not None:  # the requests of one scan of each, counted at the S3 server
        notes = []
        for name, d in (("cut", cut), ("whole", whole)):
            s3.requests()
            d.agg(agg).collect()
            r = s3.requests()
            notes.append(f"{name}: {r.get('GET .log', 0)} GET .log asking {r.get('bytes GET .log', 0) / 1e6:.1f} MB, "
                         f"{r.get('GET .index', 0)} GET .index, {r.get('HEAD', 0)} HEAD")
        asked = "; " + "; ".join(notes)
    t = best({"cut": lambda: cut.agg(agg).collect(), "whole": lambda: whole.agg(agg).collect()}, repeat)
    return [f"{label}: scan value (rows/s)", f"{records / t['cut']:,.0f}", f"{records / t['whole']:,.0f}",
            f"**{t['whole'] / t['cut']:.2f}x**",
            f"`sum(length(value))`; {tasks['cut']} tasks cut, {tasks['whole']} whole; best "
            f"{t['cut']:.2f} s against {t['whole']:.2f} s{asked}"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--segment-bytes", type=int, default=128 * 1024 * 1024)
    ap.add_argument("--segments", type=int, default=1)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--stores", default="fs,s3")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default="/tmp")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--note", default="")
    args = ap.parse_args(argv)
    stores = [s.strip() for s in args.stores.split(",") if s.strip()]

    from lakelog.spark_log.jvm_source import jvm_source_loaded
    from lakelog.spark_log.session import remote_session

    started = dt.datetime.now(dt.timezone.utc)
    others = OtherCpu()
    load_before = load_average()
    work = Path(tempfile.mkdtemp(prefix="lakelog-bench-split-", dir=args.dir))
    rows: list[list[str]] = []
    s3 = None
    try:
        print(f"building {args.segments} segment(s) of {args.segment_bytes:,} bytes ...", flush=True)
        remote_src, records, sizes = build_remote(work / "src", args.segment_bytes, args.segments, args.value_bytes)
        if "s3" in stores:
            from tests.support.s3server import S3Server

            s3 = S3Server().start()
            os.environ.update(s3.env())
            s3.create_bucket("bench")
            copy_store(remote_src, "s3://bench/split")
        spark = remote_session("s3://bench/x" if s3 else remote_src, app_name="lakelog-bench-split",
                               conf={"spark.ui.showConsoleProgress": "false"})
        spark.sparkContext.setLogLevel("ERROR")
        if not jvm_source_loaded(spark):
            raise SystemExit("the JVM reader's jar is not built: make jvm")
        cores = spark.sparkContext.defaultParallelism
        if "fs" in stores:
            rows.append(run_store(spark, "fs", remote_src, records, args.repeat))
        if s3 is not None:
            rows.append(run_store(spark, "s3", "s3://bench/split", records, args.repeat, s3))
        spark.stop()
    finally:
        if s3 is not None:
            s3.stop()
        shutil.rmtree(work, ignore_errors=True)

    seconds = (dt.datetime.now(dt.timezone.utc) - started).total_seconds()
    headers = ["benchmark", "cut (default)", "whole segment per task (same run)", "ratio", "notes"]
    print(text_table(headers, rows))
    if not args.no_write:
        m = machine_info(args.dir)
        body = "\n".join([
            f"## The JVM reader over one large segment: cut across tasks or not (`bench/spark_split.py`, "
            f"{started:%Y-%m-%d})", "",
            spark_run_line(started, seconds, m, stores) + f"; default parallelism {cores}. One partition, "
            f"{records:,} records of {args.value_bytes} B values in {len(sizes)} remote segment(s) of "
            f"{', '.join(f'{s / 2**20:.1f} MiB' for s in sizes)}. Ratio: the whole-segment read's time over the "
            f"cut read's. Load average {load_before} at the start, {load_average()} at the end; "
            + conditions(m["nproc"], others.cpus(), args.note), "",
            markdown_table(headers, rows),
        ])
        rewrite_section(DOC_PATH, SECTION, body)
        print(f"wrote the '{SECTION}' section of docs/benchmarks.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
