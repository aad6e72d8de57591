"""Peak memory of one Spark task's Python work, for 16 MiB and 256 MiB remote segments.

A Python worker runs one task at a time; what a task adds to the worker's resident memory is
what the work of the task holds at once. Each case runs the exact function a task runs, on one
partition whose remote tier is one segment of the given size, in a fresh Python process (the
worker's own fixed part, pyspark and the imports, is measured before and reported apart):

  scan           the data source's read of the segment (`LakelogReader.read`: all columns,
                 Arrow batches of 65,536 rows handed on and dropped, as Spark's worker does)
  compaction     `compact_partition` of the partition (`--force`; every key distinct per 4
                 records, so a quarter of the records survive)
  compaction-map the compaction job's first map task (`remote_split.map_segments` over the first
                 map run the job plans at its default settings: a segment larger than
                 compaction.task.max.bytes, 128 MiB, is cut at its offset index into pieces);
                 once per `--map-bytes` value of compaction.offset.map.max.bytes ("default":
                 128 MiB), its "map held" column the most bytes the task's map held by its own count
  rebuild-index  `rebuild_segment` of the segment (mode all)

The peak is the process's VmHWM after the task, reset (/proc/self/clear_refs) once the imports are
done; "task" = peak - resident before the task. Bounded means the task column stays about the same
from 16 to 256 MiB (the offset map of compaction grows with the distinct keys, up to its bound).

    .venv/bin/python bench/spark_memory.py [--sizes 16,256] [--values 100,1024] [--map-bytes default,16]
        [--key-repeat 4] [--kinds scan,compaction-map,rebuild-index,compaction] [--no-write]

Writes the "spark-memory" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.harness import git_revision, load_average, machine_info, markdown_table, rewrite_section, text_table  # noqa: E402

DOC_PATH = ROOT / "docs" / "benchmarks.md"
SECTION = "spark-memory"
TOPIC = "mem"
MiB = 1024 * 1024

TASK = r'''
import gc, json, os, sys, time
sys.path.insert(0, sys.argv[1])
remote, kind, map_max = sys.argv[2], sys.argv[3], int(sys.argv[4])
import pyarrow, pyarrow.compute  # noqa: F401
from lakelog.compaction.config import CompactionJobConfig
from lakelog.compaction.remote import compact_partition
from lakelog.compaction.remote_split import map_runs, map_segments
from lakelog.infra.config import LogConfig
from lakelog.spark_log.datasource import LakelogReader
from lakelog.tiering.index_rebuild import rebuild_segment
from lakelog.tiering.remote_scan import index_entries, load_manifest, open_remote

def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024

gc.collect()
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # reset VmHWM to the current RSS
before = status("VmRSS")
started = time.monotonic()
if kind == "scan":
    reader = LakelogReader({"remote": remote, "topic": "mem"})
    rows = 0
    for part in reader.partitions():
        for batch in reader.read(part):
            rows += batch.num_rows
    what = rows
elif kind == "compaction":
    store = open_remote(remote)
    cfg = LogConfig({"cleanup.policy": "compact", "segment.bytes": str(1 << 30), "min.cleanable.dirty.ratio": "0"})
    what = compact_partition(store, "mem", 0, cfg, owner="bench", force=True, delete_delay_ms=0).records_kept
elif kind == "compaction-map":
    store = open_remote(remote)
    jc = CompactionJobConfig({"compaction.offset.map.max.bytes": str(map_max)} if map_max else {})
    segs = load_manifest(store, "mem", 0).copy_finished
    end = segs[-1].end_offset + 1
    runs = map_runs(segs, start_offset=0, end_offset=end, max_bytes=jc.compaction_task_max_bytes,
                    index=lambda s: index_entries(store, "mem", 0, s))
    p = map_segments(store, "mem", 0, [s for s, _, _ in runs[0]], start_offset=0, end_offset=end,
                     max_bytes=jc.compaction_offset_map_max_bytes,
                     max_uncompressed_bytes=LogConfig({}).max_uncompressed_batch_bytes,
                     pieces=[(lo, hi) for _, lo, hi in runs[0]])
    what = f"{len(runs)} map tasks; the first read {p.bytes_read} B, map peak {p.peak_map_bytes} B, cut at {p.cut_offset}"
    map_peak = p.peak_map_bytes
else:
    store = open_remote(remote)
    seg = load_manifest(store, "mem", 0).copy_finished[0]
    what = rebuild_segment(store, "mem", 0, seg, index_interval_bytes=4096, mode="all").to_dict()["index_action"]
print(json.dumps({"before": before, "peak": status("VmHWM"), "seconds": time.monotonic() - started, "what": what,
                  "map_peak": globals().get("map_peak")}))
'''


def build(root: Path, size_mib: int, value_bytes: int, key_repeat: int = 4) -> str:
    """One partition whose remote tier is one segment of about `size_mib` MiB; each key repeats in
    `key_repeat` consecutive records."""
    import random

    from lakelog.infra.config import LogConfig
    from lakelog.logstore.log import PartitionLog
    from lakelog.logstore.record_batch import Record, build_batch
    from lakelog.tiering.manager import RemoteTier
    from lakelog.tiering.config import TieringConfig
    from lakelog.tiering.fs_store import FileSystemStore

    rng = random.Random(1)
    store = FileSystemStore(root / "remote")
    tier = RemoteTier(store, TieringConfig({"remote.log.copy.max.segments.per.round": 100_000}))
    log = PartitionLog(root / "local" / f"{TOPIC}-0", LogConfig({"segment.bytes": str(1 << 30), "retention.ms": "-1",
                                                                 "index.interval.bytes": "4096"}))
    payload = bytes(rng.randrange(256) for _ in range(value_bytes))
    target = size_mib * MiB
    n = 0
    while log.log_end_offset == 0 or log.size_in_bytes < target:
        recs = [Record(i, 1_700_000_000_000 + n + i, f"key-{(n + i) // key_repeat}".encode(), payload) for i in range(200)]
        log.append_as_leader(build_batch(recs), 1)
        n += 200
    log.roll()
    tier.partition(TOPIC, 0).copy_segments(log, 1, log.log_end_offset)
    log.close()
    return (root / "remote").as_uri()


def measure(remote: str, kind: str, map_max_bytes: int = 0) -> dict:
    out = subprocess.run([sys.executable, "-c", TASK, str(ROOT), remote, kind, str(map_max_bytes)],
                         capture_output=True, text=True,
                         check=True, cwd=str(ROOT))
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="16,256", help="segment sizes in MiB")
    parser.add_argument("--values", default="100,1024", help="value sizes in bytes")
    parser.add_argument("--map-bytes", default="default,16",
                        help="compaction.offset.map.max.bytes values in MiB for the compaction-map case "
                             "(default: the setting's default)")
    parser.add_argument("--key-repeat", type=int, default=4, help="consecutive records per key")
    parser.add_argument("--kinds", default="scan,compaction-map,rebuild-index,compaction",
                        help="cases to run (compaction last: it rewrites the segment the others read)")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    load_start = load_average()
    rows = []
    for value_bytes in (int(v) for v in args.values.split(",")):
        for size in (int(s) for s in args.sizes.split(",")):
            with tempfile.TemporaryDirectory(prefix="lakelog-bench-mem-") as tmp:
                remote = build(Path(tmp), size, value_bytes, args.key_repeat)
                # compaction last: it rewrites the segment (a quarter of it survives) that the
                # others read
                for kind in args.kinds.split(","):
                    for bound in (args.map_bytes.split(",") if kind == "compaction-map" else ["default"]):
                        map_max = 0 if bound == "default" else int(bound) * MiB
                        r = measure(remote, kind, map_max)
                        label = kind if kind != "compaction-map" else f"{kind}, bound {bound if map_max else 128} MiB"
                        map_peak = "" if r.get("map_peak") is None else f"{r['map_peak'] / MiB:.1f}"
                        rows.append([f"{value_bytes} B", f"{size} MiB", label, f"{r['before'] / MiB:.0f}",
                                     f"{r['peak'] / MiB:.0f}", f"{(r['peak'] - r['before']) / MiB:.0f}", map_peak,
                                     f"{r['seconds']:.1f}"])
                        print(text_table(["value", "segment", "task", "before MiB", "peak MiB", "task MiB", "map MiB",
                                          "s"], rows[-1:]), r["what"], flush=True)
    headers = ["value", "segment", "task", "worker before (MiB)", "peak (MiB)", "task adds (MiB)",
               "map held, own count (MiB)", "seconds"]
    info = machine_info(tempfile.gettempdir())
    body = "\n".join([
        "## Spark task memory (`bench/spark_memory.py`)", "",
        "What one task's Python work adds to a worker's resident memory (peak VmHWM minus the resident "
        "memory before the task, in a fresh process with the imports done), on one partition whose remote "
        f"tier is one segment of the size shown; each key repeats in {args.key_repeat} consecutive records "
        f"(1/{args.key_repeat} of them survive compaction).",
        "",
        f"Run {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC at {git_revision(ROOT)}, `bench/spark_memory.py`; "
        f"{info['nproc']} CPUs, {info['memory']}; load average {load_start} at the start, {load_average()} at the end "
        "(memory figures do not depend on load; seconds do).", "",
        markdown_table(headers, rows), ""])
    print(text_table(headers, rows))
    if not args.no_write:
        rewrite_section(DOC_PATH, SECTION, body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
