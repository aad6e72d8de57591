"""The newest version of a Delta table and its latest commit, read from the object store by
`spark_log/delta_log.py`, against the two ways the project read them before (measured in the same
run, over the same logs, through the same store clients):

  list-all   what `remote_index_table` did: a LIST of the whole `_delta_log/`, the highest
             `<v>.json`, one GET of it
  probe      what `delta_commits` did: GET `_last_checkpoint`, HEAD `<v>.json` from its version
             doubling the step, then bisecting; one GET of the newest
  Lakelog    `delta_log.log_tail` (GET `_last_checkpoint`, one LIST that starts at its version)
             and `delta_log.read_commit` of the newest

The logs are laid out as Delta writes them (commit JSON files with commitInfo and an add action,
a `.crc` beside each, a checkpoint every 10 commits, `_last_checkpoint`), with `--commits` commits
each (the log of a table that keeps every commit: Delta's default `delta.logRetentionDuration` is
30 days), on the filesystem store and on moto's S3 server over HTTP (`tests/support/s3server.py`;
moto answers in about a millisecond, so the S3 times are request-bound, not S3's). The three are
alternated per round; best and median of `--rounds`; requests counted by the store.

    .venv/bin/python bench/delta_log.py [--commits 100,2000,20000] [--s3-max-commits 2000] [--stores fs,s3]
                                        [--rounds 7] [--no-write] [--note "..."]

Writes the "delta-log" section of docs/benchmarks.md. Information, no target: the reader's job is to
be right on odd logs (tests/unit/test_delta_log.py) at a cost that does not grow with the log.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime as dt
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.harness import (  # noqa: E402
    OtherCpu,
    alternate,
    conditions,
    git_revision,
    load_average,
    machine_info,
    markdown_table,
    paired_ratio,
    rewrite_section,
    text_table,
)
from lakelog.spark_log.delta_log import commit_key, log_prefix, log_tail, read_commit  # noqa: E402
from lakelog.tiering.errors import ObjectNotFoundError  # noqa: E402
from lakelog.tiering.fs_store import FileSystemStore  # noqa: E402

DOC_PATH = ROOT / "docs" / "benchmarks.md"
SECTION = "delta-log"
TABLE = "bench"
CHECKPOINT_INTERVAL = 10
_COMMIT = re.compile(r"(\d{20})\.json")


def build_log(store, commits: int) -> None:
    """A Delta log of `commits` commits, as Delta lays it out."""
    prefix = log_prefix(TABLE)

    def commit(v: int) -> None:
        actions = [{"commitInfo": {"timestamp": 1_700_000_000_000 + v, "operation": "WRITE",
                                   "operationMetrics": {"numFiles": "1", "numOutputRows": "1000"},
                                   "userMetadata": f"run-{v}"}},
                   {"txn": {"appId": "bench", "version": v, "lastUpdated": 1}},
                   {"add": {"path": f"part-{v:05d}-c000.snappy.parquet", "size": 4096, "partitionValues": {},
                            "modificationTime": 1, "dataChange": True}}]
        store.put(commit_key(TABLE, v), "\n".join(json.dumps(a) for a in actions).encode())
        store.put(f"{prefix}{v:020d}.crc", b'{"tableSizeBytes": 1}')
        if v and v % CHECKPOINT_INTERVAL == 0:
            store.put(f"{prefix}{v:020d}.checkpoint.parquet", b"PAR1" + bytes(1024) + b"PAR1")

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(commit, range(commits)))
    last = (commits - 1) // CHECKPOINT_INTERVAL * CHECKPOINT_INTERVAL
    if last:
        store.put(prefix + "_last_checkpoint", json.dumps({"version": last, "size": 4}).encode())


def list_all(store) -> tuple[int, list[str]]:
    """The old remote_index_table way."""
    prefix = log_prefix(TABLE)
    versions = [int(m.group(1)) for o in store.list(prefix) if (m := _COMMIT.fullmatch(o.key[len(prefix):]))]
    newest = max(versions)
    data, _ = store.get(commit_key(TABLE, newest))
    return newest, data.decode().splitlines()


def probe(store) -> tuple[int, list[str]]:
    """The old delta_commits way."""
    def exists(v: int) -> bool:
        try:
            store.head(commit_key(TABLE, v))
            return True
        except ObjectNotFoundError:
            return False

    try:
        low = int(json.loads(store.get(log_prefix(TABLE) + "_last_checkpoint")[0])["version"])
    except ObjectNotFoundError:
        low = 0
    step = 1
    while exists(low + step):
        low += step
        step *= 2
    high = low + step
    while high - low > 1:
        mid = (low + high) // 2
        if exists(mid):
            low = mid
        else:
            high = mid
    data, _ = store.get(commit_key(TABLE, low))
    return low, data.decode().splitlines()


def lakelog(store) -> tuple[int, list[dict]]:
    newest = log_tail(store, TABLE).newest
    return newest, read_commit(store, TABLE, newest)


def requests_of(store, fn) -> str:
    before = store.stats.snapshot()["requests"]
    fn(store)
    after = store.stats.snapshot()["requests"]
    return ", ".join(f"{after[k] - before[k]} {k}" for k in ("GET", "HEAD", "LIST") if after[k] - before[k])


def run_store(kind: str, store, commits: int, rounds: int) -> list[list[str]]:
    print(f"{kind}: a log of {commits} commits ...", flush=True)
    build_log(store, commits)
    answers = {name: fn(store)[0] for name, fn in (("list-all", list_all), ("probe", probe), ("Lakelog", lakelog))}
    if set(answers.values()) != {commits - 1}:
        raise SystemExit(f"{kind}: the readers disagree on a valid log: {answers}")
    cases = {"list-all": lambda: list_all(store) and None, "probe": lambda: probe(store) and None,
             "Lakelog": lambda: lakelog(store) and None}  # None: the whole call is timed
    t = alternate(cases, rounds=rounds, warmup=1)
    rows = []
    for base in ("list-all", "probe"):
        rows.append([f"{kind}, {commits:,} commits: newest + its commit vs {base}",
                     f"{t['Lakelog'].best * 1e3:.1f} ms (median {t['Lakelog'].median * 1e3:.1f})",
                     f"{t[base].best * 1e3:.1f} ms (median {t[base].median * 1e3:.1f})",
                     f"{paired_ratio(t[base], t['Lakelog']):.2f}x",
                     f"Lakelog {requests_of(store, lakelog)}; {base} {requests_of(store, {'list-all': list_all, 'probe': probe}[base])}"])
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--commits", default="100,2000,20000", help="comma-separated log lengths")
    ap.add_argument("--s3-max-commits", type=int, default=2000,
                    help="longer logs on the filesystem only (moto's whole-log LIST takes seconds each)")
    ap.add_argument("--stores", default="fs,s3")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--note", default="")
    args = ap.parse_args(argv)
    sizes = [int(c) for c in args.commits.split(",") if c.strip()]
    stores = [s.strip() for s in args.stores.split(",") if s.strip()]

    started = dt.datetime.now(dt.timezone.utc)
    others = OtherCpu()
    load_before = load_average()
    work = Path(tempfile.mkdtemp(prefix="lakelog-bench-delta-log-", dir=args.dir))
    rows: list[list[str]] = []
    s3 = None
    try:
        if "s3" in stores:
            from lakelog.tiering.s3_store import S3Store
            from tests.support.s3server import S3Server

            s3 = S3Server().start()
            os.environ.update(s3.env())
        for n in sizes:
            if "fs" in stores:
                with FileSystemStore(work / f"fs-{n}") as store:
                    rows += run_store("fs", store, n, args.rounds)
            if s3 is not None and n <= args.s3_max_commits:
                bucket = f"bench-delta-log-{n}"
                s3.create_bucket(bucket)
                with S3Store(bucket, "tier") as store:
                    rows += run_store("s3", store, n, args.rounds)
    finally:
        if s3 is not None:
            s3.stop()
        shutil.rmtree(work, ignore_errors=True)

    seconds = (dt.datetime.now(dt.timezone.utc) - started).total_seconds()
    headers = ["benchmark", "Lakelog", "baseline (same run)", "ratio (baseline / Lakelog time)", "requests"]
    print(text_table(headers, rows))
    if not args.no_write:
        m = machine_info(args.dir)
        body = "\n".join([
            "## Reading a Delta log's newest commit (`bench/delta_log.py`)", "",
            f"Run {started:%Y-%m-%d %H:%M} UTC, {seconds:.0f} s, commit {git_revision(ROOT)}; {m['nproc']} CPUs "
            f"({m['cpu']}), {m['python']}; stores: {', '.join(stores)} (s3: moto's S3 server over HTTP, logs of "
            f"at most {args.s3_max_commits:,} commits). Logs "
            f"laid out as Delta writes them (a `.crc` per commit, a checkpoint every {CHECKPOINT_INTERVAL} commits, "
            f"`_last_checkpoint`); best of {args.rounds} alternated rounds, ratio the median of per-round "
            f"ratios. Load average {load_before} at the start, {load_average()} at the end; "
            + conditions(m["nproc"], others.cpus(), args.note), "",
            markdown_table(headers, rows),
        ])
        rewrite_section(DOC_PATH, SECTION, body)
        print(f"wrote the '{SECTION}' section of docs/benchmarks.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
