"""read_committed against read_uncommitted over the same transactional partition, in-process.

A partition log holds transactions of `--records-per-txn` records from several producers (one in
`--abort-every` aborted), each closed by its COMMIT / ABORT marker (`PartitionLog.append_control`).
Two readers walk it from offset 0 to the end in fetches of `--fetch-bytes`, alternated round by
round (`bench.harness.alternate`):

* the Kafka door's work on a plain-TCP listener: the file ranges of the batches below the HW
  (`read_slices`, read_uncommitted) against those below the LSO plus the aborted transactions of
  exactly the offsets they hold, from the `.txnindex` files (records_apis.py's `_read_committed`);
  the bytes go out with sendfile in both cases, so neither reads them here — target:
  read_committed >= 0.9x of read_uncommitted;
* the HTTP door's work (it decodes records): control batches dropped (read_uncommitted) against
  aborted transactions and control batches dropped (read_committed) — same target.

Ratios are records/s of read_committed over read_uncommitted, paired per round. The section
`read-committed` of docs/benchmarks.md is rewritten unless `--no-write`.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import shutil
import tempfile
import time
from pathlib import Path

from bench.harness import (
    OtherCpu,
    alternate,
    conditions,
    git_revision,
    machine_info,
    markdown_table,
    paired_ratio,
    rewrite_section,
)
from lakelog.logstore.log import PartitionLog
from lakelog.logstore.read_committed import committed_batches, cut_at_offset, data_batches, next_offset_after
from lakelog.logstore.record_batch import Record, build_batch, iter_batches

ROOT = Path(__file__).resolve().parent.parent
DOC_PATH = ROOT / "docs" / "benchmarks.md"
TARGET = 0.9


def build_log(directory: Path, transactions: int, records_per_txn: int, abort_every: int,
              producers: int) -> PartitionLog:
    log = PartitionLog(directory)
    now = int(time.time() * 1000)
    value = b"v" * 100
    seqs = [0] * producers
    for t in range(transactions):
        pid = t % producers
        records = [Record(i, now, b"key-%d" % i, value) for i in range(records_per_txn)]
        log.append_as_leader(build_batch(records, producer_id=pid, producer_epoch=0, base_sequence=seqs[pid],
                                         is_transactional=True), 0)
        seqs[pid] += records_per_txn
        log.append_control(pid, 0, t % abort_every != abort_every - 1, 0, 0)
    log.update_high_watermark(log.log_end_offset)
    return log


def kafka_uncommitted(log: PartitionLog, fetch_bytes: int) -> int:
    offset, hw, n = 0, log.high_watermark, 0
    while offset < hw:
        data = log.read_slices(offset, fetch_bytes, max_offset=hw).records
        n += len(data)
        offset = data.next_offset
        data.close()
    return n


def kafka_committed(log: PartitionLog, fetch_bytes: int) -> int:
    offset, lso, n = 0, log.last_stable_offset, 0
    while offset < lso:
        data = log.read_slices(offset, fetch_bytes, max_offset=log.last_stable_offset).records
        log.aborted_transactions(offset, data.next_offset)
        n += len(data)
        offset = data.next_offset
        data.close()
    return n


def http_records(log: PartitionLog, fetch_bytes: int, committed: bool) -> int:
    offset, hw, n = 0, log.high_watermark, 0
    while offset < hw:
        data = log.read(offset, fetch_bytes, max_offset=hw).records
        if committed:
            data = cut_at_offset(data, log.last_stable_offset)
        nxt = next_offset_after(data, offset)
        batches = [b for _, b in iter_batches(data)]
        kept = committed_batches(batches, log.aborted_transactions(offset, nxt)) if committed \
            else data_batches(batches)
        n += sum(len(b.records()) for b in kept)
        offset = nxt
    return n


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--transactions", type=int, default=20_000)
    parser.add_argument("--records-per-txn", type=int, default=10)
    parser.add_argument("--abort-every", type=int, default=10, help="one transaction in N is aborted")
    parser.add_argument("--producers", type=int, default=8)
    parser.add_argument("--fetch-bytes", type=int, default=1 << 20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir", default="/tmp")
    parser.add_argument("--no-write", action="store_true", help=f"do not update {DOC_PATH.relative_to(ROOT)}")
    parser.add_argument("--note", default="")
    args = parser.parse_args(argv)
    started = _dt.datetime.now(_dt.timezone.utc)
    machine = machine_info(args.dir)
    others = OtherCpu()
    root = Path(tempfile.mkdtemp(prefix="lakelog-bench-rc-", dir=args.dir))
    try:
        log = build_log(root / "t-0", args.transactions, args.records_per_txn, args.abort_every, args.producers)
        records = args.transactions * args.records_per_txn
        fb = args.fetch_bytes
        timings = alternate({
            "kafka uncommitted": lambda: kafka_uncommitted(log, fb) and None,
            "kafka committed": lambda: kafka_committed(log, fb) and None,
            "http uncommitted": lambda: http_records(log, fb, False) and None,
            "http committed": lambda: http_records(log, fb, True) and None,
        }, rounds=args.rounds)
        rows = []
        verdicts = []
        for door in ("kafka", "http"):
            unc, com = timings[f"{door} uncommitted"], timings[f"{door} committed"]
            ratio = paired_ratio(unc, com)  # throughput ratio: committed / uncommitted
            verdicts.append(ratio >= TARGET)
            rows.append([door, f"{records / unc.median:,.0f}", f"{records / com.median:,.0f}", f"{ratio:.2f}x",
                         f"{'met' if ratio >= TARGET else 'MISSED'} (>= {TARGET}x)"])
        log.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    table = markdown_table(["door's work", "read_uncommitted records/s", "read_committed records/s", "ratio",
                            "target"], rows)
    machine["conditions"] = conditions(machine["nproc"], others.cpus(), args.note)
    print(table)
    print(machine["conditions"])
    if not args.no_write:
        body = (f"### read_committed against read_uncommitted (`bench/read_committed.py`)\n\n"
                f"{started:%Y-%m-%d %H:%M} UTC, revision {git_revision(ROOT)}; {args.transactions:,} transactions "
                f"of {args.records_per_txn} records from {args.producers} producers, one in {args.abort_every} "
                f"aborted; fetches of {args.fetch_bytes:,} bytes; median of {args.rounds} alternated rounds. "
                f"{machine['conditions']}\n\n{table}\n")
        rewrite_section(DOC_PATH, "read-committed", body)
    return 0 if all(verdicts) else 1


if __name__ == "__main__":
    raise SystemExit(main())
